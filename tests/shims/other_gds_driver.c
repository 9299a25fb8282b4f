/* A stand-in for another HDF5 virtual file driver registered under h5gds's name and value: the
 * GDS driver other projects ship (vfd-gds) answers to "gds" and 512 too. Only the plugin entry
 * points and the first fields of its class are real; tests use it to check that h5gds tells the
 * two apart (it is never asked to open a file). */
#include <stddef.h>

struct class_head {
    unsigned version; /* H5FD_CLASS_VERSION */
    int value;        /* H5FD_class_value_t */
    const char *name;
    char rest[320];   /* the rest of H5FD_class_t (336 bytes on x86-64), all zero */
};

static const struct class_head other_gds = {1, 512, "gds", {0}};

int H5PLget_plugin_type(void) { return 2; /* H5PL_TYPE_VFD */ }

const void *H5PLget_plugin_info(void) { return &other_gds; }
