import ArgumentParser
import Foundation
import Haul

/// The `haul` command: a download manager on the command line.
///
/// Every subcommand checks its arguments in `validate()` (and its option groups'), without
/// opening or reading anything but the files they name. Its `run()` then chooses the
/// backend (``BackendChoice``: a running service, the shared queue or the journal), checks
/// what the command asks of it, and reads the entries (input and Metalink files), before
/// anything is downloaded or queued. A usage error found there is reported as one found
/// while parsing: with the subcommand's usage, and exit status ``usageExitCode``.
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
        let arguments = Self.arguments(CommandLine.arguments.dropFirst())
        ProcessResources.startEarly(for: arguments)
        let direct = directSubcommand(of: arguments)
        var command: any ParsableCommand
        do {
            if let direct {
                command = try direct.parseAsRoot(Array(arguments.dropFirst()))
            } else {
                command = try await asyncParseAsRoot(arguments)
            }
        } catch {
            exit(with: error, usage: direct)
        }
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // A usage error of run()'s (what the backend refuses, an entry of an input
            // file) is the subcommand's, as one of validate()'s is.
            exit(with: error, usage: type(of: command) == Self.self ? nil : type(of: command))
        }
    }

    /// Says `error` as ArgumentParser would and exits: a usage error with the usage of
    /// `subcommand` (the root's when `nil`) and ``usageExitCode``.
    private static func exit(with error: any Error, usage subcommand: (any ParsableCommand.Type)?) -> Never {
        guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
        Console.err(usageMessage(for: error, of: subcommand) + "\n")
        Foundation.exit(usageExitCode)
    }
}

extension HaulCommand {
    /// The subcommand whose own parser takes `arguments` (after its name), when there are
    /// some and they ask nothing of the root: no help, version, completion script or dump.
    ///
    /// Parsing from the root costs every run about a tenth of its start-up: before the
    /// real parse, ArgumentParser parses the arguments twice more, as two throwaway
    /// commands, to look for `--generate-completion-script`, and each new command type
    /// means the runtime's conformance lookups walk every record in the binary. A
    /// subcommand entered as the root skips that check, because its configuration names
    /// `haul` as its super-command (``subcommandConfiguration``); it parses, validates and
    /// names itself (`haul get`) exactly as it does under the root. Anything the root
    /// answers itself goes through the root.
    static func directSubcommand(of arguments: [String]) -> (any ParsableCommand.Type)? {
        // Without arguments, ArgumentParser words a subcommand's usage error differently as
        // the root: the root parses it.
        guard arguments.count > 1, let first = arguments.first, let subcommand = subcommand(named: first) else {
            return nil
        }
        // Going through the root is always right, only slower: anything that may be help
        // (`-h` among other short flags too), the version, or a completion script or dump.
        let asksTheRoot = arguments.dropFirst().contains { argument in
            if argument.hasPrefix("--") {
                return argument == "--help" || argument == "--version"
                    || argument.hasPrefix("--generate-completion-script") || argument.hasPrefix("--experimental")
            }
            return argument.hasPrefix("-") && argument.contains("h")
        }
        return asksTheRoot ? nil : subcommand
    }

    /// The subcommand that `name` names, if any.
    static func subcommand(named name: String) -> (any ParsableCommand.Type)? {
        configuration.subcommands.first { $0._commandName == name }
    }

    /// The message for a usage error, as the root's parse words it, with the usage of
    /// `subcommand` when it parsed its arguments as the root (``directSubcommand(of:)``)
    /// or threw the error from its `run()`: ArgumentParser then names it without `haul` in
    /// the line that points to its help (the usage line above it already says `haul get`).
    static func usageMessage(for error: any Error, of subcommand: (any ParsableCommand.Type)?) -> String {
        guard let subcommand, let root = configuration.commandName else { return fullMessage(for: error) }
        let name = subcommand._commandName
        return subcommand.fullMessage(for: error).replacingOccurrences(of: "See '\(name) ", with: "See '\(root) \(name) ")
    }

    /// A subcommand's configuration: `configuration`, with `haul` as its super-command,
    /// which lets ``directSubcommand(of:)`` enter it directly. Under the root, where every
    /// help and usage text is made, the root's own configuration is what counts.
    static func subcommandConfiguration(_ configuration: CommandConfiguration) -> CommandConfiguration {
        var configuration = configuration
        configuration._superCommandName = "haul"
        return configuration
    }
}

extension HaulCommand {
    /// The arguments to parse: `haul URL…` (or `haul -d DIR URL…`) is `haul get URL…`.
    ///
    /// Done here rather than with ArgumentParser's `defaultSubcommand`, which made every
    /// command build `get`'s sixty options as well: 1.5-2 ms more for each `haul` run.
    static func arguments(_ given: ArraySlice<String>) -> [String] {
        guard let first = given.first else { return [] }
        let rootFlags: Set<String> = ["-h", "--help", "--version", "--generate-completion-script"]
        if first == "help" || subcommand(named: first) != nil || rootFlags.contains(first)
            || first.hasPrefix("--experimental")
        {
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
