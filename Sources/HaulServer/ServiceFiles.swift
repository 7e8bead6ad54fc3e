import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The files a service keeps beside its journal, `JOURNAL-serve.*`: a lock that makes it
/// the one service of that journal, its address for clients to find it, and its token.
///
/// - The lock is an exclusive `flock` held for the service's life. The kernel drops it the
///   moment the process dies, so a crashed service never blocks the next one, and a client
///   tells a running service from a stale address by trying the lock.
/// - The address file says where the service listens (`127.0.0.1:6800`). It is no secret.
/// - The token is the environment's `HAUL_TOKEN` when set (never a command-line argument,
///   which `ps` shows), else the token file's, else a new random one written to that file,
///   created 0600. A token file that others can read is refused, as ssh refuses a key file.
package struct ServiceFiles: Sendable {
    /// Why the service cannot start, or a client cannot find it.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        package var message: String
        package var description: String { message }
    }

    /// The environment variable that gives the token.
    package static let tokenVariable = "HAUL_TOKEN"

    package let lockPath: String
    package let addressPath: String
    package let tokenPath: String

    package init(journalPath: String) {
        lockPath = journalPath + "-serve.lock"
        addressPath = journalPath + "-serve.address"
        tokenPath = journalPath + "-serve.token"
    }

    /// The lock of a running service; released by ``release()`` or when the process ends.
    package final class Lock: Sendable {
        private let descriptor: Int32

        fileprivate init(descriptor: Int32) {
            self.descriptor = descriptor
        }

        /// Gives the lock up (the service is stopping).
        package func release() {
            _ = flock(descriptor, LOCK_UN)
            _ = close(descriptor)
        }
    }

    /// Takes the service lock.
    ///
    /// - Throws: ``Failure`` naming the address of the service that already runs for this
    ///   journal, or why the lock file cannot be opened.
    package func acquire() throws(Failure) -> Lock {
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw Failure(message: "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            _ = close(descriptor)
            if reason == EWOULDBLOCK {
                let address = (try? String(contentsOfFile: addressPath, encoding: .utf8)).map {
                    $0.trimmingCharacters(in: .whitespacesAndNewlines)
                }
                throw Failure(
                    message: "a haul service already runs for this journal"
                        + (address.map { " at \($0)" } ?? "") + " (lock \(lockPath))")
            }
            throw Failure(message: "cannot lock \(lockPath): \(String(cString: strerror(reason)))")
        }
        return Lock(descriptor: descriptor)
    }

    /// Records where the service listens, replacing the file atomically.
    package func writeAddress(_ address: String) throws(Failure) {
        try Self.writeAtomically(address + "\n", to: addressPath, mode: 0o644)
    }

    /// Where the running service listens, or `nil` when no service runs for the journal
    /// (its lock can be taken), whatever an old address file says.
    package func runningAddress() -> String? {
        let descriptor = open(lockPath, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { _ = close(descriptor) }
        // Taking the lock shared succeeds only when no service holds it exclusively.
        if flock(descriptor, LOCK_SH | LOCK_NB) == 0 {
            _ = flock(descriptor, LOCK_UN)
            return nil
        }
        guard let text = try? String(contentsOfFile: addressPath, encoding: .utf8) else { return nil }
        let address = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return address.isEmpty ? nil : address
    }

    /// The service's token and where it came from.
    package enum TokenSource: Sendable, Equatable {
        /// ``tokenVariable`` in the environment.
        case environment
        /// The token file, written by an earlier start or by the operator.
        case file
        /// Made now and written to the token file.
        case generated
    }

    /// The token, from the environment, the token file, or new (see the type's notes).
    ///
    /// - Throws: ``Failure`` when the token file can be read by others, is empty, or
    ///   cannot be written.
    package func token(environment: [String: String]) throws(Failure) -> (token: String, source: TokenSource) {
        if let found = try existingToken(environment: environment) { return found }
        var generator = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        try Self.writeAtomically(token + "\n", to: tokenPath, mode: 0o600)
        return (token, .generated)
    }

    /// The token from the environment or the token file, or `nil` when neither has one: what
    /// a client of the service presents (it never makes one).
    package func existingToken(environment: [String: String]) throws(Failure) -> (token: String, source: TokenSource)? {
        if let token = environment[Self.tokenVariable] {
            guard token.utf8.count >= 16 else {
                throw Failure(message: "\(Self.tokenVariable) must be at least 16 characters long")
            }
            return (token, .environment)
        }
        var info = stat()
        if stat(tokenPath, &info) == 0 {
            guard info.st_mode & 0o077 == 0 else {
                throw Failure(
                    message: "\(tokenPath) can be read by others (mode \(String(info.st_mode & 0o777, radix: 8))): "
                        + "make it 0600 (chmod 600) or remove it for a new one")
            }
            guard let text = try? String(contentsOfFile: tokenPath, encoding: .utf8) else {
                throw Failure(message: "cannot read \(tokenPath)")
            }
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard token.utf8.count >= 16 else { throw Failure(message: "\(tokenPath) holds no token of 16 characters or more") }
            return (token, .file)
        }
        return nil
    }

    /// Writes `text` to a temporary file created with `mode` (never wider, whatever the
    /// umask leaves), then renames it over `path`.
    private static func writeAtomically(_ text: String, to path: String, mode: mode_t) throws(Failure) {
        let temporary = path + ".tmp-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard descriptor >= 0 else {
            throw Failure(message: "cannot create \(temporary): \(String(cString: strerror(errno)))")
        }
        _ = fchmod(descriptor, mode)
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        _ = close(descriptor)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            _ = unlink(temporary)
            throw Failure(message: "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}
