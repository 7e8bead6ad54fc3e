import ArgumentParser
import Foundation
import Haul
import HaulPostgres
import HaulServer

/// The backend a command talks to, chosen once, as the command starts to run (its
/// arguments are checked by then), by the rules every command shares:
///
/// 1. `--queue URL` names the shared queue on PostgreSQL (``QueueBackend``);
/// 2. else the journal's downloads (``JournalChoice``): a `haul serve` running for the
///    journal carries the command out (``ServiceBackend``);
/// 3. else the journal, opened by this process (``JournalBackend``).
///
/// ``refusal(of:)`` holds what each backend cannot do; ``open()`` makes the backend.
enum BackendChoice {
    /// The journal's downloads, here or through the service that runs for it.
    case journal(JournalChoice)
    /// The shared queue.
    case queue(QueueAddress)

    /// What a command needs of its backend beyond listing and controlling jobs.
    struct Needs {
        /// `--detach`: queue the downloads with a service and exit.
        var detach = false
        /// `--secret-header` given.
        var credentials = false
        /// The network options given (``NetworkOptions/given``).
        var networkOptions: [String] = []
        /// `--max-overall-rate` or `--max-host-rate` given.
        var overallRates = false
        /// `--on-complete` or `--on-error` given: they run in the process that downloads.
        var hooks = false
        /// An object (`-o s3://bucket/key`) or prefix (`-d s3://bucket/prefix/`) to store into.
        var objects = false
        /// A delta download (`URL.zsync`, `--zsync`): its seeds are files of this machine.
        var delta = false
        /// `--cache`: a cache directory of this machine, for the downloads this process runs.
        var cache = false
    }

    /// The backend for a command with these options; `queue` is `nil` for a command
    /// without `--queue`.
    static func make(journal: JournalOptions, queue: QueueOptions? = nil) throws -> BackendChoice {
        if let address = try queue?.address() { return .queue(address) }
        return .journal(JournalChoice.make(journal: journal))
    }

    /// Why this backend cannot do what a command `needs`, or `nil` when it can.
    func refusal(of needs: Needs) -> BackendRefusal? {
        switch self {
        case .journal(let choice):
            return choice.refusal(of: needs)
        case .queue:
            if needs.hooks { return .hooksForQueue }
            if needs.objects { return .objectsForQueue }
            if needs.delta { return .deltaForQueue }
            if needs.cache { return .cacheForQueue }
            return needs.credentials ? .credentialsForQueue : nil
        }
    }

    /// Throws the refusal of `needs` as a usage error (``HaulCommand`` reports it with the
    /// command's usage).
    func permit(_ needs: Needs) throws {
        if let refusal = refusal(of: needs) { throw ValidationError(refusal.description) }
    }

    /// The downloads a control command (`pause`, `cancel`, `retry`) names, by this backend's
    /// rules: the shared queue takes IDs (retry without any retries every failed job) and
    /// ignores `--all`; the others take IDs or the `all` flag, exactly one of them.
    func target(of action: ControlAction, ids: [String], all: Bool, allFlag: String) throws -> ControlTarget {
        if case .queue = self {
            if ids.isEmpty, action != .retry { throw ValidationError("give the IDs of the jobs") }
            return .ids(ids)
        }
        if ids.isEmpty && !all { throw ValidationError("Give the IDs of the downloads, or \(allFlag).") }
        if !ids.isEmpty && all { throw ValidationError("Give either IDs or \(allFlag), not both.") }
        return all ? .all : .ids(ids)
    }

    /// The rules `haul get` checks its entries by, for this backend: the shared queue's
    /// messages speak of queueing, and it refuses file names outside its workers' directory
    /// and credential headers (each entry is checked with `-o` and `--checksum` applied).
    func entryRules(
        output: String?, checksum: Checksum?, mirrors: [URL], headers: [(name: String, value: String)]
    ) -> EntryScan.Rules {
        EntryScan.Rules(output: output, checksum: checksum, mirrors: mirrors, queueing: isQueue) { entry in
            if case .queue = self { _ = try QueueBackend.request(for: entry, headers: headers) }
        }
    }

    /// The object storage that downloads into `object` are stored with, if any: the
    /// environment's (``DownloadManager/ObjectStorage/fromEnvironment()``) when they run here; `nil` when a
    /// running service stores them (with its own credentials, under its object roots) or
    /// none is named. Throws a usage error when the environment has no usable credentials.
    func objectStorage(for object: S3Location?) throws -> DownloadManager.ObjectStorage? {
        guard object != nil, case .journal(.here) = self else { return nil }
        do throws(DownloadError) {
            return try .fromEnvironment()
        } catch {
            throw ValidationError("\(error.message).")
        }
    }

    /// Whether this is the shared queue, whose messages speak of queueing.
    var isQueue: Bool {
        if case .queue = self { true } else { false }
    }

    /// Opens the backend. A failure to open it is said on standard error and exits with 1.
    func open() throws -> any CommandBackend {
        switch self {
        case .queue(let address): QueueBackend(address: address)
        case .journal(let choice): try choice.open()
        }
    }

    /// Runs `body` with the opened backend, closing it after, whatever happens.
    func with<T>(_ body: (any CommandBackend) async throws -> T) async throws -> T {
        let backend = try open()
        return try await backend.closing(after: { try await body(backend) })
    }
}

/// Who works on a journal's downloads for a command: the `haul serve` running for the
/// journal (``ServiceBackend``), else this process, on the journal itself
/// (``JournalBackend``). Either continues unfinished downloads (``ResumingBackend``), so
/// this is the whole choice of `haul resume`, which takes no `--queue`.
enum JournalChoice {
    /// The journal at this path, opened here.
    case here(path: String)
    /// The service that ran for the journal at this path when the choice was made.
    case service(journalPath: String)

    /// The service running for the journal `journal` names, if one runs; else the journal.
    static func make(journal: JournalOptions) -> JournalChoice {
        let path = journal.resolvedPath
        return ServiceFiles(journalPath: path).runningAddress() != nil ? .service(journalPath: path) : .here(path: path)
    }

    /// Why this backend cannot do what a command `needs`, or `nil` when it can.
    func refusal(of needs: BackendChoice.Needs) -> BackendRefusal? {
        switch self {
        case .here:
            return needs.detach ? .detachWithoutService : nil
        case .service:
            if !needs.networkOptions.isEmpty { return .networkOptionsForService(needs.networkOptions) }
            if needs.hooks { return .hooksForService }
            return needs.overallRates ? .ratesForService : nil
        }
    }

    /// Throws the refusal of `needs` as a usage error (``HaulCommand`` reports it with the
    /// command's usage).
    func permit(_ needs: BackendChoice.Needs) throws {
        if let refusal = refusal(of: needs) { throw ValidationError(refusal.description) }
    }

    /// Opens the backend. A failure to open it is said on standard error and exits with 1.
    /// A service that stopped since the choice leaves the journal to this process.
    func open() throws -> any ResumingBackend {
        switch self {
        case .service(let path):
            let client: ServiceClient?
            do {
                client = try ServiceClient(journalPath: path)
            } catch {
                Console.err("haul: \(error.message)\n")
                throw ExitCode.failure
            }
            if let client { return ServiceBackend(client: client) }
            return try JournalBackend(path: path)
        case .here(let path):
            return try JournalBackend(path: path)
        }
    }

    /// Runs `body` with the opened backend, closing it after, whatever happens.
    func with<T>(_ body: (any ResumingBackend) async throws -> T) async throws -> T {
        let backend = try open()
        return try await backend.closing(after: { try await body(backend) })
    }
}
