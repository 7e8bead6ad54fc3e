import Foundation
package import Haul
package import HaulCommandSupport
package import HaulPostgres
import Hummingbird
package import Logging
import NIOConcurrencyHelpers
package import NIOCore
package import NIOPosix
import ServiceLifecycle

/// `haul serve`: one long-running owner of a journal's jobs, with the API and the
/// dashboard in front of it.
///
/// It takes the journal's service lock (one service per journal), finds its token, resumes
/// the jobs that were running when the last process stopped (those a person paused stay
/// paused), and serves until SIGTERM or SIGINT. Then it stops accepting requests, ends the
/// event streams, pauses every download with its partial file checkpointed, and exits.
@available(macOS 14, iOS 17, tvOS 17, *)
package enum HaulService {
    /// How the service runs.
    package struct Options: Sendable {
        /// The address to listen on; loopback unless a token is configured.
        package var host = "127.0.0.1"
        /// The port; 0 picks a free one (the address file says which).
        package var port = 6800
        package var journalPath: String
        package var slots = 10
        /// Programs run after each download ends (`--on-complete`, `--on-error`): set by
        /// whoever starts the service, never through its API.
        package var hooks = CompletionHooks()
        /// Receivers of a signed `POST` for each download end (`--webhook`), which ends,
        /// and the secret the bodies are signed with (`--webhook-secret-file`).
        package var webhooks: [String] = []
        package var webhookKinds: Set<Journal.Outbox.Kind> = [.completed, .failed]
        package var webhookSecret: [UInt8] = []
        /// The per-host cap; `nil` for the default (6), which does not cap a download's
        /// connections (see ``connections``).
        package var perHost: Int?
        /// How many connections each large download uses (`haul serve -x`); `nil` for the
        /// default (4).
        package var connections: Int?
        /// Where downloads go when a request names no directory.
        package var directory: String
        /// Directories downloads may go into; the default directory alone when empty.
        package var roots: [String] = []
        /// S3 prefixes downloads may go into (`--root s3://bucket/prefix/`), with the store
        /// and credentials in ``network``'s ``DownloadManager/Configuration/objectStorage``.
        /// Objects' bytes wait in `staging` beside the journal.
        package var objectRoots: [String] = []
        /// More names the `Host` header may use (a host name the service is reached by).
        package var hostNames: [String] = []
        /// Other sites' origins whose pages may call the aria2 JSON-RPC interface, with CORS.
        package var rpcOrigins: [String] = []
        /// Speed limits in bytes per second (`nil`: none): all downloads together, each
        /// host, and each download without one of its own.
        package var maxBytesPerSecond: Int?
        package var maxBytesPerSecondPerHost: Int?
        package var maxBytesPerSecondPerDownload: Int?
        /// The manager's network settings (proxy, TLS, netrc, User-Agent, address family),
        /// as `haul get` takes them; the settings above replace theirs.
        package var network = DownloadManager.Configuration()
        /// A shared queue on PostgreSQL whose jobs and workers the service shows and
        /// controls besides its own downloads (`--queue`); `nil` for none.
        package var queue: QueueAddress?
        package var environment: [String: String] = ProcessInfo.processInfo.environment
        /// The event loops the HTTP server and the download manager share.
        package var eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
        /// The threads for the manager's file work and the service's journal reads; `nil`:
        /// the manager's own.
        package var threadPool: NIOThreadPool?

        package init(journalPath: String, directory: String) {
            self.journalPath = journalPath
            self.directory = directory
        }
    }

    /// Why the service cannot start.
    package struct StartError: Error, CustomStringConvertible, Sendable {
        package var description: String
    }

    /// Runs the service until a signal stops it. `ready` is called with the address once
    /// it listens, and whether the token was generated now (and where it is).
    package static func run(
        _ options: Options, logger: Logger = Logger(label: "haul.serve"),
        ready: @escaping @Sendable (_ address: String, _ tokenNote: String) -> Void = { _, _ in }
    ) async throws {
        let files = ServiceFiles(journalPath: options.journalPath)
        // The journal's directory holds the token too: made private, as the journal makes it.
        let journalDirectory = PathText.directory(of: options.journalPath)
        if !FileManager.default.fileExists(atPath: journalDirectory) {
            try? FileManager.default.createDirectory(
                atPath: journalDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let token: String
        let tokenNote: String
        do {
            let (found, source) = try files.token(environment: options.environment)
            token = found
            switch source {
            case .environment: tokenNote = "the token is $\(ServiceFiles.tokenVariable)"
            case .file: tokenNote = "the token is in \(files.tokenPath)"
            case .generated: tokenNote = "a new token was written to \(files.tokenPath)"
            }
            guard AccessRules.mayListen(on: options.host, operatorToken: source != .generated) else {
                throw StartError(
                    description: "refusing to listen on \(options.host), which is not a loopback address, with a token "
                        + "nobody was given: set $\(ServiceFiles.tokenVariable) or write \(files.tokenPath) (mode 0600) first")
            }
        } catch let failure as ServiceFiles.Failure {
            throw StartError(description: failure.message)
        }
        let lock: ServiceFiles.Lock
        do {
            lock = try files.acquire()
        } catch {
            throw StartError(description: error.message)
        }
        defer { lock.release() }

        guard let address = options.queue else {
            try await serve(options, token: token, tokenNote: tokenNote, files: files, queue: nil, logger: logger, ready: ready)
            return
        }
        // The queue's connection pool runs as long as the service.
        let queue = PostgresQueue(address: address)
        try await queue.withRunning {
            do {
                try await ClusterCore.within(ClusterCore.requestTimeout) { try await queue.migrate() }
            } catch {
                throw StartError(description: "cannot use the shared queue at \(address): \(PostgresQueue.reason(error))")
            }
            try await serve(options, token: token, tokenNote: tokenNote, files: files, queue: queue, logger: logger, ready: ready)
        }
    }

    /// Runs the service once its token and lock are settled and its queue, if any, is
    /// reachable.
    private static func serve(
        _ options: Options, token: String, tokenNote: String, files: ServiceFiles, queue: PostgresQueue?, logger: Logger,
        ready: @escaping @Sendable (_ address: String, _ tokenNote: String) -> Void
    ) async throws {
        let batch: DownloadBatch
        do {
            var objectRoots: [S3Location] = []
            for root in options.objectRoots {
                do throws(DownloadError) {
                    objectRoots.append(try S3Location(parsing: root.hasSuffix("/") ? root : root + "/"))
                } catch {
                    throw StartError(description: "--root \(root): \(error.message)")
                }
            }
            if !objectRoots.isEmpty, options.network.objectStorage == nil {
                throw StartError(description: "--root s3://…: no object store is configured (AWS_* variables or ~/.aws)")
            }
            let staging = URL(fileURLWithPath: PathText.directory(of: options.journalPath))
                .appendingPathComponent("staging", isDirectory: true)
            batch = try DownloadBatch(
                roots: options.roots.isEmpty ? [options.directory] : options.roots, defaultDirectory: options.directory,
                objectRoots: objectRoots, staging: objectRoots.isEmpty ? nil : staging)
        } catch let error as StartError {
            throw error
        } catch let error as FieldError {
            throw StartError(description: error.message)
        }
        let journal: Journal
        do {
            journal = try Journal(path: options.journalPath)
        } catch {
            throw StartError(description: error.message)
        }
        var configuration = DownloadManager.Configuration()
        configuration.proxy = options.network.proxy
        configuration.tls = options.network.tls
        configuration.netrc = options.network.netrc
        configuration.userAgent = options.network.userAgent
        configuration.addressFamily = options.network.addressFamily
        configuration.objectStorage = options.network.objectStorage
        configuration.maxConcurrentDownloads = options.slots
        if let perHost = options.perHost { configuration.maxConnectionsPerHost = perHost }
        if let connections = options.connections { configuration.segmentedConnections = connections }
        configuration.maxBytesPerSecond = options.maxBytesPerSecond
        configuration.maxBytesPerSecondPerHost = options.maxBytesPerSecondPerHost
        configuration.maxBytesPerSecondPerDownload = options.maxBytesPerSecondPerDownload
        configuration.connectionPoolLimit = SettingsAPI.maximumPerHost
        let manager = DownloadManager(
            configuration: configuration, journal: journal, eventLoopGroup: options.eventLoopGroup,
            threadPool: options.threadPool)
        let core = ServiceCore(manager: manager, journal: journal, batch: batch, queue: queue)
        // Every download's end in the log, until the manager shuts down.
        let downloadEvents = manager.events(includingProgress: false)
        let metrics = core.metrics
        // Webhooks: the ends are written to the journal's outbox with the ends themselves;
        // the delivery looks again after every batched write, and at start for what an
        // earlier run left.
        let delivery: WebhookDelivery?
        if options.webhooks.isEmpty {
            journal.outbox = nil
            delivery = nil
        } else {
            journal.outbox = Journal.Outbox(targets: options.webhooks, kinds: options.webhookKinds)
            delivery = WebhookDelivery(
                journal: journal, secret: options.webhookSecret, threadPool: manager.threadPool,
                eventLoopGroup: manager.eventLoopGroup, logger: logger)
        }
        journal.observeWrites { duration in
            metrics.journalWrote(in: duration)
            delivery?.wake()
        }
        let deliveries = Task { await delivery?.run() }
        defer { deliveries.cancel() }
        let downloadLog = Task { await DownloadLog.record(downloadEvents, to: logger, metrics: metrics) }
        defer { downloadLog.cancel() }
        let hooks = options.hooks
        let hookEvents = hooks.isEmpty ? nil : manager.events(includingProgress: false)
        let hookRuns = Task {
            guard let hookEvents else { return }
            await hooks.run(hookEvents, logger: logger)
        }
        defer { hookRuns.cancel() }
        await core.hub.start()
        await core.cluster?.monitor.start()
        do {
            try await manager.resumeUnfinished(keepingPaused: true)
        } catch {
            await manager.shutdown()
            throw StartError(description: "cannot resume the journal's downloads: \(error.message)")
        }

        let host = options.host
        let names = options.hostNames
        let rpcOrigins = Set(options.rpcOrigins)
        let rules = AccessRulesBox(AccessRules(token: token, allowedHosts: [], rpcOrigins: rpcOrigins))
        // aria2.shutdown stops the service as SIGTERM does.
        let running = NIOLockedValueBox<ServiceGroup?>(nil)
        let rpc = Aria2RPC(core: core, rules: rules) { await running.withLockedValue { $0 }?.triggerGracefulShutdown() }
        let router = ServiceRouter.make(core: core, rules: rules, rpc: rpc)
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(webSocketRouter: WebSocketRouter.make(core: core, rules: rules, rpc: rpc)),
            configuration: ApplicationConfiguration(address: .hostname(host, port: options.port), serverName: nil),
            services: [Stopper(core: core, rpc: rpc)],
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? options.port
                rules.rules = AccessRules(
                    token: token, allowedHosts: AccessRules.hosts(listeningOn: host, port: port, names: names),
                    rpcOrigins: rpcOrigins)
                let address = "\(host.contains(":") ? "[\(host)]" : host):\(port)"
                do throws(ServiceFiles.Failure) {
                    try files.writeAddress(address)
                } catch {
                    logger.error("cannot write the address file", metadata: ["error": "\(error.message)"])
                }
                ready(address, tokenNote)
            },
            eventLoopGroupProvider: .shared(options.eventLoopGroup),
            logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        running.withLockedValue { $0 = group }
        try await group.run()
        await downloadLog.value
        await hookRuns.value
        deliveries.cancel()
        await deliveries.value
        try? FileManager.default.removeItem(atPath: files.addressPath)
    }
}

/// Stops the downloads when the service shuts down gracefully, after the HTTP server has
/// stopped accepting requests (it runs last in the application's services).
@available(macOS 14, iOS 17, tvOS 17, *)
struct Stopper: Service {
    let core: ServiceCore
    let rpc: Aria2RPC

    func run() async throws {
        try? await gracefulShutdown()
        await core.cancelBackground()
        await core.cluster?.monitor.finish()
        await core.hub.finish()
        rpc.notifier.finish()
        // Running downloads stop with their partial files checkpointed, recorded as paused
        // by the stop: the next start resumes them.
        await core.manager.shutdown()
    }
}
