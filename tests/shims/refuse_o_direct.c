/* LD_PRELOAD shim for tests: open() with O_DIRECT fails with EINVAL, as on file systems that do
 * not support direct I/O (every file system of this project's machines accepts it, so the
 * driver's fallbacks could not be tested otherwise). Everything else goes to the real open. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

typedef int (*open_fn)(const char *, int, ...);

static int forward(const char *symbol, const char *path, int flags, mode_t mode) {
    open_fn real = (open_fn)dlsym(RTLD_NEXT, symbol);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(path, flags, mode);
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    return forward("open", path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    if (flags & O_DIRECT) {
        errno = EINVAL;
        return -1;
    }
    return forward("open64", path, flags, mode);
}
