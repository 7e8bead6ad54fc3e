import ArgumentParser
import Foundation
import Haul
import HaulCommandSupport

/// What the commands that work on downloads ask for, carried out by one of three backends:
/// the local journal (``JournalBackend``), a running `haul serve` (``ServiceBackend``) or
/// the shared queue on PostgreSQL (``QueueBackend``).
///
/// A command is written once against this protocol; ``BackendChoice`` picks the backend
/// from its options. Each backend prints its outcome in its own words, as `haul` always
/// has (a line per job from the journal, a count from the service or the queue), and
/// returns the exit status. Every backend does all of it: what only some do is a protocol
/// of their own (``ResumingBackend``, and `clean`, which only ``JournalBackend`` has), and
/// what a backend refuses of the options is found when it is chosen, before it is opened
/// (``BackendChoice/refusal(of:)``).
protocol CommandBackend {
    /// Downloads (or queues) the entries of `batch`; returns the exit status.
    func get(_ batch: GetBatch) async throws -> Int32

    /// Prints the jobs `request` asks for.
    func list(_ request: ListRequest) async throws

    /// Pauses, cancels or retries downloads; prints what became of them. Exits with 1 when
    /// an ID names no job.
    func control(_ action: ControlAction, _ target: ControlTarget) async throws

    /// Releases the backend's connections; called once, when the command is done.
    func close() async
}

extension CommandBackend {
    /// Runs `body`, then closes the backend, whatever happens.
    func closing<T>(after body: () async throws -> T) async throws -> T {
        do {
            let result = try await body()
            await close()
            return result
        } catch {
            await close()
            throw error
        }
    }
}

/// A backend that continues a journal's unfinished downloads (`haul resume`): the journal
/// itself (``JournalBackend``) or the `haul serve` running for it (``ServiceBackend``),
/// as ``JournalChoice`` picks. The shared queue's jobs run on `haul worker` instead, so
/// ``QueueBackend`` is not one.
protocol ResumingBackend: CommandBackend {
    /// Continues every unfinished download; returns the exit status.
    func resume(_ run: RunSettings) async throws -> Int32
}

/// How downloads run in this process: the manager's configuration and the display.
struct RunSettings {
    /// The manager's configuration, checked.
    var configuration: DownloadManager.Configuration
    /// How progress is shown.
    var mode: ProgressRenderer.Mode
    /// Warnings about the options, printed when the downloads start (`--insecure`, a
    /// netrc file others can read).
    var warnings: [String]
    /// Programs run after each download ends (`--on-complete`, `--on-error`).
    var hooks = CompletionHooks()
    /// Whether nothing but errors is printed.
    var quiet: Bool { mode == .quiet }
}

/// The downloads `haul get` hands to a backend: its entries, checked by the first pass
/// (``EntryScan``), and how to fetch them.
struct GetBatch {
    /// The URLs given as arguments, checked.
    var urls: [URL]
    /// The entries of Metalink files (`FILE.meta4`, `--metalink URL`), after the URLs.
    var extra: [InputEntry]
    /// The input file (`-i`), read again from its start by ``entries(_:)``.
    var input: InputSource?
    /// What the first pass learnt.
    var scan: EntryScan
    /// `-o`, applied to every entry (there is one).
    var output: String?
    /// `--checksum`, applied to every entry (there is one).
    var checksum: Checksum?
    /// `--seed` files: local files that may hold blocks of a zsync control file's target,
    /// whether its URL ends in `.zsync` or it is recognised by its content.
    var seeds: [URL] = []
    /// How a URL whose download turns out to be an HLS playlist has its stream downloaded
    /// (`--hls-variant`, `--hls-renditions`, `--hls-duration`, the headers).
    var streamOptions = HLSOptions()
    /// `--mirror`, applied to every entry (there is one).
    var mirrors: [URL] = []
    /// The output directory (`-d`); created by the backend that writes into it.
    var directory: URL
    /// The object or prefix the downloads go into instead (`-o s3://bucket/key`,
    /// `-d s3://bucket/prefix/`); their bytes wait in ``directory`` until uploaded.
    var object: S3Location?
    /// `--header` values.
    var headers: [(name: String, value: String)]
    /// `--secret-header` values.
    var secretHeaders: [(name: String, value: String)]
    /// `--force`.
    var force: Bool
    /// `--store-credentials`.
    var storesCredentials: Bool
    /// `--detach`.
    var detach: Bool
    /// How the downloads run here.
    var run: RunSettings

    /// The output directory, created if missing (owner-only when it stages objects); a
    /// failure is said on standard error and exits with 1.
    func createdDirectory() throws -> URL {
        guard !FileManager.default.fileExists(atPath: directory.path) else { return directory }
        do {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true,
                attributes: object == nil ? nil : [.posixPermissions: 0o700])
        } catch {
            Console.err("haul: cannot create directory \(directory.path): \(error.localizedDescription)\n")
            throw ExitCode.failure
        }
        return directory
    }

    /// Every header, credentials included.
    var allHeaders: [(name: String, value: String)] { headers + secretHeaders }

    /// `entry` with `-o` and `--checksum` applied.
    func overridden(_ entry: InputEntry) -> InputEntry {
        var entry = entry
        if let output { entry.name = output }
        if let checksum { entry.checksum = checksum }
        if !mirrors.isEmpty { entry.mirrors = mirrors }
        return entry
    }

    /// Calls `body` with every entry, `-o` and `--checksum` applied, in order, until it
    /// returns `false`; the input file is read again, as a second pass (its problems are
    /// ``InputError``s).
    func entries(_ body: (InputEntry) async throws -> Bool) async throws {
        for url in urls {
            guard try await body(overridden(InputEntry(url: url))) else { return }
        }
        for entry in extra {
            guard try await body(overridden(entry)) else { return }
        }
        guard let input else { return }
        let reader = try input.secondPass()
        while let entry = try reader.next() {
            guard try await body(overridden(entry)) else { return }
        }
    }
}

/// What `haul list` asks for.
struct ListRequest {
    /// `--all`: every job, not only the unfinished and failed ones.
    var all: Bool
    /// `--json`.
    var json: Bool

    /// The states shown.
    var states: Set<JobState>? { all ? nil : [.queued, .running, .paused, .waiting, .failed] }
}

/// `haul pause`, `cancel` or `retry`.
enum ControlAction {
    case pause
    case cancel
    case retry

    /// The states `--all` (`--all-failed` for retry) applies to.
    var allStates: Set<JobState> {
        switch self {
        case .pause: [.queued, .running, .waiting]
        case .cancel: [.queued, .running, .paused, .waiting]
        case .retry: [.failed]
        }
    }

    /// The command's name, as the queue and the service's bulk API name the action.
    var name: String {
        switch self {
        case .pause: "pause"
        case .cancel: "cancel"
        case .retry: "retry"
        }
    }

    /// The past tense, in "DONE ID".
    var done: String {
        switch self {
        case .pause: "paused"
        case .cancel: "cancelled"
        case .retry: "queued"
        }
    }
}

/// The downloads a control command names.
enum ControlTarget {
    /// These IDs, as typed.
    case ids([String])
    /// Every download in the action's ``ControlAction/allStates``.
    case all
}

/// An operation a backend cannot carry out, with the message `haul` has always given.
/// Commands find these while checking their arguments (``BackendChoice/refusal(of:)``),
/// and report them as usage errors.
enum BackendRefusal: Error, CustomStringConvertible {
    /// `--detach` without a running service.
    case detachWithoutService
    /// Network options given to a command a running service carries out.
    case networkOptionsForService([String])
    /// `--max-overall-rate` or `--max-host-rate` given to a command a running service carries out.
    case ratesForService
    /// Credentials for the shared queue, which stores headers in the clear.
    case credentialsForQueue
    /// Hooks given to a command a running service carries out: they would never run.
    case hooksForService
    /// Hooks given with `--queue`: workers download, and run their own hooks.
    case hooksForQueue
    /// An object or prefix to store into given with `--queue`.
    case objectsForQueue
    /// A delta download given with `--queue`.
    case deltaForQueue
    case cacheForQueue

    var description: String {
        switch self {
        case .detachWithoutService:
            "--detach needs a running 'haul serve' for the journal."
        case .networkOptionsForService(let names):
            "a service runs for this journal and downloads with its own network settings: \(names.joined(separator: ", ")) would be ignored; give them to 'haul serve'."
        case .ratesForService:
            "a service runs for this journal, and its overall and per-host limits are its own: change them with PATCH /api/v1/settings (or 'haul serve --max-overall-rate'); --limit-rate works."
        case .credentialsForQueue:
            "--secret-header with --queue: the shared queue stores headers in the clear, so it does not take credentials"
        case .hooksForService:
            "a service runs for this journal and downloads in its own process: --on-complete and --on-error run where downloads run; give them to 'haul serve'."
        case .cacheForQueue:
            "with --queue, workers download: --cache is a directory of the process that downloads, so it cannot be used with --queue."
        case .hooksForQueue:
            "with --queue, workers download: --on-complete and --on-error run where downloads run; give them to 'haul worker'."
        case .deltaForQueue:
            "a delta download (URL.zsync, --zsync) builds on files of this machine: it is not for --queue, whose workers download elsewhere."
        case .objectsForQueue:
            "s3:// destinations are not for --queue: a shared queue's objects go where its workers put them (haul worker -d s3://bucket/prefix/)."
        }
    }
}
