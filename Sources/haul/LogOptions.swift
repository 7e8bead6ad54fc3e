import ArgumentParser
import HaulCommandSupport
import Logging

/// `--log-format` and `--log-level`, for the commands that keep running: `haul serve` and
/// `haul worker`. Their log goes to standard error, credentials taken out
/// (``ServiceLogHandler``).
struct LogOptions: ParsableArguments {
    @Option(
        name: .customLong("log-format"),
        help: ArgumentHelp(
            "How log lines are written on standard error: text, or json (one object per line with time, level, label, message, the download's id where there is one, and metadata). (default: text)",
            valueName: "format"))
    var format: LogFormat = .text

    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp(
            "The least severe level logged: trace, debug, info (every download's end), notice (failures), warning, error or critical.",
            valueName: "level"))
    var level = "info"

    func validate() throws {
        guard Logger.Level(rawValue: level) != nil else {
            throw ValidationError(
                "--log-level takes one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")): '\(level)'.")
        }
    }

    /// A logger for `label` whose text lines start with `name`.
    func logger(label: String, name: String) -> Logger {
        let (format, level) = (self.format, Logger.Level(rawValue: self.level) ?? .info)
        return Logger(label: label) { label in ServiceLogHandler(label: label, name: name, format: format, level: level) }
    }
}

extension LogFormat: ExpressibleByArgument {}
