#define _GNU_SOURCE
#include "CHaulShims.h"

#include <errno.h>
#include <fcntl.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <linux/falloc.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#elif defined(__APPLE__)
#include <stdio.h>
#include <unistd.h>
#else
#include <unistd.h>
#endif

int chaul_reserve_keep_size(int fd, off_t offset, off_t length) {
#if defined(__linux__)
    return fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length);
#else
    (void)fd;
    (void)offset;
    (void)length;
    errno = ENOSYS;
    return -1;
#endif
}

int chaul_is_memory_backed(int fd) {
#if defined(__linux__)
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return 0;
    return info.f_type == 0x01021994 /* TMPFS_MAGIC */ || info.f_type == (long)0x858458f6 /* RAMFS_MAGIC */;
#else
    (void)fd;
    return 0;
#endif
}

int chaul_exchange(const char *first, const char *second) {
#if defined(__linux__) && defined(SYS_renameat2)
    return (int)syscall(SYS_renameat2, AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE);
#elif defined(__APPLE__)
    return renamex_np(first, second, RENAME_SWAP);
#else
    (void)first;
    (void)second;
    errno = ENOSYS;
    return -1;
#endif
}

int chaul_sync_filesystem(int fd) {
#if defined(__linux__)
    return syncfs(fd);
#else
    (void)fd;
    sync();
    return 0;
#endif
}

int chaul_keep_freed_memory(long bytes, long mmap_threshold) {
#if defined(__GLIBC__)
    /* Setting M_TRIM_THRESHOLD also freezes glibc's sliding mmap threshold at its
       default of 128 KiB, so it is set explicitly as well: below it, blocks come from
       the heap and are reused instead of being mapped and unmapped each time. */
    if (mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) != 1) return 0;
    return mallopt(M_TRIM_THRESHOLD, (int)bytes);
#else
    (void)mmap_threshold;
    (void)bytes;
    return 0;
#endif
}
