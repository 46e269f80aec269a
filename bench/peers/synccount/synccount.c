/* Counts the calls that make written data durable, in any process it is preloaded into
 * (LD_PRELOAD): fsync, fdatasync, msync(MS_SYNC), sync_file_range waiting for the write,
 * and pwritev2 with RWF_DSYNC or RWF_SYNC (a write and a sync in one call). Every system the
 * side-by-side benchmark compares is counted the same way, whatever library (SQLite, Python's
 * os module) makes the call. tl_sync_count() reads the count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef RWF_DSYNC
#define RWF_DSYNC 0x00000002
#endif
#ifndef RWF_SYNC
#define RWF_SYNC 0x00000004
#endif

static atomic_long syncs;

long tl_sync_count(void) { return atomic_load(&syncs); }

#define REAL(name, type) static type real; if (!real) real = (type)dlsym(RTLD_NEXT, name)
typedef int (*fd_fn)(int);
typedef int (*msync_fn)(void *, size_t, int);
typedef int (*range_fn)(int, off_t, off_t, unsigned int);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec *, int, off_t, int);

int fsync(int fd) {
    REAL("fsync", fd_fn);
    atomic_fetch_add(&syncs, 1);
    return real(fd);
}

int fdatasync(int fd) {
    REAL("fdatasync", fd_fn);
    atomic_fetch_add(&syncs, 1);
    return real(fd);
}

int msync(void *addr, size_t length, int flags) {
    REAL("msync", msync_fn);
    if (flags & MS_SYNC) atomic_fetch_add(&syncs, 1);
    return real(addr, length, flags);
}

int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags) {
    REAL("sync_file_range", range_fn);
    if (flags & SYNC_FILE_RANGE_WAIT_AFTER) atomic_fetch_add(&syncs, 1);
    return real(fd, offset, nbytes, flags);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    REAL("pwritev2", pwritev2_fn);
    if (flags & (RWF_DSYNC | RWF_SYNC)) atomic_fetch_add(&syncs, 1);
    return real(fd, iov, count, offset, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    REAL("pwritev64v2", pwritev2_fn);
    if (flags & (RWF_DSYNC | RWF_SYNC)) atomic_fetch_add(&syncs, 1);
    return real(fd, iov, count, offset, flags);
}
