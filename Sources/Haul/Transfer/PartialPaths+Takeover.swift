#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Taking over a partial file from an owner that may still be writing it.
extension PartialPaths {
    /// Gives the partial file (and its metadata) a file of its own: a copy of each,
    /// renamed over it. Blocking: for the I/O pool.
    ///
    /// A job taken over from an owner whose lease expired (``ClaimedJob/mayBeWritten``)
    /// may still be open in that owner, only stopped (SIGSTOP, a VM paused, a long
    /// stall). On storage the owners share, it would write into whatever file its
    /// descriptor names once it runs again, and this process renames its partial into
    /// place as the final file: without the copy, the stale owner's late writes would land
    /// in the finished file. After the copy they land in a file no name leads to any more.
    /// Returns the paths it copied (none when there was no partial yet).
    func detachFromPreviousWriter() throws(DownloadError) -> [String] {
        var copied: [String] = []
        for path in [partial, metadata] where try Self.replaceWithCopy(path) { copied.append(path) }
        return copied
    }

    /// Replaces the file at `path` with a copy of itself (a new inode); `false` if there is
    /// no such file.
    static func replaceWithCopy(_ path: String) throws(DownloadError) -> Bool {
        let source = open(path, O_RDONLY | O_CLOEXEC)
        guard source >= 0 else {
            if errno == ENOENT { return false }
            throw Self.takeoverFailure("cannot open \(path)")
        }
        defer { close(source) }
        let temporary = path + ".haul-takeover"
        let target = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard target >= 0 else { throw Self.takeoverFailure("cannot create \(temporary)") }
        var failure: DownloadError?
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        copying: while true {
            let count = read(source, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            if count < 0 {
                failure = Self.takeoverFailure("cannot read \(path)")
                break
            }
            if count == 0 { break }
            var offset = 0
            while offset < count {
                let written = buffer.withUnsafeBytes { write(target, $0.baseAddress! + offset, count - offset) }
                if written < 0, errno == EINTR { continue }
                if written <= 0 {
                    failure = Self.takeoverFailure("cannot write \(temporary)")
                    break copying
                }
                offset += written
            }
        }
        if failure == nil, fsync(target) != 0 { failure = Self.takeoverFailure("cannot fsync \(temporary)") }
        close(target)
        if failure == nil, rename(temporary, path) != 0 { failure = Self.takeoverFailure("cannot rename \(temporary)") }
        if let failure {
            _ = unlink(temporary)
            throw failure
        }
        return true
    }

    private static func takeoverFailure(_ message: String) -> DownloadError {
        DownloadError(.fileSystem, "could not take over the partial file: \(message): \(String(cString: strerror(errno)))")
    }
}
