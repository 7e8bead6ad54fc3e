import ArgumentParser
import Foundation
import Haul

/// `--journal PATH`, shared by every command that reads or writes the journal.
struct JournalOptions: ParsableArguments {
    @Option(
        name: .customLong("journal"),
        help: ArgumentHelp(
            "The journal of downloads, created if missing, readable by you only. (default: $XDG_STATE_HOME/haul/journal.sqlite or ~/.local/state/haul/journal.sqlite; on macOS ~/Library/Application Support/haul/journal.sqlite)",
            valueName: "path"))
    var path: String?

    /// The journal's path: `--journal`, else ``Journal/defaultPath``.
    var resolvedPath: String { path ?? Journal.defaultPath }

    func validate() throws {
        if let path, path.isEmpty { throw ValidationError("--journal needs a file path.") }
    }

    /// Opens the journal; on failure says why on standard error and exits with status 1.
    func open() throws -> Journal {
        do {
            return try Journal(path: resolvedPath)
        } catch {
            Console.err("haul: cannot use the journal \(resolvedPath): \(error.message)\n")
            throw ExitCode.failure
        }
    }
}

/// The options of the commands that run downloads: `haul get`, `haul resume` and `haul sync`.
struct DownloadOptions: ParsableArguments {
    @Option(
        name: [.customShort("j"), .customLong("jobs")],
        help: ArgumentHelp(
            "How many downloads run at once. (default: 10, and up to 64 from a host that answers over HTTP/2; when given, it holds for every host)",
            valueName: "n"))
    var jobs: Int?

    @Option(
        name: .customLong("per-host"),
        help: ArgumentHelp(
            "How many downloads may use the same host at once; when given, also the most connections one download opens to it (-x). (default: 6, or 64 streams to a host that answers over HTTP/2; the default does not cap -x; a host that answers 429 or 503 gets fewer until it serves without complaint)",
            valueName: "n"))
    var perHost: Int?

    @Option(
        name: [.customShort("x"), .customLong("connections")],
        help: ArgumentHelp(
            "Split files of 16 MiB or more across up to N connections, when the server supports ranges. (default: 4; 1 turns it off; a --per-host lower than N clamps it)",
            valueName: "n"))
    var connections: Int?

    @Option(help: ArgumentHelp("How many times to retry a failed attempt. (default: 5)", valueName: "n"))
    var retries: Int?

    @OptionGroup var rates: RateOptions

    @Option(
        help: ArgumentHelp(
            "Seconds to wait for a connection, and for data once connected. (default: 30 and 60)",
            valueName: "seconds"))
    var timeout: Double?

    @Flag(
        name: .customLong("allow-insecure-redirects"),
        help: "Follow redirects from https to http. (default: refused; credential headers never follow a redirect to another origin)")
    var allowInsecureRedirects = false

    @OptionGroup(title: "Network options") var network: NetworkOptions

    @Flag(
        name: .customLong("http2"),
        help: "Offer HTTP/2 to https servers by ALPN, besides HTTP/1.1, and speak what each picks. (default)")
    var http2 = false

    @Flag(
        name: .customLong("http1.1"),
        help: "Speak HTTP/1.1 only, offering nothing else to https servers.")
    var http1 = false

    @Option(
        name: .customLong("cache"),
        help: ArgumentHelp(
            "A directory to keep an HTTP cache in (created if missing, readable by you only): a response still fresh by its Cache-Control or Expires is saved from the cache with no request, a stale one after a conditional request (a 304 sends no body), and new responses the server allows to be stored are kept, up to --cache-size. (default: no cache)",
            valueName: "dir"))
    var cache: String?

    @Option(
        name: .customLong("cache-size"),
        help: ArgumentHelp(
            "The most the --cache directory may hold; the least recently used entries go first, and no response over a tenth of it is kept. (default: 150MB)",
            valueName: "size"))
    var cacheSize: String?

    /// `--cache` and `--cache-size`, as far as given: options for the process that downloads.
    var cacheOptionsGiven: [String] {
        (cache != nil ? ["--cache"] : []) + (cacheSize != nil ? ["--cache-size"] : [])
    }

    @Flag(name: [.customShort("q"), .long], help: "Print nothing on standard output; errors still go to standard error.")
    var quiet = false

    @Flag(help: "Print events as JSON, one object per line.")
    var json = false

    @Flag(
        name: .customLong("no-wait"),
        help: """
            Leave downloads that another running haul is working on to it, and exit with 1 \
            naming that process, instead of following them to their end.
            """)
    var noWait = false

    /// The checked options, once `validate()` has run.
    @Derived var settings: RunSettings?

    /// How to show progress.
    var mode: ProgressRenderer.Mode {
        if json { .json } else if quiet { .quiet } else if Console.outputIsTerminal { .live } else { .lines }
    }

    mutating func validate() throws {
        var warnings: [String] = []
        let configuration = try managerConfiguration { warnings.append($0) }
        settings = RunSettings(configuration: configuration, mode: mode, warnings: warnings)
    }

    /// The manager's configuration; throws `ValidationError` for bad values, and hands
    /// warnings about them to `warn`.
    private func managerConfiguration(warn: (String) -> Void) throws -> DownloadManager.Configuration {
        if quiet && json { throw ValidationError("--quiet and --json cannot be used together.") }
        var configuration = DownloadManager.Configuration()
        configuration.followsOtherProcesses = !noWait
        configuration.allowsInsecureRedirects = allowInsecureRedirects
        try network.apply(to: &configuration, warn: warn)
        if http2 && http1 { throw ValidationError("--http2 and --http1.1 cannot be used together.") }
        if http2 { configuration.tls.allowsHTTP2 = true }
        if http1 { configuration.tls.allowsHTTP2 = false }
        if let jobs {
            guard jobs >= 1 else { throw ValidationError("-j must be at least 1.") }
            configuration.maxConcurrentDownloads = jobs
        }
        if let perHost {
            guard perHost >= 1 else { throw ValidationError("--per-host must be at least 1.") }
            configuration.maxConnectionsPerHost = perHost
        }
        if let connections {
            guard (1...64).contains(connections) else { throw ValidationError("-x must be between 1 and 64.") }
            configuration.segmentedConnections = connections
            if let perHost, perHost < connections {
                warn("haul: warning: -x \(connections) is more than --per-host \(perHost): each download opens at most \(perHost) connections to its host.\n")
            }
        }
        configuration.maxBytesPerSecondPerDownload = rates.limitRate?.bytesPerSecond
        configuration.maxBytesPerSecond = rates.maxOverallRate?.bytesPerSecond
        configuration.maxBytesPerSecondPerHost = rates.maxHostRate?.bytesPerSecond
        if let retries {
            guard retries >= 0 else { throw ValidationError("--retries must not be negative.") }
            configuration.retry.maxRetries = retries
        }
        if let cacheSize, cache == nil { throw ValidationError("--cache-size \(cacheSize) needs --cache DIR.") }
        if let cache {
            guard !cache.isEmpty else { throw ValidationError("--cache needs a directory.") }
            var settings = ResponseCache.Configuration(
                directory: URL(fileURLWithPath: cache, isDirectory: true), memoryCostLimit: 32 << 20)
            if let cacheSize {
                guard let bytes = RateArgument.parse(cacheSize), bytes >= 1 << 20 else {
                    throw ValidationError(
                        "--cache-size '\(cacheSize)' is not a size of at least 1 MiB: give bytes, such as 500M, 2G or 800MB (K, M, G count in 1024s; KB, MB, GB in 1000s).")
                }
                settings.diskSizeLimit = Int64(bytes)
            }
            configuration.cache = settings
        }
        if let timeout {
            guard timeout.isFinite, timeout > 0, timeout <= 86_400 else {
                throw ValidationError("--timeout must be a number of seconds above 0 (at most 86400).")
            }
            configuration.connectTimeout = .seconds(timeout)
            configuration.idleTimeout = .seconds(timeout)
        }
        return configuration
    }
}
