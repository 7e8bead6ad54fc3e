import ArgumentParser
import Foundation
import Haul
import HaulPostgres
import HaulServer

/// The backend a command talks to, chosen once, while its arguments are checked, by the
/// rules every command shares:
///
/// 1. `--queue URL` names the shared queue on PostgreSQL (``QueueBackend``);
/// 2. else a `haul serve` running for the journal carries the command out
///    (``ServiceBackend``), unless the command only ever works on the journal itself;
/// 3. else the journal, opened by this process (``JournalBackend``).
///
/// ``refusal(of:)`` holds what each backend cannot do; ``open()`` makes the backend.
enum BackendChoice {
    /// The journal at this path, opened here.
    case journal(path: String)
    /// The service that ran for the journal at this path when the choice was made.
    case service(journalPath: String)
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
    }

    /// The backend for a command with these options. `queue` is `nil` for a command
    /// without `--queue`; `followsService` is `false` for one that always works on the
    /// journal itself (`haul clean`).
    static func make(journal: JournalOptions, queue: QueueOptions? = nil, followsService: Bool = true) throws
        -> BackendChoice
    {
        if let address = try queue?.address() { return .queue(address) }
        let path = journal.resolvedPath
        if followsService, ServiceFiles(journalPath: path).runningAddress() != nil { return .service(journalPath: path) }
        return .journal(path: path)
    }

    /// Why this backend cannot do what a command `needs`, or `nil` when it can.
    func refusal(of needs: Needs) -> BackendRefusal? {
        switch self {
        case .journal:
            return needs.detach ? .detachWithoutService : nil
        case .service:
            if !needs.networkOptions.isEmpty { return .networkOptionsForService(needs.networkOptions) }
            if needs.hooks { return .hooksForService }
            return needs.overallRates ? .ratesForService : nil
        case .queue:
            if needs.hooks { return .hooksForQueue }
            return needs.credentials ? .credentialsForQueue : nil
        }
    }

    /// Throws the refusal of `needs` as a usage error, for `validate()`.
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

    /// Checks `entry` (with `-o` and `--checksum` applied) as this backend will take it:
    /// the shared queue refuses file names outside its workers' directory and credential
    /// headers. Throws a usage error.
    func check(_ entry: InputEntry, headers: [(name: String, value: String)]) throws {
        if case .queue = self { _ = try QueueBackend.request(for: entry, headers: headers) }
    }

    /// Whether this is the shared queue, whose messages speak of queueing.
    /// Whether the downloads run here, on the local journal.
    var isJournal: Bool {
        if case .journal = self { true } else { false }
    }

    var isQueue: Bool {
        if case .queue = self { true } else { false }
    }

    /// Opens the backend. A failure to open it is said on standard error and exits with 1.
    /// A service that stopped since the choice leaves the journal to this process.
    func open() throws -> any CommandBackend {
        switch self {
        case .queue(let address):
            return QueueBackend(address: address)
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
        case .journal(let path):
            return try JournalBackend(path: path)
        }
    }

    /// Runs `body` with the opened backend, closing it after, whatever happens.
    func with<T>(_ body: (any CommandBackend) async throws -> T) async throws -> T {
        let backend = try open()
        do {
            let result = try await body(backend)
            await backend.close()
            return result
        } catch {
            await backend.close()
            throw error
        }
    }
}
