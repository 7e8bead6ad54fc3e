public import Foundation

extension DownloadManager {
    /// What happens to a new download when every slot is busy.
    public enum OverflowPolicy: Sendable, Hashable {
        /// Wait for a slot, in priority order, then first come first served.
        case queue
        /// Cancel the oldest running download to make room. It ends as cancelled with the
        /// reason ``DownloadError/CancellationReason/evicted`` and keeps its partial file,
        /// so adding it again resumes.
        case replaceOldest
    }

    /// What happens to a request whose ID or destination matches an active download.
    public enum DuplicatePolicy: Sendable, Hashable {
        /// Join the active download: one transfer, and every caller gets its result.
        case join
        /// Fail with ``DownloadError/Code/duplicate``.
        case fail
    }

    /// How a manager schedules and runs downloads.
    public struct Configuration: Sendable {
        /// How many downloads may hold a slot at once. Default 10.
        ///
        /// Left at its default, a host that answers over HTTP/2 may have more in flight (64
        /// streams on its connection), so that a list of small files from it fills a far
        /// link; once set, it caps every host's downloads whatever they speak.
        public var maxConcurrentDownloads: Int {
            get { slotCap ?? 10 }
            set { slotCap = newValue }
        }
        /// The slot count when one was set (see ``maxConcurrentDownloads``).
        package private(set) var slotCap: Int?
        /// How many of those may talk to the same host (`host:port`). Default 6.
        ///
        /// Once set, it also caps the connections of each download
        /// (``segmentedConnections``) and of the HTTP client's pool for one host; left at
        /// its default it does not, so that asking for 8 connections gives 8.
        public var maxConnectionsPerHost: Int {
            get { perHostCap ?? 6 }
            set { perHostCap = newValue }
        }
        /// The per-host cap when one was set (see ``maxConnectionsPerHost``).
        package private(set) var perHostCap: Int?
        /// What happens when every slot is busy. Default ``OverflowPolicy/queue``.
        public var overflowPolicy: OverflowPolicy = .queue
        /// What happens to a duplicate request. Default ``DuplicatePolicy/join``.
        public var duplicatePolicy: DuplicatePolicy = .join
        /// When and how failed attempts are retried.
        public var retry = RetryPolicy()
        /// How long to wait for a connection. Default 30 seconds.
        public var connectTimeout: Duration = .seconds(30)
        /// How long a transfer may go without receiving a byte. Default 60 seconds.
        public var idleTimeout: Duration = .seconds(60)
        /// How many connections a large download may use at once (segmented download,
        /// `haul get -x`). Default 4; 1 turns segmentation off. Capped by
        /// ``maxConnectionsPerHost`` only when that was set: the default per-host cap (6)
        /// lets a download have 8.
        ///
        /// Left at its default, a download whose server answers over HTTP/2 is split as over
        /// HTTP/1.1 when it comes slower than 64 MB/s (the server or the link limits it, and
        /// a server that limits each request gives each stream its own rate); a faster one
        /// stays one stream (more would share what it carries) unless one more, as a probe,
        /// then brings 1.3 times as much, or it has mirrors or piece checksums. Once set, a
        /// download is split over HTTP/2 as over HTTP/1.1.
        public var segmentedConnections: Int {
            get { segmentCap ?? 4 }
            set { segmentCap = newValue }
        }
        /// The connections per download when they were set (see ``segmentedConnections``).
        package private(set) var segmentCap: Int?
        /// The smallest file split across ``segmentedConnections``. Default 16 MiB. Only a
        /// `200` with `Accept-Ranges: bytes`, a known length and a validator (strong ETag or
        /// Last-Modified) qualifies; anything else downloads over one connection.
        public var segmentationThreshold: Int64 = 16 << 20
        /// How many redirects to follow. Default 10.
        public var maxRedirects: Int = 10
        /// Follow a redirect from `https` to `http`. Off by default: such a redirect fails
        /// with ``DownloadError/Code/insecureRedirect``, since the content (and, on the
        /// same host, cookies a server may set) would travel unencrypted. Credential headers
        /// never follow a redirect to another origin either way.
        public var allowsInsecureRedirects = false
        /// Resume a partial file even when the server gave no validator (ETag or
        /// Last-Modified) to prove the content has not changed. Off by default: without
        /// a validator a retry starts from zero.
        public var allowsBlindResume = false
        /// What to do with a download that another live process sharing the journal is
        /// running: follow it from the journal until it ends (`true`, the default), or
        /// fail it at once with ``DownloadError/Code/runningElsewhere`` naming that process.
        public var followsOtherProcesses = true
        /// How `https` servers' certificates are checked, and the client certificate to
        /// present. Default: the system's authorities, full checks, no client certificate.
        public var tls = TLSOptions()
        /// Which proxy each download goes through. Default ``ProxySettings/direct``: none,
        /// whatever the environment says (use ``ProxySettings/fromEnvironment(_:)`` to
        /// honour `https_proxy` and its kin, as the `haul` command does).
        public var proxy = ProxySettings.direct
        /// Credentials to send each origin that has an entry, from a netrc file; `nil` (the
        /// default) for none. See ``Netrc``.
        public var netrc: Netrc?
        /// Which IP version connections use. Default ``AddressFamily/any``.
        public var addressFamily = AddressFamily.any
        /// The `User-Agent` header. Default `Haul/0.1`.
        public var userAgent = "Haul/0.1"
        /// How long to wait before first probing a host that could not be reached. Default 1 second.
        public var networkProbeDelay: Duration = .seconds(1)
        /// The longest wait between two probes of an unreachable host. Default 30 seconds.
        public var maxNetworkProbeDelay: Duration = .seconds(30)
        /// How often a manager with a journal looks for commands from other processes and
        /// for newly queued jobs. Default 250 milliseconds.
        public var journalPollInterval: Duration = .milliseconds(250)
        /// How many queued jobs a manager with a journal keeps in memory at once; the rest
        /// stay on disk. Default 256.
        public var admissionWindow = 256
        /// The most bytes per second all downloads together may receive; `nil` (the
        /// default) for no limit. Active downloads share it evenly; change it while they
        /// run with ``DownloadManager/setRateLimits(overall:perHost:)``.
        public var maxBytesPerSecond: Int?
        /// The most bytes per second the downloads from one host (`host:port`) may
        /// receive together, for each host; `nil` (the default) for no limit. A download
        /// counts against the host of its URL, as it does for
        /// ``maxConnectionsPerHost``, even when a redirect sends it elsewhere.
        public var maxBytesPerSecondPerHost: Int?
        /// The limit of each download that has none of its own
        /// (``DownloadRequest/maxBytesPerSecond``), in bytes per second; `nil` (the
        /// default) for none.
        public var maxBytesPerSecondPerDownload: Int?
        /// The S3-compatible store that downloads with an
        /// ``DownloadDestination/object(bucket:key:staging:)`` destination go into; `nil`
        /// (the default) refuses such downloads.
        public var objectStorage: ObjectStorage?
        /// A cache of responses for downloads into memory and into files, kept as HTTP
        /// says (see ``ResponseCache``); `nil` (the default) for none. Each request says
        /// how it uses it with ``DownloadRequest/cachePolicy``.
        public var cache: ResponseCache.Configuration?

        /// Connections the HTTP client keeps per host: ``maxConnectionsPerHost`` when `nil`.
        /// A service whose per-host cap can be raised while it runs sets this to the
        /// highest cap it accepts.
        package var connectionPoolLimit: Int?

        /// Gives a fresh URL for a download whose URL stopped serving it: a signed URL
        /// (S3, a CDN, a release asset) that answered `401`, `403` or `410`, or whose
        /// query says its signature has expired. `nil` (the default): such a download fails
        /// with ``DownloadError/Code/urlExpired``, its partial kept.
        ///
        /// It is called with the URL that expired (the request's, or the last fresh one)
        /// and the download's ID, and returns the URL to go on with: the download resumes
        /// from its partial file, checked with `If-Range` as any resume is (content that
        /// changed starts again from zero), and segments move to the fresh URL. A URL
        /// reached through redirects is first followed again from the start, without asking.
        /// Credential headers still go only to the request's own origin. Throwing fails
        /// the download.
        ///
        /// ```swift
        /// configuration.refreshURL = { expired, id in
        ///     try await api.presignedURL(for: id.rawValue)
        /// }
        /// ```
        public var refreshURL: (@Sendable (_ expired: URL, _ id: DownloadID) async throws -> URL)?

        /// The defaults: 10 downloads at once, 6 connections per host, queue when full,
        /// join duplicates, and the default retries and timeouts.
        public init() {}
    }
}

/// When and how a failed attempt is retried.
///
/// Connection errors, timeouts, 408, 429 and 5xx are retried with exponential backoff and
/// full jitter, honouring `Retry-After`; other 4xx never are.
public struct RetryPolicy: Sendable, Hashable {
    /// Retries after the first attempt. Default 5.
    public var maxRetries: Int = 5
    /// The delay before the first retry. Default 0.5 seconds.
    public var baseDelay: Duration = .milliseconds(500)
    /// The longest delay between attempts, `Retry-After` included. Default 60 seconds.
    public var maxDelay: Duration = .seconds(60)

    /// Creates a policy.
    public init(maxRetries: Int = 5, baseDelay: Duration = .milliseconds(500), maxDelay: Duration = .seconds(60)) {
        self.maxRetries = maxRetries
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// The delay before retry number `retry` (1-based).
    package func delay(beforeRetry retry: Int, retryAfter: Duration?) -> Duration {
        if let retryAfter { return min(retryAfter, maxDelay) }
        let exponent = min(retry - 1, 30)
        let ceiling = min(baseDelay * (1 << exponent), maxDelay)
        // "Equal jitter": half fixed, half random, so delays never collapse to zero.
        let half = ceiling / 2
        let nanos = max(0, Int64(Double(half.components.attoseconds / 1_000_000_000 + half.components.seconds * 1_000_000_000)))
        return half + .nanoseconds(Int64.random(in: 0...max(0, nanos)))
    }
}
