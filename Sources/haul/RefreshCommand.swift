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
        do {
            self.program = try ChildProcess.program(program, for: "--refresh-command", searchPath: environment["PATH"])
        } catch {
            throw Failure(description: error.description)
        }
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
        let run: ChildProcess.Run
        do {
            run = try await ChildProcess.run(
                program, arguments: [expired.absoluteString], environment: environment, timeLimit: timeLimit,
                mergingErrors: false)
        } catch {
            throw Failure(description: "the refresh command \(name) could not start: \(error)")
        }
        if run.timedOut {
            throw Failure(description: "the refresh command \(name) gave no URL within \(timeLimit) and was stopped")
        }
        guard run.termination.succeeded else {
            throw Failure(description: "the refresh command \(name) \(run.termination)")
        }
        let line = String(decoding: run.output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        guard !line.isEmpty, let url = URL(string: line) else {
            throw Failure(description: "the refresh command \(name) printed no URL on its first line")
        }
        return url
    }
}
