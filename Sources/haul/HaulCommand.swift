import ArgumentParser
import Foundation
import Haul

/// The `haul` command: a download manager on the command line.
@main
struct Haul: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "A download manager: parallel, resumable, verified downloads.",
        discussion: """
            Every download is recorded in a journal (an SQLite file; --journal PATH, default \
            $XDG_STATE_HOME/haul/journal.sqlite or ~/.local/state/haul/journal.sqlite), so \
            'haul resume' can continue what was interrupted and other haul commands can \
            list and control downloads while they run.
            """,
        version: "0.1.0",
        subcommands: [
            Get.self, Resume.self, List.self, Pause.self, Cancel.self, Retry.self, Clean.self, ManifestCommand.self,
            SyncCommand.self, Serve.self, Worker.self,
        ])

    /// Exit status for invalid arguments.
    static let usageExitCode: Int32 = 2

    /// Runs the command; invalid arguments exit with status 2 instead of `EX_USAGE` (64).
    static func main() async {
        MemoryTuning.keepFreedMemory()
        var command: any ParsableCommand
        do {
            command = try await asyncParseAsRoot()
        } catch {
            guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
            Console.err(fullMessage(for: error) + "\n")
            Foundation.exit(usageExitCode)
        }
        do {
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as ValidationError {
            // Thrown by run() once it has read the input files: show it like a parse error.
            let subcommand = type(of: command)
            let name = subcommand.configuration.commandName ?? "\(subcommand)".lowercased()
            let usage = usageString(for: subcommand).replacingOccurrences(of: "\n", with: "\n  ")
            Console.err(
                "Error: \(error.message)\nUsage: \(usage)\n  See 'haul \(name) --help' for more information.\n")
            Foundation.exit(usageExitCode)
        } catch {
            exit(withError: error)
        }
    }
}
