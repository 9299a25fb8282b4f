/* A C program written for vfd-gds, as its own examples are: it includes H5FDgds.h, selects the
 * driver with H5Pset_fapl_gds and links with -lhdf5_vfd_gds. The tests (tests/vfd_gds_compat.rs)
 * build it against h5gds's compatibility library and HDF5 built from source, and run it:
 *
 *   host FILE             write and read back a dataset from host buffers; sec2 reads the same bytes
 *   device FILE           the same from device buffers (cuMemAlloc in the primary context, as
 *                         cudaMalloc allocates, through libcuda.so.1: the CUDA emulator in the
 *                         tests, a real GPU under H5GDS_TEST_REAL_CUDA)
 *   refuse FILE           sizes vfd-gds or h5gds refuse fail with the list left unchanged
 *   other PLUGIN FILE     another driver named gds (PLUGIN's class) registered first; host again
 *   links-make DIR        DIR/main.h5 with a virtual dataset of DIR/src.h5 and an external link to
 *                         DIR/ext.h5 (all with sec2)
 *   links-read DIR HOW    reads both through gds, the list set by HOW: "fapl_gds"
 *                         (H5Pset_fapl_gds with an 8 MiB copy buffer) or "config" (the driver by
 *                         name with "nthreads=3")
 *
 * Each mode prints "<MODE> OK" on success and exits 0; any failure prints why and exits 1. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <H5FDdevelop.h>
#include <hdf5.h>

#include "H5FDgds.h"

#define ROWS 256
#define COLS 300
#define N (ROWS * COLS)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED at line %d: ", __LINE__);                                      \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void fill(int *data, int seed) {
    for (int i = 0; i < N; i++)
        data[i] = (int)((uint32_t)i * 2654435761u) ^ seed;
}

static hid_t gds_fapl(size_t cbuf) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(fapl >= 0, "H5Pcreate");
    CHECK(H5Pset_fapl_gds(fapl, MBOUNDARY_DEF, FBSIZE_DEF, cbuf) >= 0, "H5Pset_fapl_gds");
    size_t boundary = 0, block = 0, copy = 0;
    CHECK(H5Pget_fapl_gds(fapl, &boundary, &block, &copy) >= 0, "H5Pget_fapl_gds");
    CHECK(boundary == MBOUNDARY_DEF && block == FBSIZE_DEF && copy == cbuf,
          "H5Pget_fapl_gds gave %zu %zu %zu", boundary, block, copy);
    return fapl;
}

/* The dataset's bytes as sec2 reads them. */
static void read_with_sec2(const char *path, int *out) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(file >= 0, "sec2 open of %s", path);
    hid_t dset = H5Dopen2(file, "dset", H5P_DEFAULT);
    CHECK(dset >= 0 && H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0,
          "sec2 read");
    H5Dclose(dset);
    H5Fclose(file);
}

static hid_t create_dataset(hid_t file) {
    hsize_t dims[2] = {ROWS, COLS};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(file, "dset", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT);
    CHECK(dset >= 0, "H5Dcreate2");
    H5Sclose(space);
    return dset;
}

static void host(const char *path) {
    static int data[N], back[N], sec2[N];
    fill(data, 7);
    hid_t fapl = gds_fapl(8 << 20);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0, "H5Fcreate through gds");
    hid_t dset = create_dataset(file);
    CHECK(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "H5Dwrite");
    H5Dclose(dset);
    H5Fclose(file);

    file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0, "H5Fopen through gds");
    dset = H5Dopen2(file, "dset", H5P_DEFAULT);
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0, "H5Dread");
    H5Dclose(dset);
    H5Fclose(file);
    H5Pclose(fapl);
    CHECK(memcmp(back, data, sizeof data) == 0, "read back differs from written");
    read_with_sec2(path, sec2);
    CHECK(memcmp(sec2, data, sizeof data) == 0, "sec2 reads other bytes");
}

/* The CUDA driver API, loaded at run time (no CUDA headers or libraries needed to build). */
typedef int (*cu_init_t)(unsigned);
typedef int (*cu_device_get_t)(int *, int);
typedef int (*cu_primary_ctx_retain_t)(void **, int);
typedef int (*cu_ctx_set_current_t)(void *);
typedef int (*cu_mem_alloc_t)(unsigned long long *, size_t);
typedef int (*cu_mem_free_t)(unsigned long long);
typedef int (*cu_htod_t)(unsigned long long, const void *, size_t);
typedef int (*cu_dtoh_t)(void *, unsigned long long, size_t);

static void *cuda_symbol(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    CHECK(p != NULL, "libcuda.so.1 has no %s", name);
    return p;
}

static void device(const char *path) {
    static int data[N], back[N], sec2[N];
    fill(data, 11);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CHECK(lib != NULL, "libcuda.so.1: %s", dlerror());
    cu_init_t cu_init = (cu_init_t)cuda_symbol(lib, "cuInit");
    cu_device_get_t device_get = (cu_device_get_t)cuda_symbol(lib, "cuDeviceGet");
    cu_primary_ctx_retain_t retain =
        (cu_primary_ctx_retain_t)cuda_symbol(lib, "cuDevicePrimaryCtxRetain");
    cu_ctx_set_current_t set_current = (cu_ctx_set_current_t)cuda_symbol(lib, "cuCtxSetCurrent");
    cu_mem_alloc_t mem_alloc = (cu_mem_alloc_t)cuda_symbol(lib, "cuMemAlloc_v2");
    cu_mem_free_t mem_free = (cu_mem_free_t)cuda_symbol(lib, "cuMemFree_v2");
    cu_htod_t htod = (cu_htod_t)cuda_symbol(lib, "cuMemcpyHtoD_v2");
    cu_dtoh_t dtoh = (cu_dtoh_t)cuda_symbol(lib, "cuMemcpyDtoH_v2");
    int dev = 0;
    void *ctx = NULL;
    unsigned long long src = 0, dst = 0;
    /* The device's primary context, as cudaMalloc uses. */
    CHECK(cu_init(0) == 0 && device_get(&dev, 0) == 0 && retain(&ctx, dev) == 0 &&
              set_current(ctx) == 0,
          "no CUDA device");
    CHECK(mem_alloc(&src, sizeof data) == 0 && mem_alloc(&dst, sizeof data) == 0, "cuMemAlloc");
    CHECK(htod(src, data, sizeof data) == 0, "cuMemcpyHtoD");

    hid_t fapl = gds_fapl(H5FD_GDS_CBSIZE_DEF);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0, "H5Fcreate through gds");
    hid_t dset = create_dataset(file);
    CHECK(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, (void *)(uintptr_t)src) >= 0,
          "H5Dwrite from device memory");
    H5Dclose(dset);
    H5Fclose(file);

    file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0, "H5Fopen through gds");
    dset = H5Dopen2(file, "dset", H5P_DEFAULT);
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, (void *)(uintptr_t)dst) >= 0,
          "H5Dread into device memory");
    H5Dclose(dset);
    H5Fclose(file);
    H5Pclose(fapl);
    CHECK(dtoh(back, dst, sizeof back) == 0, "cuMemcpyDtoH");
    CHECK(memcmp(back, data, sizeof data) == 0, "device read back differs from written");
    read_with_sec2(path, sec2);
    CHECK(memcmp(sec2, data, sizeof data) == 0, "sec2 reads other bytes than the device wrote");
    mem_free(src);
    mem_free(dst);
}

static void refuse(const char *path) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t before = H5Pget_driver(fapl);
    /* vfd-gds's rule: the copy buffer a multiple of the block size. */
    CHECK(H5Pset_fapl_gds(fapl, 4096, 4096, 4096 * 3 + 512) < 0, "odd copy buffer accepted");
    /* h5gds's bounce buffer range (4 KiB to 1 GiB). */
    CHECK(H5Pset_fapl_gds(fapl, 4096, 4096, (size_t)2 << 30) < 0, "2 GiB copy buffer accepted");
    CHECK(H5Pget_driver(fapl) == before, "a refused H5Pset_fapl_gds changed the list");
    CHECK(H5Pget_fapl_gds(fapl, NULL, NULL, NULL) < 0, "H5Pget_fapl_gds on a sec2 list succeeded");
    /* The list still works, with its old driver. */
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0, "H5Fcreate with the unchanged list");
    H5Fclose(file);
    H5Pclose(fapl);
}

typedef const void *(*plugin_info_t)(void);

/* The other driver's callbacks: HDF5 requires them to register a class; none may ever run, since
 * every file here must go through h5gds. */
static H5FD_t *other_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
    (void)flags, (void)fapl, (void)maxaddr;
    fprintf(stderr, "the other gds driver was asked to open %s\n", name);
    return NULL;
}
static herr_t other_close(H5FD_t *file) { (void)file; return -1; }
static haddr_t other_get_eoa(const H5FD_t *file, H5FD_mem_t type) {
    (void)file, (void)type;
    return HADDR_UNDEF;
}
static herr_t other_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr) {
    (void)file, (void)type, (void)addr;
    return -1;
}
static herr_t other_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                         void *buf) {
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}
static herr_t other_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                          const void *buf) {
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}

/* PLUGIN's class (tests/shims/other_gds_driver.c: name "gds", value 512, as vfd-gds's) is
 * registered first, with the callbacks HDF5 requires; then the program runs as `host`. */
static void other(const char *plugin, const char *path) {
    void *lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "%s: %s", plugin, dlerror());
    plugin_info_t info = (plugin_info_t)dlsym(lib, "H5PLget_plugin_info");
    CHECK(info != NULL, "%s has no H5PLget_plugin_info", plugin);
    static H5FD_class_t cls;
    memcpy(&cls, info(), offsetof(H5FD_class_t, maxaddr));
    CHECK(cls.value == H5FD_GDS_VALUE && strcmp(cls.name, H5FD_GDS_NAME) == 0,
          "the stand-in is not named gds, 512");
    cls.maxaddr = HADDR_MAX;
    cls.fc_degree = H5F_CLOSE_WEAK;
    cls.open = other_open;
    cls.close = other_close;
    cls.get_eoa = other_get_eoa;
    cls.set_eoa = other_set_eoa;
    cls.get_eof = other_get_eoa;
    cls.read = other_read;
    cls.write = other_write;
    hid_t theirs = H5FDregister(&cls);
    CHECK(theirs >= 0, "registering the other gds driver");
    hid_t ours = H5FD_GDS;
    CHECK(ours >= 0 && ours != theirs, "H5FD_gds_init gave %lld, the other driver is %lld",
          (long long)ours, (long long)theirs);
    CHECK(H5FD_gds_init() == ours, "a second H5FD_gds_init gave another id");
    /* A list set to the other gds: its info is not h5gds's, and is not read as such. */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_driver(fapl, theirs, NULL) >= 0, "H5Pset_driver(other gds)");
    size_t sizes[3] = {0, 0, 0};
    CHECK(H5Pget_fapl_gds(fapl, &sizes[0], &sizes[1], &sizes[2]) >= 0 &&
              sizes[0] == H5FD_GDS_MBOUNDARY_DEF && sizes[2] == H5FD_GDS_CBSIZE_DEF,
          "H5Pget_fapl_gds on the other gds's list");
    H5Pclose(fapl);
    host(path);
}

static void links_make(const char *dir) {
    static int data[N];
    char src[4096], ext[4096], main_path[4096];
    snprintf(src, sizeof src, "%s/src.h5", dir);
    snprintf(ext, sizeof ext, "%s/ext.h5", dir);
    snprintf(main_path, sizeof main_path, "%s/main.h5", dir);
    const char *targets[2] = {src, ext};
    for (int t = 0; t < 2; t++) {
        fill(data, 100 + t);
        hid_t file = H5Fcreate(targets[t], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t dset = create_dataset(file);
        CHECK(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "write");
        H5Dclose(dset);
        H5Fclose(file);
    }
    hsize_t dims[2] = {ROWS, COLS};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_virtual(dcpl, space, "src.h5", "dset", space) >= 0, "H5Pset_virtual");
    hid_t file = H5Fcreate(main_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t vds = H5Dcreate2(file, "vds", H5T_NATIVE_INT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(vds >= 0, "virtual dataset");
    CHECK(H5Lcreate_external("ext.h5", "dset", file, "ext", H5P_DEFAULT, H5P_DEFAULT) >= 0,
          "external link");
    H5Dclose(vds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
}

static void links_read(const char *dir, const char *how) {
    static int data[N], back[N];
    char main_path[4096];
    snprintf(main_path, sizeof main_path, "%s/main.h5", dir);
    hid_t fapl;
    if (strcmp(how, "fapl_gds") == 0) {
        fapl = gds_fapl(8 << 20);
    } else {
        CHECK(strcmp(how, "config") == 0, "unknown list %s", how);
        CHECK(H5FD_gds_init() >= 0, "H5FD_gds_init");
        fapl = H5Pcreate(H5P_FILE_ACCESS);
        CHECK(H5Pset_driver_by_name(fapl, H5FD_GDS_NAME, "nthreads=3") >= 0,
              "H5Pset_driver_by_name");
    }
    /* The source and the link target resolve next to main.h5. */
    hid_t file = H5Fopen(main_path, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0, "H5Fopen through gds");
    const char *names[2] = {"vds", "ext"};
    for (int t = 0; t < 2; t++) {
        fill(data, 100 + t);
        hid_t dset = H5Dopen2(file, names[t], H5P_DEFAULT);
        CHECK(dset >= 0, "open %s", names[t]);
        CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0, "read %s",
              names[t]);
        CHECK(memcmp(back, data, sizeof data) == 0, "%s read other bytes", names[t]);
        H5Dclose(dset);
    }
    H5Fclose(file);
    H5Pclose(fapl);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3, "usage: %s MODE ARGS...", argv[0]);
    const char *mode = argv[1];
    if (strcmp(mode, "host") == 0)
        host(argv[2]);
    else if (strcmp(mode, "device") == 0)
        device(argv[2]);
    else if (strcmp(mode, "refuse") == 0)
        refuse(argv[2]);
    else if (strcmp(mode, "other") == 0 && argc >= 4)
        other(argv[2], argv[3]);
    else if (strcmp(mode, "links-make") == 0)
        links_make(argv[2]);
    else if (strcmp(mode, "links-read") == 0 && argc >= 4)
        links_read(argv[2], argv[3]);
    else
        CHECK(0, "unknown mode %s", mode);
    printf("%s OK\n", mode);
    return 0;
}
