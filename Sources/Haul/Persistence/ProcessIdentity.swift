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
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return nil
        }
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return trimmed.isEmpty ? nil : trimmed
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
