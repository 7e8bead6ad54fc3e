#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writes all of `bytes` to `descriptor` at its offset, again after a signal cut a write
/// short; the errno of a failure, or `nil`. Blocking: for the I/O pool (the cache's disk
/// tier, an HLS stream's assembly).
func writeFully(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) -> Int32? {
    guard let base = bytes.baseAddress else { return nil }
    var done = 0
    while done < bytes.count {
        let count = write(descriptor, base + done, bytes.count - done)
        if count >= 0 {
            done += count
        } else if errno != EINTR {
            return errno
        }
    }
    return nil
}
