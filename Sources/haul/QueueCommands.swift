import ArgumentParser
import Foundation
import Haul
import HaulPostgres
import Logging
import ServiceLifecycle

/// `--queue`: the shared queue on PostgreSQL (issue 14) that `haul worker` takes jobs from
/// and `get`, `list`, `pause`, `cancel` and `retry` work on instead of the journal.
///
/// The URL comes from `--queue` or `$HAUL_QUEUE_URL`. A password may travel only in the
/// environment variable, `PGPASSWORD` or `~/.pgpass`: never in argv, where other users see it.
struct QueueOptions: ParsableArguments {
    @Option(
        name: .customLong("queue"),
        help: ArgumentHelp(
            "A shared queue on PostgreSQL, postgres://USER@HOST[:PORT]/DATABASE (default: $HAUL_QUEUE_URL). The password comes from PGPASSWORD, ~/.pgpass or $HAUL_QUEUE_URL, never from the command line.",
            valueName: "url"))
    var queue: String?

    /// The queue named by `--queue`, or by `$HAUL_QUEUE_URL` where the command needs a queue
    /// (`required`) or takes one from the environment (`fromEnvironment`: `haul serve`);
    /// `nil` when none is.
    func address(required: Bool = false, fromEnvironment: Bool = false) throws -> QueueAddress? {
        do {
            if let queue { return try QueueAddress(parsing: queue, fromCommandLine: true) }
            if let text = ProcessInfo.processInfo.environment["HAUL_QUEUE_URL"], !text.isEmpty,
                required || fromEnvironment
            {
                return try QueueAddress(parsing: text, fromCommandLine: false)
            }
        } catch {
            throw ValidationError(error.message)
        }
        if required { throw ValidationError("name the shared queue with --queue URL or HAUL_QUEUE_URL") }
        return nil
    }

    /// Runs `body` with the queue's connection pool running.
    static func with<T: Sendable>(_ address: QueueAddress, _ body: @Sendable (PostgresQueue) async throws -> T)
        async throws -> T
    {
        let queue = PostgresQueue(address: address)
        return try await queue.withRunning {
            try await queue.migrate()
            return try await body(queue)
        }
    }
}

/// `haul worker`: runs jobs of a shared queue on this machine until SIGTERM or SIGINT.
struct Worker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "Run jobs of a shared queue on PostgreSQL, beside other workers on other machines.",
        discussion: """
            Workers lease jobs (FOR UPDATE SKIP LOCKED), renew their leases while they run, and \
            stop a transfer whose lease another worker took. A job whose worker died is taken \
            over once its lease expires, from its committed bytes when the partial file is on \
            storage the workers share (the same -d), from zero otherwise. SIGTERM or SIGINT \
            stops the transfers, keeping their partial files, and gives the jobs back.
            """)

    @OptionGroup var queueOptions: QueueOptions

    @Option(
        name: [.customShort("j"), .customLong("jobs")],
        help: ArgumentHelp("How many jobs run at once on this worker. (default: 4)", valueName: "n"))
    var jobs = 4

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp(
            "How many jobs may use the same host at once, across all the workers of the queue (give every worker the same value). (default: no cap)",
            valueName: "n"))
    var perHost: Int?

    @Option(
        name: [.customShort("d"), .customLong("directory")],
        help: ArgumentHelp("Where files go. (default: the current directory)", valueName: "dir"))
    var directory = "."

    @Option(help: ArgumentHelp("How long a lease holds a job, in seconds. (default: 30)", valueName: "seconds"))
    var lease = 30

    @OptionGroup(title: "Network options") var network: NetworkOptions

    func validate() throws {
        guard jobs >= 1 else { throw ValidationError("-j must be at least 1") }
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1") }
        guard lease >= 4 else { throw ValidationError("--lease must be at least 4 seconds") }
    }

    mutating func run() async throws {
        guard let address = try queueOptions.address(required: true) else { return }
        let url = URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        var settings = QueueWorker.Settings(directory: url)
        settings.slots = jobs
        settings.perHost = perHost
        settings.lease = .seconds(lease)
        try network.apply(to: &settings.configuration)
        let queue = PostgresQueue(address: address)
        let worker = QueueWorker(
            queue: queue, settings: settings, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool,
            logger: Logger(label: "haul.worker", factory: { _ in WorkerLogHandler() }))
        Console.err("haul worker: jobs of \(address) into \(url.path)\n")
        try await queue.withRunning {
            let group = ServiceGroup(
                configuration: .init(
                    services: [.init(service: AnnouncedWorker(worker: worker))], gracefulShutdownSignals: [.sigterm, .sigint],
                    logger: .init(label: "haul.worker", factory: { _ in SwiftLogNoOpLogHandler() })))
            try await group.run()
        }
    }
}

/// The worker as a service that says on stderr when it is registered and listening:
/// `haul worker: worker ID is listening for jobs`.
private struct AnnouncedWorker: Service {
    let worker: QueueWorker

    func run() async throws {
        try await worker.run(started: { id in Console.err("haul worker: worker \(id) is listening for jobs\n") })
    }
}

/// What a worker logs at notice level and above (a lease lost, a write refused, the
/// database unreachable), one line each on stderr: `haul worker: MESSAGE`. The queue's
/// address in messages is its description, which never holds the password.
struct WorkerLogHandler: LogHandler {
    var logLevel: Logger.Level = .notice
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let details = merged.isEmpty ? "" : " (" + merged.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
        Console.err("haul worker: \(event.message)\(details)\n")
    }
}
