import Dispatch
import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `--refresh-command PROGRAM`: asks a program of the user's for a fresh URL when a
/// download's URL has expired (a signed URL answering `403`, or past the expiry its query
/// gives).
///
/// The program runs without a shell, with the expired URL as its last argument and the
/// download's ID in `HAUL_ID`; the first line it prints is the fresh URL. Its standard error
/// goes to haul's. It is given ``timeLimit`` to answer, then stopped.
struct RefreshCommand: Sendable {
    /// The program's path, as found when the options were read.
    let program: String
    let timeLimit: Duration

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Finds `program` (a path, or a name looked up in `PATH`), or says why it cannot run.
    init(program: String, environment: [String: String], timeLimit: Duration = .seconds(60)) throws {
        guard !program.isEmpty else { throw Failure(description: "--refresh-command needs a program.") }
        let candidates: [String]
        if program.contains("/") {
            candidates = [program]
        } else {
            candidates = (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map { "\($0)/\(program)" }
        }
        guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw Failure(
                description: program.contains("/")
                    ? "--refresh-command: \(program) is not an executable file."
                    : "--refresh-command: no program named \(program) in PATH.")
        }
        self.program = found
        self.timeLimit = timeLimit
    }

    /// Runs the program for `expired` and returns the URL it printed.
    ///
    /// The wait happens on a thread of its own, never on the Swift concurrency pool or an
    /// event loop: a refresh is rare, and a program may take seconds.
    func refresh(_ expired: URL, id: DownloadID) async throws -> URL {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = [expired.absoluteString]
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_ID"] = id.rawValue
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardInput = FileHandle.nullDevice
        let name = URL(fileURLWithPath: program).lastPathComponent
        let limit = timeLimit
        let (status, printed, timedOut): (Int32, Data, Bool) = try await withCheckedThrowingContinuation { continuation in
            do {
                try process.run()
            } catch {
                continuation.resume(throwing: Failure(description: "the refresh command \(name) could not start: \(error)"))
                return
            }
            let pid = process.processIdentifier
            let stopped = ManagedFlag()
            let seconds = Double(limit.components.seconds) + Double(limit.components.attoseconds) / 1e18
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
                if stopped.set() { kill(pid, SIGKILL) }
            }
            Thread {
                let data = output.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                let timedOut = !stopped.set()
                continuation.resume(returning: (process.terminationStatus, data, timedOut))
            }.start()
        }
        if timedOut {
            throw Failure(description: "the refresh command \(name) gave no URL within \(limit) and was stopped")
        }
        guard status == 0 else {
            throw Failure(description: "the refresh command \(name) exited with status \(status)")
        }
        let line = String(decoding: printed, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        guard !line.isEmpty, let url = URL(string: line) else {
            throw Failure(description: "the refresh command \(name) printed no URL on its first line")
        }
        return url
    }
}

/// A flag set once, by whichever of two threads comes first: `set()` says whether this call set it.
private final class ManagedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var isSet = false

    func set() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if isSet { return false }
        isSet = true
        return true
    }
}
