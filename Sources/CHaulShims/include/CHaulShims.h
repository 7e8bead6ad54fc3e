#ifndef CHAUL_SHIMS_H
#define CHAUL_SHIMS_H

#include <sys/types.h>

/// Reserves `length` bytes at `offset` without changing the file's size
/// (Linux `fallocate` with FALLOC_FL_KEEP_SIZE). Returns 0, or -1 with errno set;
/// errno is ENOSYS where the platform has no such call.
int chaul_reserve_keep_size(int fd, off_t offset, off_t length);

/// Whether `fd` is on a file system held in memory (Linux tmpfs or ramfs), where
/// reserving space allocates and zeroes memory. Returns 1 or 0 (0 elsewhere).
int chaul_is_memory_backed(int fd);

/// Atomically exchanges two paths on one file system, both of which must exist (Linux
/// `renameat2` with RENAME_EXCHANGE, Darwin `renamex_np` with RENAME_SWAP). Returns 0, or
/// -1 with errno set; errno is ENOSYS or EINVAL where the platform or file system cannot.
int chaul_exchange(const char *first, const char *second);

/// Flushes the whole file system holding `fd` to stable storage (Linux `syncfs`; `sync`
/// elsewhere). Returns 0, or -1 with errno set.
int chaul_sync_filesystem(int fd);

/// Tells glibc's malloc to keep up to `bytes` of freed memory instead of returning it
/// to the kernel (M_TRIM_THRESHOLD), and to serve blocks below `mmap_threshold` from the
/// heap (M_MMAP_THRESHOLD). Returns 1 on success, 0 where unsupported.
int chaul_keep_freed_memory(long bytes, long mmap_threshold);

/// Starts `path` with `argv` and `envp` (both NULL-terminated) through posix_spawn, giving
/// the child `input`, `output` and `error` as its descriptors 0, 1 and 2 (a negative one
/// means /dev/null), every other descriptor closed, no signal blocked or ignored, and, when
/// `directory` is not NULL, that working directory. Unlike Foundation's `Process` on
/// Linux, it does not read /proc/self/fd to find descriptors to close (swift-corelibs-
/// foundation#5472: an over-read there crashes the parent now and then).
/// Returns 0 with `*pid` set, or an errno value (ENOSYS where processes cannot be spawned).
int chaul_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                int input, int output, int error, const char *directory);

#endif
