// Processes are started on Linux and macOS only (iOS does not let apps spawn them).
#if os(Linux) || os(macOS)
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A user's program run to its end under a time limit, and what it printed: what
/// `--refresh-command` and the completion hooks (`--on-complete`, `--on-error`) share.
extension ChildProcess {
    /// How a run ended.
    package struct Run: Sendable {
        /// How the program ended (`SIGKILL` when it ran out of time).
        package var termination: Termination
        /// Whether it was stopped for running past its time limit.
        package var timedOut: Bool
        /// What it printed on its standard output (and standard error, when merged): the
        /// first ``outputLimit`` bytes.
        package var output: [UInt8]
    }

    /// The most of a program's output kept.
    package static let outputLimit = 1 << 16

    /// `program` as a path to run: itself when it holds a `/`, else the first executable of
    /// that name in `searchPath` (`PATH`'s form); `nil` when there is none.
    package static func find(_ program: String, searchPath: String?) -> String? {
        guard !program.isEmpty else { return nil }
        let candidates =
            program.contains("/")
            ? [program] : (searchPath ?? "/usr/bin:/bin").split(separator: ":").map { "\($0)/\(program)" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// A program an option names that cannot be run.
    package struct ProgramNotFound: Error, CustomStringConvertible, Sendable {
        package var description: String
    }

    /// ``find(_:searchPath:)`` for the program `option` names, or a message saying why it
    /// cannot run (`--on-error: no program named x in PATH.`).
    package static func program(_ program: String, for option: String, searchPath: String?) throws(ProgramNotFound)
        -> String
    {
        guard !program.isEmpty else { throw ProgramNotFound(description: "\(option) needs a program.") }
        guard let found = find(program, searchPath: searchPath) else {
            throw ProgramNotFound(
                description: program.contains("/")
                    ? "\(option): \(program) is not an executable file."
                    : "\(option): no program named \(program) in PATH.")
        }
        return found
    }

    /// Runs `executable` with `arguments` and `environment`, standard input from
    /// `/dev/null`, until it ends or `timeLimit` passes (then `SIGKILL`).
    ///
    /// Its output is read, and its end awaited, on threads of their own, never on the Swift
    /// concurrency pool or an event loop. Reading stops at the time limit too, so a program
    /// that leaves a child holding its output open cannot hold the caller.
    ///
    /// - Parameter mergingErrors: Whether standard error is read with standard output;
    ///   otherwise it goes to this process's.
    package static func run(
        _ executable: String, arguments: [String], environment: [String: String], timeLimit: Duration,
        mergingErrors: Bool
    ) async throws(SpawnError) -> Run {
        let pipe = try ChildProcess.pipe()
        let child: ChildProcess
        do {
            child = try ChildProcess(
                executable: executable, arguments: arguments, environment: environment,
                standardOutput: .descriptor(pipe.write), standardError: mergingErrors ? .descriptor(pipe.write) : .inherit)
        } catch {
            close(pipe.read)
            close(pipe.write)
            throw error
        }
        close(pipe.write)
        let deadline = ContinuousClock.now.advanced(by: timeLimit)
        let timer = Task {
            try await Task.sleep(until: deadline)
            child.signal(SIGKILL)
        }
        let output = await readToEnd(pipe.read, until: deadline)
        let termination = await child.wait()
        timer.cancel()
        let timedOut = termination.bySignal && termination.code == SIGKILL && ContinuousClock.now >= deadline
        return Run(termination: termination, timedOut: timedOut, output: output)
    }

    /// Reads `descriptor` to its end or to `deadline` (keeping the first ``outputLimit``
    /// bytes) on a thread of its own, and closes it.
    private static func readToEnd(_ descriptor: Int32, until deadline: ContinuousClock.Instant) async -> [UInt8] {
        await withCheckedContinuation { continuation in
            Thread {
                var kept: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 1 << 14)
                while true {
                    let left = ContinuousClock.now.duration(to: deadline)
                    guard left > .zero else { break }
                    var ready = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    let (seconds, attoseconds) = left.components
                    let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
                    let polled = poll(&ready, 1, milliseconds)
                    if polled < 0, errno == EINTR { continue }
                    guard polled > 0 else { break }
                    let count = read(descriptor, &buffer, buffer.count)
                    if count < 0, errno == EINTR { continue }
                    guard count > 0 else { break }
                    if kept.count < outputLimit { kept += buffer[..<min(count, outputLimit - kept.count)] }
                }
                close(descriptor)
                continuation.resume(returning: kept)
            }.start()
        }
    }
}
#endif
