#define _GNU_SOURCE
#include "CHaulShims.h"

#include <errno.h>
#include <fcntl.h>

#if defined(__linux__)
#include <linux/falloc.h>
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
