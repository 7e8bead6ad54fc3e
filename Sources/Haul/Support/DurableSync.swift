#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Flushes a file or directory to stable storage, as a power cut requires: `fsync`, or on
/// Apple platforms `fcntl(F_FULLFSYNC)`, since Darwin's `fsync` only hands the data to the
/// drive, whose cache may lose it. Returns 0, or -1 with `errno` set.
///
/// Where `F_FULLFSYNC` is not supported (some network and FAT file systems), it falls back
/// to `fsync`. Linux is unchanged: its `fsync` already flushes the drive's cache.
func durableSync(_ descriptor: Int32) -> Int32 {
    #if canImport(Darwin)
    if fcntl(descriptor, F_FULLFSYNC) == 0 { return 0 }
    #endif
    return fsync(descriptor)
}
