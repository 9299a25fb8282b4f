/* LD_PRELOAD shim for tests: storage that fails. The N-th call of one operation on a file whose
 * path contains a given string fails the way the variables below say; every other call goes to
 * the C library unchanged.
 *
 *   H5GDS_FAULT_OP    pread | pwrite | fsync | rename  (pread counts pread and pread64, pwrite
 *                     pwrite and pwrite64, fsync fsync and fdatasync: glibc's 64-bit names are
 *                     the same calls, and programs reach either; rename counts rename and
 *                     renameat, matched on the path renamed)
 *   H5GDS_FAULT_AT    N: the N-th such call (1-based, counted over the whole process) fails first
 *   H5GDS_FAULT_TIMES how many calls fail from the N-th on (default 1; "all": every one after)
 *   H5GDS_FAULT_KIND  eio | enospc | eintr: fails with that errno, transferring nothing;
 *                     short: transfers at most half the bytes asked (at least 1) and says so, as
 *                     POSIX allows; kill: the process is killed (SIGKILL) before the call, as by
 *                     `kill -9` at that point; count: nothing fails, the calls are only logged
 *                     (to learn how many a program makes)
 *   H5GDS_FAULT_PATH  only files whose path (from /proc/self/fd) contains this string count
 *                     (default: every file)
 *   H5GDS_FAULT_MIN_BYTES  only reads and writes of at least this many bytes count (default 0):
 *                     raw data, not HDF5's small metadata transfers
 *   H5GDS_FAULT_LOG   a file to which a line is appended for each call made to fail, so a test
 *                     can show that the fault happened
 *
 * Read once, at the first call. Thread-safe: the count is atomic. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum op { OP_NONE, OP_PREAD, OP_PWRITE, OP_FSYNC, OP_RENAME };
enum kind { KIND_EIO, KIND_ENOSPC, KIND_EINTR, KIND_SHORT, KIND_KILL, KIND_COUNT };

static struct {
    int ready;
    enum op op;
    enum kind kind;
    unsigned long at, times; /* times == 0: every call from `at` on */
    unsigned long min_bytes;
    const char *path, *log;
} cfg;
static unsigned long calls;

static void configure(void) {
    if (__atomic_load_n(&cfg.ready, __ATOMIC_ACQUIRE))
        return;
    const char *op = getenv("H5GDS_FAULT_OP"), *kind = getenv("H5GDS_FAULT_KIND");
    const char *at = getenv("H5GDS_FAULT_AT"), *times = getenv("H5GDS_FAULT_TIMES");
    cfg.op = !op                      ? OP_NONE
             : !strcmp(op, "pread")  ? OP_PREAD
             : !strcmp(op, "pwrite") ? OP_PWRITE
             : !strcmp(op, "fsync")  ? OP_FSYNC
             : !strcmp(op, "rename") ? OP_RENAME
                                     : OP_NONE;
    cfg.kind = !kind                     ? KIND_EIO
               : !strcmp(kind, "enospc") ? KIND_ENOSPC
               : !strcmp(kind, "eintr")  ? KIND_EINTR
               : !strcmp(kind, "short")  ? KIND_SHORT
               : !strcmp(kind, "kill")   ? KIND_KILL
               : !strcmp(kind, "count")  ? KIND_COUNT
                                         : KIND_EIO;
    cfg.at = at ? strtoul(at, NULL, 10) : 1;
    cfg.times = !times ? 1 : !strcmp(times, "all") ? 0 : strtoul(times, NULL, 10);
    const char *min_bytes = getenv("H5GDS_FAULT_MIN_BYTES");
    cfg.min_bytes = min_bytes ? strtoul(min_bytes, NULL, 10) : 0;
    cfg.path = getenv("H5GDS_FAULT_PATH");
    cfg.log = getenv("H5GDS_FAULT_LOG");
    __atomic_store_n(&cfg.ready, 1, __ATOMIC_RELEASE);
}

static int watched_file(int fd) {
    if (!cfg.path || !*cfg.path)
        return 1;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = 0;
    return strstr(target, cfg.path) != NULL;
}

static void log_fault(const char *name, unsigned long nth, int fd, size_t count) {
    if (!cfg.log)
        return;
    int saved = errno;
    int out = open(cfg.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out >= 0) {
        char line[128];
        int n = snprintf(line, sizeof line, "%s call %lu fd %d bytes %zu pid %d\n", name, nth, fd, count,
                         (int)getpid());
        if (n > 0)
            (void)!write(out, line, (size_t)n);
        close(out);
    }
    errno = saved;
}

/* Whether this call (of `op`, on `fd`, or on `path` where fd < 0) is one to fail; counts it. */
static int to_fail_at(enum op op, int fd, const char *path, size_t count, const char *name) {
    configure();
    if (cfg.op != op)
        return 0;
    if (fd >= 0 ? !watched_file(fd) : (cfg.path && *cfg.path && !strstr(path, cfg.path)))
        return 0;
    unsigned long nth = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (nth < cfg.at || (cfg.times && nth >= cfg.at + cfg.times))
        return 0;
    log_fault(name, nth, fd, count);
    if (cfg.kind == KIND_KILL)
        raise(SIGKILL);
    return cfg.kind != KIND_COUNT;
}

static int to_fail(enum op op, int fd, size_t count, const char *name) {
    return to_fail_at(op, fd, NULL, count, name);
}

/* The errno of a failing call, or 0 for a short transfer. */
static int fault_errno(void) {
    switch (cfg.kind) {
    case KIND_ENOSPC:
        return ENOSPC;
    case KIND_EINTR:
        return EINTR;
    case KIND_SHORT:
        return 0;
    default:
        return EIO;
    }
}

static size_t cfg_min_bytes(void) {
    configure();
    return cfg.min_bytes;
}

static size_t shortened(size_t count) {
    return count > 1 ? count / 2 : count;
}

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef int (*sync_fn)(int);

static ssize_t do_pread(const char *name, int fd, void *buf, size_t count, off_t offset) {
    pread_fn real = REAL(name, pread_fn);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (count && count >= cfg_min_bytes() && to_fail(OP_PREAD, fd, count, name)) {
        int e = fault_errno();
        if (e) {
            errno = e;
            return -1;
        }
        count = shortened(count);
    }
    return real(fd, buf, count, offset);
}

static ssize_t do_pwrite(const char *name, int fd, const void *buf, size_t count, off_t offset) {
    pwrite_fn real = REAL(name, pwrite_fn);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (count && count >= cfg_min_bytes() && to_fail(OP_PWRITE, fd, count, name)) {
        int e = fault_errno();
        if (e) {
            errno = e;
            return -1;
        }
        count = shortened(count);
    }
    return real(fd, buf, count, offset);
}

static int do_sync(const char *name, int fd) {
    sync_fn real = REAL(name, sync_fn);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (to_fail(OP_FSYNC, fd, 0, name)) {
        int e = fault_errno();
        if (e) {
            errno = e;
            return -1;
        }
    }
    return real(fd);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    return do_pread("pread", fd, buf, count, offset);
}
ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    return do_pread("pread64", fd, buf, count, offset);
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    return do_pwrite("pwrite", fd, buf, count, offset);
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    return do_pwrite("pwrite64", fd, buf, count, offset);
}
int fsync(int fd) {
    return do_sync("fsync", fd);
}
int fdatasync(int fd) {
    return do_sync("fdatasync", fd);
}

typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);

int rename(const char *from, const char *to) {
    rename_fn real = REAL("rename", rename_fn);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (to_fail_at(OP_RENAME, -1, from, 0, "rename")) {
        errno = fault_errno() ? fault_errno() : EIO;
        return -1;
    }
    return real(from, to);
}
int renameat(int from_dir, const char *from, int to_dir, const char *to) {
    renameat_fn real = REAL("renameat", renameat_fn);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (to_fail_at(OP_RENAME, -1, from, 0, "renameat")) {
        errno = fault_errno() ? fault_errno() : EIO;
        return -1;
    }
    return real(from_dir, from, to_dir, to);
}
