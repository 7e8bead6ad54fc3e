import ArgumentParser
import Foundation
import Haul

/// `haul pause`, `haul cancel` and `haul retry`: one command, written once, that applies
/// its ``ControlVerb``'s action to the downloads it names, on the backend its options
/// choose.
///
/// Each verb names only its action, its words and its flag for every download:
///
///     ControlCommand<Pause>    haul pause  [ID…] [--all]
///     ControlCommand<Cancel>   haul cancel [ID…] [--all]
///     ControlCommand<Retry>    haul retry  [ID…] [--all-failed]
struct ControlCommand<Verb: ControlVerb>: AsyncParsableCommand {
    static var configuration: CommandConfiguration { Verb.configuration }

    @Argument(help: ArgumentHelp("The IDs of the downloads, as 'haul list' shows them: a URL, or 'URL -> PATH' for the same URL fetched to another place. A URL also names its only download; one that names several is refused, listing them, unless it is one's ID: then that one, and the others are named.", valueName: "id"))
    var ids: [String] = []

    @Flag(name: .customLong(Verb.allFlag), help: ArgumentHelp(Verb.allHelp))
    var all = false

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    mutating func run() async throws {
        let backend = try BackendChoice.make(journal: journalOptions, queue: queueOptions)
        let target = try backend.target(of: Verb.action, ids: ids, all: all, allFlag: "--\(Verb.allFlag)")
        try await backend.with { try await $0.control(Verb.action, target) }
    }
}

/// What tells one control command from another: its action, its name, abstract and
/// discussion, and the flag that names every download it applies to.
protocol ControlVerb {
    /// What the command does to each download.
    static var action: ControlAction { get }
    /// The command's name, abstract and discussion.
    static var configuration: CommandConfiguration { get }
    /// The long name of the flag for every download in ``ControlAction/allStates``.
    static var allFlag: String { get }
    /// That flag's help.
    static var allHelp: String { get }
}

/// `haul pause`: pauses downloads, keeping their partial files.
enum Pause: ControlVerb {
    static let action = ControlAction.pause
    static let allFlag = "all"
    static let allHelp = "Pause every queued, running or waiting download."
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "pause",
            abstract: "Pause downloads, keeping their partial files.",
            discussion: """
                A download that a running haul is working on is paused by that process within \
                about a second. 'haul resume' continues paused downloads. Prints one line per \
                download: "paused ID", "asked the running haul to pause ID", "ID is already \
                STATE", or "no job ID" on standard error (exit status 1).
                """))
}

/// `haul cancel`: cancels downloads and deletes their partial files.
enum Cancel: ControlVerb {
    static let action = ControlAction.cancel
    static let allFlag = "all"
    static let allHelp = "Cancel every unfinished (queued, running, paused or waiting) download."
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "cancel",
            abstract: "Cancel downloads and delete their partial files.",
            discussion: """
                A download that a running haul is working on is cancelled by that process \
                within about a second. Prints one line per download: "cancelled ID", "asked the \
                running haul to cancel ID", "ID is already STATE", or "no job ID" on standard \
                error (exit status 1).
                """))
}

/// `haul retry`: queues failed (or cancelled, or paused) downloads again.
enum Retry: ControlVerb {
    static let action = ControlAction.retry
    static let allFlag = "all-failed"
    static let allHelp = "Retry every failed download."
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "retry",
            abstract: "Queue failed, cancelled or paused downloads again.",
            discussion: """
                Retried downloads continue from their partial files, if any, when 'haul resume' \
                runs (a paused download that a running haul holds is resumed by that process). \
                Prints one line per download: "queued ID", "asked the running haul to resume \
                ID", "ID is already STATE", or "no job ID" on standard error (exit status 1).
                """))
}

/// `haul clean`: forgets finished downloads and deletes orphaned partial files.
struct Clean: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "clean",
            abstract: "Remove finished downloads from the journal and delete orphaned partial files.",
            discussion: """
                Deletes the journal's completed, failed and cancelled jobs, and every \
                NAME.haul-partial file (with its NAME.haul-meta) in the journal's download \
                directories that no unfinished download uses. Prints "removed N finished jobs \
                and M orphaned partial files".
                """))

    @OptionGroup var journalOptions: JournalOptions

    mutating func run() async throws {
        // The journal itself, even while a service runs for it.
        try await JournalBackend(path: journalOptions.resolvedPath).clean()
    }
}
