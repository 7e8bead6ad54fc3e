import ArgumentParser
import Foundation
import Haul
import HaulPostgres

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
        help: ArgumentHelp(
            "Where files go, or the S3 prefix objects go into (s3://bucket/prefix/). (default: the current directory)",
            valueName: "dir"))
    var directory = "."

    @Option(
        help: ArgumentHelp(
            "With -d s3://…: where objects' bytes wait until uploaded. (default: 'staging' beside the default journal)",
            valueName: "dir"))
    var staging: String?

    @Option(help: ArgumentHelp("How long a lease holds a job, in seconds. (default: 30)", valueName: "seconds"))
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

    /// The queue and the worker's settings, once `validate()` has checked them.
    @Derived var plan: (backend: QueueBackend, settings: QueueWorker.Settings)?

    mutating func validate() throws {
        guard jobs >= 1 else { throw ValidationError("-j must be at least 1") }
        if let perHost, perHost < 1 { throw ValidationError("--per-host must be at least 1") }
        guard lease >= 4 else { throw ValidationError("--lease must be at least 4 seconds") }
        if let metricsListen, Serve.parse(metricsListen) == nil {
            throw ValidationError("--metrics-listen takes host:port, such as 127.0.0.1:9464 or [::1]:9464.")
        }
        guard let address = try queueOptions.address(required: true) else { return }
        var settings: QueueWorker.Settings
        if directory.hasPrefix("s3://") {
            let prefix: S3Location
            do throws(DownloadError) {
                prefix = try S3Location(parsing: directory.hasSuffix("/") ? directory : directory + "/")
            } catch {
                throw ValidationError("-d \(directory): \(error.message)")
            }
            let staging =
                self.staging ?? ((Journal.defaultPath as NSString).deletingLastPathComponent as NSString)
                .appendingPathComponent("staging")
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
        plan = (QueueBackend(address: address), settings)
    }

    mutating func run() async throws {
        let (backend, settings) = $plan
        try FileManager.default.createDirectory(at: settings.directory, withIntermediateDirectories: true)
        let logger = log.logger(label: "haul.worker", name: "haul worker")
        let target = settings.bucket.map { "s3://\($0)/\(settings.keyPrefix)" } ?? settings.directory.path
        logger.notice("jobs of \(backend.address) into \(target)")
        let metrics = metricsListen.flatMap(Serve.parse).map { (host: $0.0, port: $0.1) }
        try await backend.work(settings, logger: logger, hooks: hookOptions.$hooks, metricsAddress: metrics)
    }
}
