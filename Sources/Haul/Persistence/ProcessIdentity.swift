import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which boot of the machine this is. (Which processes are alive is the business of
/// ``OwnerLocks``: a PID says nothing reliable about that.)
enum ProcessIdentity {
    /// An identifier of the machine's current boot, or `nil` where the platform cannot say.
    ///
    /// Bytes written to a file survive the death of the process that wrote them, until the
    /// machine itself goes down. So after a process crash in the same boot, a partial file's
    /// length can be trusted; after a reboot only the fsynced bytes the journal recorded can.
    static let bootID: String? = {
        #if os(Linux)
        // A UUID and a newline; read with one call, as the first thing every run asks.
        let fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[..<count], as: UTF8.self).filter { !$0.isWhitespace }
        return text.isEmpty ? nil : text
        #elseif canImport(Darwin)
        var boottime = timeval()
        var size = MemoryLayout<timeval>.size
        guard sysctlbyname("kern.boottime", &boottime, &size, nil, 0) == 0 else { return nil }
        return "\(boottime.tv_sec).\(boottime.tv_usec)"
        #else
        return nil
        #endif
    }()
}
