/* LD_PRELOAD shim for tests: fstatfs() reports every regular file and directory as living on NFS (f_type
 * NFS_SUPER_MAGIC), so that the driver's and the emulator's treatment of a shared file system
 * cuFile may not support for GDS can be tested on a machine with local disks only. Everything
 * else is the real fstatfs's answer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/vfs.h>

#define NFS_SUPER_MAGIC 0x6969

typedef int (*fstatfs_fn)(int, struct statfs *);

static int on_nfs(const char *symbol, int fd, struct statfs *buf) {
    fstatfs_fn real = (fstatfs_fn)dlsym(RTLD_NEXT, symbol);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    int ret = real(fd, buf);
    struct stat st;
    if (ret == 0 && fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
        buf->f_type = NFS_SUPER_MAGIC;
    }
    return ret;
}

int fstatfs(int fd, struct statfs *buf) { return on_nfs("fstatfs", fd, buf); }

int fstatfs64(int fd, struct statfs64 *buf) {
    return on_nfs("fstatfs64", fd, (struct statfs *)buf);
}
