import ArgumentParser
import HaulPostgres
import Foundation
import Haul

/// `haul pause`: pauses downloads, keeping their partial files.
struct Pause: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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

    mutating func run() async throws {
        if let address = try queueOptions.address() {
            let wanted = ids
            guard !wanted.isEmpty else { throw ValidationError("give the IDs of the jobs") }
            let count = try await QueueOptions.with(address) { queue in try await queue.pause(wanted) }
            Console.out("pause: \(count) job(s)\n")
            return
        }
        try JobControl.validate(ids: ids, all: all, allFlag: "--all")
        if let client = try ServiceMode.client(journalOptions) {
            try await ServiceMode.control(client, "pause", done: "paused", ids: ids, all: all ? [.queued, .running, .waiting] : nil)
            return
        }
        let journal = try journalOptions.open()
        let control = JobControl(
            journal: journal, verb: "pause", done: "paused", nothing: "nothing to pause",
            action: { journal, id throws(DownloadError) in try journal.pause(id) })
        try control.run(ids: ids, all: all ? [.queued, .running, .waiting] : nil)
    }
}

/// `haul cancel`: cancels downloads and deletes their partial files.
struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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

    mutating func run() async throws {
        if let address = try queueOptions.address() {
            let wanted = ids
            guard !wanted.isEmpty else { throw ValidationError("give the IDs of the jobs") }
            let count = try await QueueOptions.with(address) { queue in try await queue.cancel(wanted) }
            Console.out("cancel: \(count) job(s)\n")
            return
        }
        try JobControl.validate(ids: ids, all: all, allFlag: "--all")
        if let client = try ServiceMode.client(journalOptions) {
            try await ServiceMode.control(
                client, "cancel", done: "cancelled", ids: ids, all: all ? [.queued, .running, .paused, .waiting] : nil)
            return
        }
        let journal = try journalOptions.open()
        let control = JobControl(
            journal: journal, verb: "cancel", done: "cancelled", nothing: "nothing to cancel",
            action: { journal, id throws(DownloadError) in try journal.cancel(id) })
        try control.run(ids: ids, all: all ? [.queued, .running, .paused, .waiting] : nil)
    }
}

/// `haul retry`: queues failed (or cancelled, or paused) downloads again.
struct Retry: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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

    mutating func run() async throws {
        if let address = try queueOptions.address() {
            let wanted = ids
            let count = try await QueueOptions.with(address) { queue in try await queue.retry(wanted) }
            Console.out("retry: \(count) job(s)\n")
            return
        }
        try JobControl.validate(ids: ids, all: allFailed, allFlag: "--all-failed")
        if let client = try ServiceMode.client(journalOptions) {
            try await ServiceMode.control(client, "retry", done: "queued", ids: ids, all: allFailed ? [.failed] : nil)
            return
        }
        let journal = try journalOptions.open()
        let control = JobControl(
            journal: journal, verb: "resume", done: "queued", nothing: "no failed jobs",
            action: { journal, id throws(DownloadError) in try journal.retry(id) })
        let applied = try control.run(ids: ids, all: allFailed ? [.failed] : nil)
        if applied > 0 { Console.out("run 'haul resume' to download \(applied == 1 ? "it" : "them")\n") }
    }
}

/// `haul clean`: forgets finished downloads and deletes orphaned partial files.
struct Clean: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove finished downloads from the journal and delete orphaned partial files.",
        discussion: """
            Deletes the journal's completed, failed and cancelled jobs, and every \
            NAME.haul-partial file (with its NAME.haul-meta) in the journal's download \
            directories that no unfinished download uses. Prints "removed N finished jobs \
            and M orphaned partial files".
            """)

    @OptionGroup var journalOptions: JournalOptions

    mutating func run() async throws {
        let journal = try journalOptions.open()
        do {
            let report = try journal.clean()
            let jobs = report.rows == 1 ? "job" : "jobs"
            let files = report.partialFiles == 1 ? "file" : "files"
            Console.out("removed \(report.rows) finished \(jobs) and \(report.partialFiles) orphaned partial \(files)\n")
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
    }
}

/// What pause, cancel and retry share: the arguments' rules, and one line per job.
struct JobControl {
    let journal: Journal
    /// The command's verb in "asked the running haul to VERB ID".
    let verb: String
    /// The past tense in "DONE ID".
    let done: String
    /// What to print when `--all` finds no job.
    let nothing: String
    let action: (Journal, DownloadID) throws(DownloadError) -> Journal.ControlResult

    /// Exactly one of: some IDs, or the "all" flag.
    static func validate(ids: [String], all: Bool, allFlag: String) throws {
        if ids.isEmpty && !all { throw ValidationError("Give the IDs of the downloads, or \(allFlag).") }
        if !ids.isEmpty && all { throw ValidationError("Give either IDs or \(allFlag), not both.") }
    }

    /// Applies the action to `ids`, or to every job in the `all` states; prints a line per
    /// job and returns how many were changed directly. Exits with 1 if an ID has no job.
    @discardableResult
    func run(ids: [String], all states: Set<JobState>?) throws -> Int {
        var targets: [DownloadID]
        do throws(DownloadError) {
            if let states {
                targets = try journal.jobs(in: states).map(\.id)
                if targets.isEmpty { Console.out(nothing + "\n") }
            } else {
                targets = try ids.map { text throws(DownloadError) in try resolve(text) }
            }
        } catch {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        }
        var missing = false
        var applied = 0
        for id in targets {
            let result: Journal.ControlResult
            do throws(DownloadError) {
                result = try action(journal, id)
            } catch {
                Console.err("haul: \(id): \(error.message)\n")
                missing = true
                continue
            }
            switch result {
            case .applied:
                applied += 1
                Console.out("\(done) \(id)\n")
            case .requested:
                Console.out("asked the running haul to \(verb) \(id)\n")
            case .unchanged(let state):
                Console.out("\(id) is already \(state.rawValue)\n")
            case .notFound:
                Console.err("haul: no job \(id)\n")
                missing = true
            }
        }
        if missing { throw ExitCode.failure }
        return applied
    }

    /// The ID as typed, or as URL parsing normalises it when only that one is in the journal.
    private func resolve(_ text: String) throws(DownloadError) -> DownloadID {
        let id = DownloadID(text)
        guard try journal.job(id) == nil, let normalised = URL(string: text)?.absoluteString, normalised != text
        else { return id }
        return try journal.job(DownloadID(normalised)) == nil ? id : DownloadID(normalised)
    }
}
