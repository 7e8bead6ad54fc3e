import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A process that runs downloads recorded in a journal.
public struct JournalOwner: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Its process ID, as seen from the process that wrote the journal (another PID
    /// namespace may number it differently).
    public var pid: Int32
    /// The host name of its machine (or container).
    public var host: String

    package init(pid: Int32, host: String) {
        self.pid = pid
        self.host = host
    }

    /// "haul process 1234 on HOST".
    public var description: String { "haul process \(pid) on \(host)" }
}

/// Which processes are alive, from the kernel: every process that runs a journal's jobs
/// holds an exclusive `flock` on a lock file of its own, in `JOURNAL-owners/`, named by a
/// random token. The kernel drops the lock the moment the process dies (before it becomes
/// a zombie), so a lock that can be taken is proof that its owner is gone, whatever
/// happened to its PID since (a zombie, a reused PID, another PID namespace sharing the
/// journal through a volume).
///
/// The journal's `owner` and `session` columns hold these tokens. They are above
/// `Int32.max`, so a PID left in an older journal never names a live owner.
final class OwnerLocks: Sendable {
    /// The folder of lock files, beside the journal.
    let directory: String

    private struct Held {
        var token: Int64
        var descriptor: Int32
    }

    private let held = NIOLockedValueBox<Held?>(nil)

    init(journalPath: String) {
        directory = journalPath + "-owners"
    }

    deinit {
        release()
    }

    /// This journal instance's token, once ``acquire()`` has run.
    var token: Int64? { held.withLockedValue { $0?.token } }

    /// Takes a token for this journal instance, once: creates a lock file, locks it, and
    /// only then gives it its final name, so a lock file under a token's name is either
    /// locked or left by a dead process.
    func acquire() throws(DownloadError) -> Int64 {
        let result: Result<Int64, DownloadError> = held.withLockedValue { held in
            if let held { return .success(held.token) }
            if mkdir(directory, 0o700) != 0, errno != EEXIST {
                return .failure(Self.failure("cannot create the owner lock folder \(directory)"))
            }
            var generator = SystemRandomNumberGenerator()
            let token = Int64.random(in: (Int64(Int32.max) + 1)...Int64.max, using: &generator)
            let temporary = directory + "/.\(token).new"
            let descriptor = open(temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { return .failure(Self.failure("cannot create a lock file in \(directory)")) }
            guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                close(descriptor)
                unlink(temporary)
                return .failure(Self.failure("cannot lock \(temporary)"))
            }
            let owner = JournalOwner(pid: getpid(), host: ProcessInfo.processInfo.hostName)
            let line = "\(owner.pid) \(owner.host)\n"
            _ = line.utf8CString.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count - 1) }
            guard rename(temporary, path(of: token)) == 0 else {
                close(descriptor)
                unlink(temporary)
                return .failure(Self.failure("cannot name the lock file in \(directory)"))
            }
            held = Held(token: token, descriptor: descriptor)
            return .success(token)
        }
        return try result.get()
    }

    /// Gives the token up: the lock file goes, then the lock.
    func release() {
        held.withLockedValue { held in
            guard let current = held else { return }
            unlink(path(of: current.token))
            close(current.descriptor)
            held = nil
        }
    }

    /// Whether the process that holds `token` is alive. A dead owner's lock file is
    /// removed on the way.
    func isAlive(_ token: Int64) -> Bool {
        if token == self.token { return true }
        let path = path(of: token)
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            // No lock file: the owner released it, died and was cleaned up, or (a PID
            // from an older journal) never had one. Unreadable: assume it lives.
            return errno != ENOENT
        }
        defer { close(descriptor) }
        if flock(descriptor, LOCK_SH | LOCK_NB) == 0 {
            unlink(path)
            return false
        }
        return true
    }

    /// The live owners other than this instance, with who they are.
    func liveOwners() -> [Int64: JournalOwner] {
        guard let folder = opendir(directory) else { return [:] }
        defer { closedir(folder) }
        var tokens: [Int64] = []
        while let entry = readdir(folder) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if let token = Int64(name), token != self.token { tokens.append(token) }
        }
        var owners: [Int64: JournalOwner] = [:]
        for token in tokens where isAlive(token) {
            owners[token] = describe(token) ?? JournalOwner(pid: 0, host: "?")
        }
        return owners
    }

    /// Who holds `token`, from its lock file.
    func describe(_ token: Int64) -> JournalOwner? {
        guard let text = try? String(contentsOfFile: path(of: token), encoding: .utf8) else { return nil }
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 2, let pid = Int32(fields[0]) else { return nil }
        return JournalOwner(pid: pid, host: String(fields[1]))
    }

    /// The lock file of `token`.
    func path(of token: Int64) -> String { directory + "/\(token)" }

    private static func failure(_ message: String) -> DownloadError {
        DownloadError(.fileSystem, "\(message): \(String(cString: strerror(errno)))")
    }
}
