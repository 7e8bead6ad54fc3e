import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A pipe (a socket pair) for a child process's standard input, output or error whose two descriptors are
/// closed on exec: the child gets its end only where `Process` puts it (`dup2` onto 0, 1 or
/// 2 clears the flag there), and no other child inherits either end.
///
/// Foundation's `Pipe` is not closed on exec. Tests spawn processes concurrently, and one
/// of them, PostgreSQL's daemon started through `system()`, inherited the write ends of
/// two `haul worker` processes' output pipes: reading their output to the end never ended,
/// since the daemon held them open until the test process exited.
final class ExecClosedPipe: Sendable {
    let fileHandleForReading: FileHandle
    let fileHandleForWriting: FileHandle

    init() {
        // A socket pair rather than pipe(2): it is made closed-on-exec atomically
        // (SOCK_CLOEXEC), so no fork between its making and an fcntl can inherit it, and
        // Glibc's module does not expose pipe2. It reads and ends as a pipe does.
        var descriptors: [Int32] = [-1, -1]
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        precondition(
            socketpair(AF_UNIX, type, 0, &descriptors) == 0, "socketpair failed: \(String(cString: strerror(errno)))")
        fileHandleForReading = FileHandle(fileDescriptor: descriptors[0], closeOnDealloc: true)
        fileHandleForWriting = FileHandle(fileDescriptor: descriptors[1], closeOnDealloc: true)
    }
}
