import ArgumentParser
import Foundation
import Haul

/// `haul pause`: pauses downloads, keeping their partial files.
struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pause",
        abstract: "Pause downloads, keeping their partial files.",
        discussion: """
            A download that a running haul is working on is paused by that process within \
            about a second. 'haul resume' continues paused downloads. Prints one line per \
            download: "paused ID", "asked the running haul to pause ID", "ID is already \
            STATE", or "no job ID" on standard error (exit status 1).
            """)

    @Argument(help: ArgumentHelp("The IDs (URLs) of the downloads, as 'haul list' shows them.", valueName: "id"))
    var ids: [String] = []

    @Flag(help: "Pause every queued, running or waiting download.")
    var all = false

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    /// The backend and the downloads named, once `validate()` has checked them.
    @Derived var plan: (backend: BackendChoice, target: ControlTarget)?

    mutating func validate() throws {
        let backend = try BackendChoice.make(journal: journalOptions, queue: queueOptions)
        plan = (backend, try backend.target(of: .pause, ids: ids, all: all, allFlag: "--all"))
    }

    mutating func run() async throws {
        let (backend, target) = $plan
        try await backend.with { try await $0.control(.pause, target) }
    }
}

/// `haul cancel`: cancels downloads and deletes their partial files.
struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel downloads and delete their partial files.",
        discussion: """
            A download that a running haul is working on is cancelled by that process \
            within about a second. Prints one line per download: "cancelled ID", "asked the \
            running haul to cancel ID", "ID is already STATE", or "no job ID" on standard \
            error (exit status 1).
            """)

    @Argument(help: ArgumentHelp("The IDs (URLs) of the downloads, as 'haul list' shows them.", valueName: "id"))
    var ids: [String] = []

    @Flag(help: "Cancel every unfinished (queued, running, paused or waiting) download.")
    var all = false

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    /// The backend and the downloads named, once `validate()` has checked them.
    @Derived var plan: (backend: BackendChoice, target: ControlTarget)?

    mutating func validate() throws {
        let backend = try BackendChoice.make(journal: journalOptions, queue: queueOptions)
        plan = (backend, try backend.target(of: .cancel, ids: ids, all: all, allFlag: "--all"))
    }

    mutating func run() async throws {
        let (backend, target) = $plan
        try await backend.with { try await $0.control(.cancel, target) }
    }
}

/// `haul retry`: queues failed (or cancelled, or paused) downloads again.
struct Retry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry",
        abstract: "Queue failed, cancelled or paused downloads again.",
        discussion: """
            Retried downloads continue from their partial files, if any, when 'haul resume' \
            runs (a paused download that a running haul holds is resumed by that process). \
            Prints one line per download: "queued ID", "asked the running haul to resume \
            ID", "ID is already STATE", or "no job ID" on standard error (exit status 1).
            """)

    @Argument(help: ArgumentHelp("The IDs (URLs) of the downloads, as 'haul list' shows them.", valueName: "id"))
    var ids: [String] = []

    @Flag(name: .customLong("all-failed"), help: "Retry every failed download.")
    var allFailed = false

    @OptionGroup var journalOptions: JournalOptions

    @OptionGroup var queueOptions: QueueOptions

    /// The backend and the downloads named, once `validate()` has checked them.
    @Derived var plan: (backend: BackendChoice, target: ControlTarget)?

    mutating func validate() throws {
        let backend = try BackendChoice.make(journal: journalOptions, queue: queueOptions)
        plan = (backend, try backend.target(of: .retry, ids: ids, all: allFailed, allFlag: "--all-failed"))
    }

    mutating func run() async throws {
        let (backend, target) = $plan
        try await backend.with { try await $0.control(.retry, target) }
    }
}

/// `haul clean`: forgets finished downloads and deletes orphaned partial files.
struct Clean: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clean",
        abstract: "Remove finished downloads from the journal and delete orphaned partial files.",
        discussion: """
            Deletes the journal's completed, failed and cancelled jobs, and every \
            NAME.haul-partial file (with its NAME.haul-meta) in the journal's download \
            directories that no unfinished download uses. Prints "removed N finished jobs \
            and M orphaned partial files".
            """)

    @OptionGroup var journalOptions: JournalOptions

    mutating func run() async throws {
        // The journal itself, even while a service runs for it.
        try await BackendChoice.make(journal: journalOptions, followsService: false).with { try await $0.clean() }
    }
}
