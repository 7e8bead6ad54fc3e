import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#endif

/// A pipe (a socket pair) for a child process's standard input, output or error whose two descriptors are
/// closed on exec: the child gets its end only where `ChildProcess` puts it (`dup2` onto 0, 1 or
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
        // A socket pair, made closed-on-exec atomically where the platform can (so no
        // fork between its making and an fcntl can inherit it): `ChildProcess.pipe()`.
        let descriptors: (read: Int32, write: Int32)
        do {
            descriptors = try ChildProcess.pipe()
        } catch {
            preconditionFailure("\(error)")
        }
        fileHandleForReading = FileHandle(fileDescriptor: descriptors.read, closeOnDealloc: true)
        fileHandleForWriting = FileHandle(fileDescriptor: descriptors.write, closeOnDealloc: true)
    }
}
