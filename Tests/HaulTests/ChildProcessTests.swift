import Foundation
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#endif

/// Programs started through ``ChildProcess``, as the refresh command and the tests' servers
/// are: what the child inherits, and how its end is told.
@Suite("Child processes")
struct ChildProcessTests {
    /// Runs `/bin/sh -c script` and returns its exit and what it printed.
    private static func shell(_ script: String) async throws -> (ChildProcess.Termination, String) {
        let output = try ChildProcess.pipe()
        let child = try ChildProcess(
            executable: "/bin/sh", arguments: ["-c", script], standardOutput: .descriptor(output.write))
        close(output.write)
        let reading = FileHandle(fileDescriptor: output.read, closeOnDealloc: true)
        let termination = await child.wait()
        // The child has ended and no one else holds the write end: this read cannot wait.
        let text = String(decoding: reading.readDataToEndOfFile(), as: UTF8.self)
        return (termination, text)
    }

    @Test func theChildGetsOnlyItsStandardDescriptors() async throws {
        // Given a descriptor open here without close-on-exec, as a careless library leaves one
        let leaked = open("/dev/null", O_RDONLY)
        #expect(leaked > 2)
        defer { close(leaked) }

        // When a child (the shell itself: `test` is built in) looks for it and for its own
        // standard output
        let (termination, text) = try await Self.shell(
            "for fd in 1 \(leaked); do if [ -e /proc/self/fd/$fd ]; then echo \"$fd open\"; else echo \"$fd closed\"; fi; done")

        // Then it has its output only
        #expect(termination.succeeded)
        #expect(text == "1 open\n\(leaked) closed\n", "\(text)")
    }

    @Test func theChildStartsWithNoSignalBlockedOrIgnored() async throws {
        // Given a signal blocked on this thread, as the test runner's threads may have them,
        // and SIGPIPE ignored, as servers ignore it
        signal(SIGPIPE, SIG_IGN)
        var blocked = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGTERM)
        var previous = sigset_t()
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }

        // When a child reports its blocked and ignored signals (grep, reading its own status)
        let (_, text) = try await Self.shell("exec grep -E '^Sig(Blk|Ign)' /proc/self/status")

        // Then none is (of the standard signals: glibc keeps two real-time ones, 32 and 33,
        // for itself)
        func mask(_ name: String) -> UInt64? {
            text.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) }
        }
        #expect(mask("SigBlk").map { $0 & 0x7fff_ffff } == 0, "\(text)")
        #expect(mask("SigIgn").map { $0 & 0x7fff_ffff } == 0, "\(text)")
    }

    @Test func anExitStatusAndASignalAreToldApart() async throws {
        let (exited, _) = try await Self.shell("exit 3")
        #expect(exited == ChildProcess.Termination(code: 3, bySignal: false))
        #expect(exited.description == "exited with status 3")

        let child = try ChildProcess(executable: "/bin/sleep", arguments: ["600"])
        child.signal(SIGKILL)
        let killed = await child.wait()
        #expect(killed == ChildProcess.Termination(code: SIGKILL, bySignal: true))
        #expect(child.hasExited)
        // (a signal after the end goes nowhere)
        child.signal(SIGKILL)
    }

    @Test func aProgramThatCannotRunIsATypedError() {
        #expect(throws: ChildProcess.SpawnError.self) {
            try ChildProcess(executable: "/nonexistent/program", arguments: [])
        }
    }
}
