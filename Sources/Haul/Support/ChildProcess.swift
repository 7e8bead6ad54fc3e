// Processes are started on Linux and macOS only (iOS does not let apps spawn them).
#if os(Linux) || os(macOS)
import CHaulShims
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A program started without a shell (`posix_spawn`), and its end.
///
/// The child gets the standard descriptors it is given and no other: every descriptor of
/// this process above 2 is closed in it, whether or not it was opened close-on-exec, so a
/// child (or a daemon it leaves running) never holds one of our sockets or pipes. Its
/// signals start unblocked and at their defaults.
///
/// Why not Foundation's `Process`: on Linux its `run()` reads `/proc/self/fd` with a
/// 256-byte over-read that now and then crashes the parent (swift-corelibs-foundation#5472,
/// seen in this project's tests under Swift 6.3.1); it hears of a child's end through a run
/// loop on a thread of its own; and it leaves signals blocked in the child.
///
/// A thread of its own per child waits for the end (`waitid`), so no event loop or thread of
/// the concurrency pool ever blocks on it. The child is reaped only after its status is
/// recorded, under the same lock as ``signal(_:)``: a signal never reaches another process
/// that got the same ID later.
package final class ChildProcess: Sendable {
    /// What the child gets as one of its standard descriptors.
    package enum Descriptor: Sendable {
        /// `/dev/null`.
        case null
        /// This process's own (the same number).
        case inherit
        /// This descriptor (which stays open here; the caller closes it).
        case descriptor(Int32)
    }

    /// How a child ended.
    package struct Termination: Sendable, Hashable, CustomStringConvertible {
        /// The exit status, or the number of the signal that ended it.
        package var code: Int32
        /// Whether a signal ended it.
        package var bySignal: Bool

        /// Whether it exited with status 0.
        package var succeeded: Bool { !bySignal && code == 0 }

        package var description: String { bySignal ? "was ended by signal \(code)" : "exited with status \(code)" }
    }

    /// A program that could not be started.
    package struct SpawnError: Error, CustomStringConvertible {
        package var path: String
        package var errno: Int32
        package var description: String { "cannot run \(path): \(String(cString: strerror(errno)))" }
    }

    private struct State {
        var termination: Termination?
        var reaped = false
        var waiters: [CheckedContinuation<Termination, Never>] = []
    }

    /// The child's process ID.
    package let pid: Int32
    private let state = NIOLockedValueBox(State())

    /// Starts `executable` (a path; no `PATH` lookup) with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: The child's environment; `nil` passes this process's on.
    ///   - directory: The child's working directory; `nil` keeps this process's.
    package init(
        executable: String, arguments: [String], environment: [String: String]? = nil,
        standardInput: Descriptor = .null, standardOutput: Descriptor = .null, standardError: Descriptor = .null,
        directory: String? = nil
    ) throws(SpawnError) {
        func number(_ descriptor: Descriptor, inherited: Int32) -> Int32 {
            switch descriptor {
            case .null: -1
            case .inherit: inherited
            case .descriptor(let number): number
            }
        }
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            argv.forEach { free($0) }
            envp?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = argv.withUnsafeBufferPointer { argv in
            func spawn(_ envp: UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Int32 {
                let (input, output, error) = (
                    number(standardInput, inherited: 0), number(standardOutput, inherited: 1),
                    number(standardError, inherited: 2)
                )
                if let directory {
                    return chaul_spawn(&pid, executable, argv.baseAddress, envp, input, output, error, directory)
                }
                return chaul_spawn(&pid, executable, argv.baseAddress, envp, input, output, error, nil)
            }
            if let envp {
                return envp.withUnsafeBufferPointer { spawn($0.baseAddress!) }
            }
            return spawn(Self.currentEnvironment())
        }
        guard result == 0 else { throw SpawnError(path: executable, errno: result) }
        let (spawned, state) = (pid, self.state)
        self.pid = spawned
        Thread { Self.waitForEnd(of: spawned, state: state) }.start()
    }

    /// How the child ended, or `nil` while it runs.
    package var termination: Termination? { state.withLockedValue { $0.termination } }

    /// Whether the child has ended.
    package var hasExited: Bool { termination != nil }

    /// Sends `signal` to the child, unless it has ended.
    package func signal(_ signal: Int32) {
        state.withLockedValue { state in
            if !state.reaped { _ = kill(pid, signal) }
        }
    }

    /// Waits for the child to end.
    package func wait() async -> Termination {
        await withCheckedContinuation { continuation in
            let ended = state.withLockedValue { state -> Termination? in
                if state.termination == nil { state.waiters.append(continuation) }
                return state.termination
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// Runs on the child's own thread: waits for its end without reaping it, records the
    /// status, then reaps it.
    private static func waitForEnd(of pid: Int32, state: NIOLockedValueBox<State>) {
        var info = siginfo_t()
        var termination = Termination(code: -1, bySignal: false)
        while true {
            if waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == 0 {
                #if os(Linux)
                let status = info._sifields._sigchld.si_status
                #else
                let status = info.si_status
                #endif
                termination = Termination(code: status, bySignal: info.si_code != CLD_EXITED)
                break
            }
            guard errno == EINTR else { break }
        }
        let waiters = state.withLockedValue { state in
            state.termination = termination
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            state.reaped = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: termination) }
    }

    /// This process's environment, as `posix_spawn` takes it.
    private static func currentEnvironment() -> UnsafePointer<UnsafeMutablePointer<CChar>?> {
        #if canImport(Darwin)
        UnsafePointer(_NSGetEnviron().pointee!)
        #else
        UnsafePointer(environ)
        #endif
    }

    /// A pipe whose two ends are closed on exec (the child gets an end only as one of its
    /// standard descriptors): a socket pair, made close-on-exec atomically where the
    /// platform can, so no child spawned meanwhile by another thread inherits it.
    package static func pipe() throws(SpawnError) -> (read: Int32, write: Int32) {
        var descriptors: [Int32] = [-1, -1]
        #if os(Linux)
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &descriptors) == 0 else { throw SpawnError(path: "socketpair", errno: errno) }
        #else
        guard socketpair(AF_UNIX, SOCK_STREAM, 0, &descriptors) == 0 else {
            throw SpawnError(path: "socketpair", errno: errno)
        }
        for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        #endif
        return (descriptors[0], descriptors[1])
    }
}
#endif
