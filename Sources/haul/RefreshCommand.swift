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
    /// Its output is read and its end awaited on threads of their own, never on the Swift
    /// concurrency pool or an event loop: a refresh is rare, and a program may take seconds.
    func refresh(_ expired: URL, id: DownloadID) async throws -> URL {
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_ID"] = id.rawValue
        let name = URL(fileURLWithPath: program).lastPathComponent
        let child: ChildProcess
        let output: Int32
        do {
            let pipe = try ChildProcess.pipe()
            output = pipe.read
            defer { close(pipe.write) }
            do {
                child = try ChildProcess(
                    executable: program, arguments: [expired.absoluteString], environment: environment,
                    standardOutput: .descriptor(pipe.write), standardError: .inherit)
            } catch {
                close(pipe.read)
                throw error
            }
        } catch {
            throw Failure(description: "the refresh command \(name) could not start: \(error)")
        }
        let limit = timeLimit
        let stopped = ManagedFlag()
        let timer = Task {
            try await Task.sleep(for: limit)
            if stopped.set() { child.signal(SIGKILL) }
        }
        let printed = await Self.readToEnd(output)
        let termination = await child.wait()
        timer.cancel()
        if !stopped.set() {
            throw Failure(description: "the refresh command \(name) gave no URL within \(limit) and was stopped")
        }
        guard termination.succeeded else {
            throw Failure(description: "the refresh command \(name) \(termination)")
        }
        let line = String(decoding: printed, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        guard !line.isEmpty, let url = URL(string: line) else {
            throw Failure(description: "the refresh command \(name) printed no URL on its first line")
        }
        return url
    }

    /// Reads `descriptor` to its end (keeping the first 64 KiB) on a thread of its own, and
    /// closes it.
    private static func readToEnd(_ descriptor: Int32) async -> [UInt8] {
        await withCheckedContinuation { continuation in
            Thread {
                var kept: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 1 << 14)
                while true {
                    let count = read(descriptor, &buffer, buffer.count)
                    if count < 0, errno == EINTR { continue }
                    guard count > 0 else { break }
                    if kept.count < 1 << 16 { kept += buffer[..<count] }
                }
                close(descriptor)
                continuation.resume(returning: kept)
            }.start()
        }
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
