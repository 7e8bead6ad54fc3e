#ifndef CHAUL_SHIMS_H
#define CHAUL_SHIMS_H

#include <sys/types.h>

/// Reserves `length` bytes at `offset` without changing the file's size
/// (Linux `fallocate` with FALLOC_FL_KEEP_SIZE). Returns 0, or -1 with errno set;
/// errno is ENOSYS where the platform has no such call.
int chaul_reserve_keep_size(int fd, off_t offset, off_t length);

#endif
