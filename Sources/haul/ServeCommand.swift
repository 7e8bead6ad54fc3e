import ArgumentParser
import Foundation
import Haul
import HaulServer

/// `haul serve`: the download manager as a service, with an HTTP API and a dashboard.
struct Serve: AsyncParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "serve",
            abstract: "Run a download manager service with an HTTP API and a web dashboard.",
            discussion: """
                One service runs per journal. It resumes the journal's unfinished downloads (those \
                a person paused stay paused), serves the API under /api/v1 and the dashboard at /, \
                and stops on SIGTERM or SIGINT, pausing every download so the next start resumes it.

                Clients authenticate with a token: $HAUL_TOKEN when set, else the file \
                JOURNAL-serve.token (created on first start, mode 0600). It is never taken from the \
                command line. Listening on an address other than loopback needs a token you set.

                aria2's JSON-RPC interface is at /jsonrpc (POST and WebSocket), for aria2 front-ends \
                such as AriaNg and browser extensions: their secret is the same token. Pages of other \
                sites may call it only from an origin listed with --rpc-allow-origin.

                While a service runs, 'haul get', 'list', 'pause', 'cancel', 'retry' and 'resume' \
                with the same journal go through it.
                """))

    @Option(help: ArgumentHelp("The address and port to listen on; port 0 picks a free one.", valueName: "host:port"))
    var listen = "127.0.0.1:6800"

    @OptionGroup var journalOptions: JournalOptions

    @Option(
        name: [.customShort("j"), .customLong("jobs")],
        help: ArgumentHelp("How many downloads run at once.", valueName: "n"))
    var jobs = 10

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp(
            "How many downloads may use the same host at once; when given, also the most connections one download opens to it (-x). (default: 6, which does not cap -x)",
            valueName: "n"))
    var perHost: Int?

    @Option(
        name: [.customShort("x"), .customLong("connections")],
        help: ArgumentHelp(
            "Split files of 16 MiB or more across up to N connections, when the server supports ranges; aria2's split changes it while the service runs. (default: 4; 1 turns it off; a --per-host lower than N clamps it)",
            valueName: "n"))
    var connections: Int?

    /// The service's speed limits (PATCH /api/v1/settings changes them while it runs).
    @OptionGroup var rates: RateOptions

    @Option(
        name: [.customShort("d"), .customLong("directory")],
        help: ArgumentHelp("Where downloads go when a request names no directory. (default: the current directory)", valueName: "dir"))
    var directoryOption: String?
    /// `-d`, or the current directory.
    var directory: String { directoryOption ?? "." }

    @Option(
        name: .customLong("root"),
        help: ArgumentHelp(
            "A directory requests may save into (and below), or an S3 prefix (s3://bucket/prefix/) objects may go under, with the AWS_* variables or ~/.aws saying which store. Repeatable. (default: the -d directory only)",
            valueName: "dir"))
    var roots: [String] = []

    @Option(
        name: .customLong("host-name"),
        help: ArgumentHelp("Another name clients reach the service by, accepted in the Host header. Repeatable.", valueName: "name"))
    var hostNames: [String] = []

    @Option(
        name: .customLong("rpc-allow-origin"),
        help: ArgumentHelp(
            "An origin whose pages may call the aria2 JSON-RPC interface (/jsonrpc) with CORS, such as "
                + "https://ariang.example or chrome-extension://ID. Repeatable. (default: none)",
            valueName: "origin"))
    var rpcOrigins: [String] = []

    @OptionGroup var queueOptions: QueueOptions

    @OptionGroup(title: "Network options") var network: NetworkOptions

    @OptionGroup(title: "Log options") var log: LogOptions

    @OptionGroup(title: "Hooks") var hookOptions: HookOptions

    @Option(
        name: .customLong("webhook"),
        help: ArgumentHelp(
            "A URL that gets a signed JSON POST for each download that ends (see --webhook-events), retried with backoff until it answers 2xx, even across restarts. Repeatable. Needs --webhook-secret-file.",
            valueName: "url"))
    var webhooks: [String] = []

    @Option(
        name: .customLong("webhook-secret-file"),
        help: ArgumentHelp(
            "A file (readable by you only) whose content signs each webhook body: X-Haul-Signature-256: sha256=HMAC-SHA256(secret, body).",
            valueName: "file"))
    var webhookSecretFile: String?

    @Option(
        name: .customLong("webhook-events"),
        help: ArgumentHelp(
            "Which ends send a webhook, comma-separated: completed, failed, paused (a person's pause).",
            valueName: "events"))
    var webhookEvents = "completed,failed"

    /// The service's options, once `validate()` has checked them.
    @Derived var options: HaulService.Options?

    mutating func validate() throws {
        guard #available(macOS 14, iOS 17, tvOS 17, *) else {
            throw ValidationError("haul serve needs macOS 14 or later.")
        }
        guard let (host, port) = Self.parse(listen) else {
            throw ValidationError("--listen takes host:port, such as 127.0.0.1:6800 or [::1]:6800.")
        }
        guard (1...SettingsAPI.maximumSlots).contains(jobs) else { throw ValidationError("-j must be between 1 and \(SettingsAPI.maximumSlots).") }
        if let perHost, !(1...SettingsAPI.maximumPerHost).contains(perHost) {
            throw ValidationError("--per-host must be between 1 and \(SettingsAPI.maximumPerHost).")
        }
        if let connections, !(1...SettingsAPI.maximumPerHost).contains(connections) {
            throw ValidationError("-x must be between 1 and \(SettingsAPI.maximumPerHost).")
        }
        for origin in rpcOrigins where AccessRules.normalizedOrigin(origin) == nil {
            throw ValidationError("--rpc-allow-origin takes an origin such as https://ariang.example, without a path: '\(origin)'.")
        }
        let directory = URL(fileURLWithPath: self.directory).standardizedFileURL.path
        var options = HaulService.Options(journalPath: journalOptions.resolvedPath, directory: directory)
        options.host = host
        options.port = port
        options.slots = jobs
        options.perHost = perHost
        options.connections = connections
        if let perHost, let connections, perHost < connections {
            Console.err(
                "haul: warning: -x \(connections) is more than --per-host \(perHost): each download opens at most \(perHost) connections to its host.\n")
        }
        let objectRoots = roots.filter(DownloadBatch.isObjectAddress)
        options.roots = roots.filter { !DownloadBatch.isObjectAddress($0) }.map {
            URL(fileURLWithPath: $0).standardizedFileURL.path
        }
        options.objectRoots = objectRoots
        options.hostNames = hostNames
        options.rpcOrigins = rpcOrigins
        options.maxBytesPerSecond = rates.maxOverallRate?.bytesPerSecond
        options.maxBytesPerSecondPerHost = rates.maxHostRate?.bytesPerSecond
        options.maxBytesPerSecondPerDownload = rates.limitRate?.bytesPerSecond
        try network.apply(to: &options.network)
        if !objectRoots.isEmpty {
            do throws(DownloadError) {
                options.network.objectStorage = try .fromEnvironment()
            } catch {
                throw ValidationError("--root \(objectRoots[0]): \(error.message).")
            }
        }
        options.hooks = hookOptions.$hooks
        try applyWebhooks(to: &options)
        self.options = options
    }

    func run() async throws {
        guard #available(macOS 14, iOS 17, tvOS 17, *) else { return }
        var options = $options
        // The shared queue's address, with its password (PGPASSWORD, ~/.pgpass, $HAUL_QUEUE_URL).
        options.queue = try queueOptions.address(fromEnvironment: true)
        options.eventLoopGroup = ProcessResources.eventLoopGroup
        options.threadPool = ProcessResources.threadPool
        try? FileManager.default.createDirectory(atPath: options.directory, withIntermediateDirectories: true)
        let queueNote = options.queue.map { "; the shared queue at \($0)" } ?? ""
        do {
            try await HaulService.run(options, logger: log.logger(label: "haul.serve", name: "haul serve")) {
                address, tokenNote in
                Console.out("haul serve: listening on http://\(address) (\(tokenNote)\(queueNote))\n")
            }
        } catch let error as HaulService.StartError {
            Console.err("haul serve: \(error.description)\n")
            throw ExitCode.failure
        }
    }

    /// Checks `--webhook`, `--webhook-secret-file` and `--webhook-events` into `options`.
    private func applyWebhooks(to options: inout HaulService.Options) throws {
        guard !webhooks.isEmpty else {
            if webhookSecretFile != nil { throw ValidationError("--webhook-secret-file needs --webhook.") }
            return
        }
        for webhook in webhooks {
            guard let url = URL(string: webhook), ["http", "https"].contains(url.scheme?.lowercased() ?? ""),
                url.host?.isEmpty == false
            else { throw ValidationError("--webhook takes an http or https URL: '\(webhook)'.") }
        }
        guard let webhookSecretFile else {
            throw ValidationError("--webhook needs --webhook-secret-file FILE: the secret each body is signed with.")
        }
        var info = stat()
        guard stat(webhookSecretFile, &info) == 0, let data = FileManager.default.contents(atPath: webhookSecretFile) else {
            throw ValidationError("--webhook-secret-file: cannot read \(webhookSecretFile).")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw ValidationError(
                "--webhook-secret-file: \(webhookSecretFile) can be read by others: make it readable by you only (chmod 600).")
        }
        var secret = Array(data)
        while let last = secret.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { secret.removeLast() }
        guard !secret.isEmpty else { throw ValidationError("--webhook-secret-file: \(webhookSecretFile) is empty.") }
        var kinds: Set<Journal.Outbox.Kind> = []
        for name in webhookEvents.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            guard let kind = Journal.Outbox.Kind(rawValue: name) else {
                throw ValidationError("--webhook-events takes completed, failed and paused: '\(name)'.")
            }
            kinds.insert(kind)
        }
        guard !kinds.isEmpty else { throw ValidationError("--webhook-events names no event.") }
        options.webhooks = webhooks
        options.webhookKinds = kinds
        options.webhookSecret = secret
    }

    /// `host:port`, with IPv6 hosts in brackets.
    static func parse(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }
}
