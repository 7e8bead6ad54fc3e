import ArgumentParser
import Foundation
import Haul

/// The `haul` command: a download manager on the command line.
///
/// Every subcommand checks its arguments in `validate()` (and its option groups'), so that
/// every usage error is found while parsing, before anything is opened, and is reported by
/// ArgumentParser with the subcommand's usage. Each subcommand then runs once against the
/// backend its options choose (``BackendChoice``).
@main
struct HaulCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "A download manager: parallel, resumable, verified downloads.",
        discussion: """
            Every download is recorded in a journal (an SQLite file; --journal PATH, default \
            $XDG_STATE_HOME/haul/journal.sqlite or ~/.local/state/haul/journal.sqlite), so \
            'haul resume' can continue what was interrupted and other haul commands can \
            list and control downloads while they run.

            As wget, curl and aria2c do, haul takes a bare URL: 'haul URL…' is 'haul get URL…'.
            """,
        version: "0.1.0",
        subcommands: [
            Get.self, Resume.self, List.self, ControlCommand<Pause>.self, ControlCommand<Cancel>.self,
            ControlCommand<Retry>.self, Clean.self, ManifestCommand.self, SyncCommand.self, Serve.self, Worker.self,
        ])

    /// Exit status for invalid arguments, as curl and wget use (ArgumentParser's is `EX_USAGE`, 64).
    static let usageExitCode: Int32 = 2

    /// Parses and runs the command as ArgumentParser's `main()` does, except that usage
    /// errors exit with ``usageExitCode``.
    static func main() async {
        MemoryTuning.keepFreedMemory()
        ProcessResources.startEarly(for: CommandLine.arguments)
        do {
            var command = try await asyncParseAsRoot(Self.arguments(CommandLine.arguments.dropFirst()))
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
            Console.err(fullMessage(for: error) + "\n")
            Foundation.exit(usageExitCode)
        }
    }
}

extension HaulCommand {
    /// The arguments to parse: `haul URL…` (or `haul -d DIR URL…`) is `haul get URL…`.
    ///
    /// Done here rather than with ArgumentParser's `defaultSubcommand`, which made every
    /// command build `get`'s sixty options as well: 1.5-2 ms more for each `haul` run.
    static func arguments(_ given: ArraySlice<String>) -> [String] {
        guard let first = given.first else { return [] }
        let names = Set(configuration.subcommands.map { $0._commandName } + ["help"])
        let rootFlags: Set<String> = ["-h", "--help", "--version", "--generate-completion-script"]
        if names.contains(first) || rootFlags.contains(first) || first.hasPrefix("--experimental") {
            return Array(given)
        }
        return ["get"] + given
    }
}

/// A value a command's `validate()` works out for its `run()`: not an argument, never
/// parsed (ArgumentParser keeps it as a default), set once the arguments are known to be
/// good, so that `run()` does not check or compute them again.
@propertyWrapper
struct Derived<Value>: Decodable {
    var wrappedValue: Value?

    init() { wrappedValue = nil }

    /// The value, which `validate()` has set (`$name`).
    var projectedValue: Value {
        guard let wrappedValue else { preconditionFailure("read before validate() set it") }
        return wrappedValue
    }

    init(from decoder: any Decoder) { wrappedValue = nil }
}
