import ArgumentParser
import Foundation
import Haul
import HaulCommandSupport
import HaulPostgres
import HaulServer
import Logging
import ServiceLifecycle

/// `haul worker`: runs jobs of a shared queue on this machine until SIGTERM or SIGINT.
struct Worker: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "worker",
            abstract: "Run jobs of a shared queue on PostgreSQL, beside other workers on other machines.",
            discussion: """
                Workers lease jobs (FOR UPDATE SKIP LOCKED), renew their leases while they run, and \
                stop a transfer whose lease another worker took. A job whose worker died is taken \
                over once its lease expires, from its committed bytes when the partial file is on \
                storage the workers share (the same -d), from zero otherwise. SIGTERM or SIGINT \
                stops the transfers, keeping their partial files, and gives the jobs back.
                """))

    @OptionGroup var queueOptions: QueueOptions

    @Option(
        name: [.customShort("j"), .customLong("jobs")],
        help: ArgumentHelp("How many jobs run at once on this worker.", valueName: "n"))
    var jobs = 4

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp(
            "How many jobs may use the same host at once, across all the workers of the queue (give every worker the same value). (default: no cap)",
            valueName: "n"))
    var perHost: Int?

    @Option(
        name: [.customShort("d"), .customLong("directory")],
        help: ArgumentHelp(
            "Where files go, or the S3 prefix objects go into (s3://bucket/prefix/). (default: the current directory)",
            valueName: "dir"))
    var directoryOption: String?
    /// `-d`, or the current directory.
    var directory: String { directoryOption ?? "." }

    @Option(
        help: ArgumentHelp(
            "With -d s3://…: where objects' bytes wait until uploaded. (default: 'staging' beside the default journal)",
            valueName: "dir"))
    var staging: String?

    @Option(help: ArgumentHelp("How long a lease holds a job, in seconds.", valueName: "seconds"))
    var lease = 30

    @OptionGroup(title: "Network options") var network: NetworkOptions

    @Option(
        name: .customLong("metrics-listen"),
        help: ArgumentHelp(
            "Serve the worker's metrics in Prometheus' format at http://ADDRESS/metrics; port 0 picks a free one. Loopback only, unless $HAUL_TOKEN is set, which a scrape must then send as a bearer token. (default: none)",
            valueName: "host:port"))
    var metricsListen: String?

    @OptionGroup(title: "Log options") var log: LogOptions

    @OptionGroup(title: "Hooks") var hookOptions: HookOptions

    /// The worker's settings, once `validate()` has checked them.
    @Derived var settings: QueueWorker.Settings?

    mutating func validate() throws {
        guard jobs >= 1 else { throw ValidationError("-j must be at least 1") }
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1") }
        guard lease >= 4 else { throw ValidationError("--lease must be at least 4 seconds") }
        if let metricsListen, Serve.parse(metricsListen) == nil {
            throw ValidationError("--metrics-listen takes host:port, such as 127.0.0.1:9464 or [::1]:9464.")
        }
        var settings: QueueWorker.Settings
        if directory.hasPrefix("s3://") {
            let prefix: S3Location
            do throws(DownloadError) {
                prefix = try S3Location(parsing: directory.hasSuffix("/") ? directory : directory + "/")
            } catch {
                throw ValidationError("-d \(directory): \(error.message)")
            }
            let staging =
                self.staging ?? PathText.appending("staging", to: PathText.directory(of: Journal.defaultPath))
            settings = QueueWorker.Settings(directory: URL(fileURLWithPath: staging, isDirectory: true).standardizedFileURL)
            settings.bucket = prefix.bucket
            settings.keyPrefix = prefix.key
            do throws(DownloadError) {
                settings.configuration.objectStorage = try .fromEnvironment()
            } catch {
                throw ValidationError("\(error.message).")
            }
        } else {
            if staging != nil { throw ValidationError("--staging goes with -d s3://bucket/prefix/ only.") }
            settings = QueueWorker.Settings(
                directory: URL(fileURLWithPath: directory, isDirectory: true).standardizedFileURL)
        }
        settings.slots = jobs
        settings.perHost = perHost
        settings.lease = .seconds(lease)
        try network.apply(to: &settings.configuration)
        self.settings = settings
    }

    mutating func run() async throws {
        let settings = $settings
        // The queue's address, with its password (PGPASSWORD, ~/.pgpass, $HAUL_QUEUE_URL).
        guard let address = try queueOptions.address(required: true) else { return }
        let backend = QueueBackend(address: address)
        try FileManager.default.createDirectory(at: settings.directory, withIntermediateDirectories: true)
        let logger = log.logger(label: "haul.worker", name: "haul worker")
        let target = settings.bucket.map { "s3://\($0)/\(settings.keyPrefix)" } ?? settings.directory.path
        logger.notice("jobs of \(backend.address) into \(target)")
        let metrics = metricsListen.flatMap(Serve.parse).map { (host: $0.0, port: $0.1) }
        try await backend.work(settings, logger: logger, hooks: hookOptions.$hooks, metricsAddress: metrics)
    }
}

extension QueueBackend {
    /// `haul worker`: runs the queue's jobs with `settings` until SIGTERM or SIGINT, in a
    /// service group that turns either signal into a graceful shutdown; `logger` hears the
    /// worker's leases and errors and every download's end, and `hooks` run after each end.
    ///
    /// With `metricsAddress`, the worker's metrics are served at `/metrics` there.
    func work(
        _ settings: QueueWorker.Settings, logger: Logger, hooks: CompletionHooks,
        metricsAddress: (host: String, port: Int)? = nil
    ) async throws {
        let queue = PostgresQueue(address: address)
        let worker = QueueWorker(
            queue: queue, settings: settings, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: AnnouncedWorker(worker: worker, logger: logger))
        ]
        var metrics: ServiceMetrics?
        if let metricsAddress {
            guard #available(macOS 14, iOS 17, tvOS 17, *) else {
                throw ValidationError("--metrics-listen needs macOS 14 or later.")
            }
            let recorder = ServiceMetrics(worker: true)
            metrics = recorder
            let token = ProcessInfo.processInfo.environment[ServiceFiles.tokenVariable].flatMap { $0.isEmpty ? nil : $0 }
            do {
                let server = try WorkerMetricsServer.make(
                    worker: worker, metrics: recorder, host: metricsAddress.host, port: metricsAddress.port, token: token,
                    eventLoopGroup: ProcessResources.eventLoopGroup, logger: logger
                ) { address in logger.notice("metrics at http://\(address)/metrics") }
                services.append(.init(service: server))
            } catch {
                throw ValidationError(error.description)
            }
        }
        let allServices = services
        let downloadLog = Task { [metrics] in await DownloadLog.record(worker.downloadEvents, to: logger, metrics: metrics) }
        defer { downloadLog.cancel() }
        let hookEvents = hooks.isEmpty ? nil : worker.downloadEvents
        let hookRuns = Task {
            guard let hookEvents else { return }
            await hooks.run(hookEvents, logger: logger)
        }
        defer { hookRuns.cancel() }
        try await queue.withRunning {
            let group = ServiceGroup(
                configuration: .init(
                    services: allServices, gracefulShutdownSignals: [.sigterm, .sigint],
                    logger: .init(label: "haul.worker", factory: { _ in SwiftLogNoOpLogHandler() })))
            try await group.run()
        }
        await hookRuns.value
    }
}

/// The worker as a service that logs when it is registered and listening:
/// `haul worker: worker ID is listening for jobs`.
private struct AnnouncedWorker: Service {
    let worker: QueueWorker
    let logger: Logger

    func run() async throws {
        try await worker.run(started: { id in logger.notice("worker \(id) is listening for jobs") })
    }
}
