#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Unbuffered writes to standard output and standard error, and what the terminal is like.
///
/// Everything goes through `write(2)` in one call per message, so lines from different
/// tasks never interleave mid-line and nothing is lost when the process exits.
enum Console {
    /// Writes `text` to standard output.
    static func out(_ text: String) { send(text, to: STDOUT_FILENO) }

    /// Writes `text` to standard error.
    static func err(_ text: String) { send(text, to: STDERR_FILENO) }

    /// Whether standard output is a terminal that understands cursor movement.
    static var outputIsTerminal: Bool {
        guard isatty(STDOUT_FILENO) == 1 else { return false }
        return ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    /// Whether standard output and standard error are the same file (one terminal, or
    /// `2>&1`): what one of them says, the other need not say again.
    static var outputIsErrorOutput: Bool {
        var output = stat()
        var errors = stat()
        guard fstat(STDOUT_FILENO, &output) == 0, fstat(STDERR_FILENO, &errors) == 0 else { return false }
        return output.st_dev == errors.st_dev && output.st_ino == errors.st_ino
    }

    /// The terminal's size: `TIOCGWINSZ`, else `$COLUMNS` and `$LINES`, else 80 by 24.
    static var size: (columns: Int, rows: Int) {
        var size = winsize()
        let status = withUnsafeMutablePointer(to: &size) { ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), $0) }
        let environment = ProcessInfo.processInfo.environment
        func fallback(_ name: String, _ value: Int) -> Int {
            environment[name].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil } ?? value
        }
        let columns = status == 0 && size.ws_col > 0 ? Int(size.ws_col) : fallback("COLUMNS", 80)
        let rows = status == 0 && size.ws_row > 0 ? Int(size.ws_row) : fallback("LINES", 24)
        return (columns, rows)
    }

    private static func send(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            guard var next = bytes.baseAddress else { return }
            var remaining = bytes.count
            while remaining > 0 {
                let written = write(descriptor, next, remaining)
                if written < 0 {
                    if errno == EINTR { continue }
                    return
                }
                next += written
                remaining -= written
            }
        }
    }
}
