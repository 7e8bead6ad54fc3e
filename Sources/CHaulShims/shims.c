#define _GNU_SOURCE
#include "CHaulShims.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#if defined(__APPLE__)
#include <TargetConditionals.h>
#endif
#if !defined(__APPLE__) || TARGET_OS_OSX
#include <spawn.h>
#define CHAUL_CAN_SPAWN 1
#endif

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

int chaul_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                int input, int output, int error, const char *directory) {
#if defined(CHAUL_CAN_SPAWN)
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    const int sources[3] = {input, output, error};
    const int flags[3] = {O_RDONLY, O_WRONLY, O_WRONLY};
    for (int target = 0; target < 3 && result == 0; target++) {
        if (sources[target] < 0) {
            result = posix_spawn_file_actions_addopen(&actions, target, "/dev/null", flags[target], 0);
        } else {
            // (dup2 onto itself clears close-on-exec, as POSIX 2024 and glibc 2.29 say.)
            result = posix_spawn_file_actions_adddup2(&actions, sources[target], target);
        }
    }
    short spawnFlags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
#if defined(__linux__)
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#elif defined(__APPLE__)
    spawnFlags |= POSIX_SPAWN_CLOEXEC_DEFAULT;
#endif
    if (result == 0 && directory != NULL) result = posix_spawn_file_actions_addchdir_np(&actions, directory);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &all);
    if (result == 0) result = posix_spawnattr_setflags(&attributes, spawnFlags);
    if (result == 0) result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
#else
    (void)pid; (void)path; (void)argv; (void)envp;
    (void)input; (void)output; (void)error; (void)directory;
    return ENOSYS;
#endif
}
