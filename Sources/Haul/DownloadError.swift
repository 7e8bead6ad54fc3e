import Foundation

/// An error that ends or interrupts a download.
///
/// `DownloadError` is a struct around a code so that new kinds of failure can be added
/// without breaking callers. Compare ``code`` against the static values of
/// ``DownloadError/Code`` and show ``message`` to a person: it says what went wrong and,
/// where there is one, what to do about it.
///
/// ```swift
/// do {
///     let result = try await handle.result
/// } catch let error as DownloadError where error.code == .httpStatus {
///     print("server said \(error.statusCode ?? 0)")
/// }
/// ```
public struct DownloadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Base: String, Hashable, Sendable {
            case httpStatus
            case network
            case timeout
            case tooManyRedirects
            case redirectLoop
            case sizeMismatch
            case checksumMismatch
            case tooLarge
            case invalidRequest
            case fileSystem
            case diskFull
            case duplicate
            case cancelled
            case protocolViolation
            case invalidManifest
            case unsafePath
            case runningElsewhere
            case insecureRedirect
            case unusableRedirect
            case credentialsRequired
            case tls
            case invalidConfiguration
            case proxy
            case urlExpired
            case objectStorage
            case notCached
            case drmProtected
        }

        let base: Base

        /// The server answered with a status of 400 or above (see ``DownloadError/statusCode``).
        public static let httpStatus = Code(base: .httpStatus)
        /// The connection could not be made, or broke before the body was complete.
        public static let network = Code(base: .network)
        /// No connection within the connect timeout, or no byte within the idle timeout.
        public static let timeout = Code(base: .timeout)
        /// More redirects than the configured maximum.
        public static let tooManyRedirects = Code(base: .tooManyRedirects)
        /// A redirect led back to a URL already visited.
        public static let redirectLoop = Code(base: .redirectLoop)
        /// The downloaded size differs from the expected size.
        public static let sizeMismatch = Code(base: .sizeMismatch)
        /// The downloaded content does not match the expected checksum.
        public static let checksumMismatch = Code(base: .checksumMismatch)
        /// An in-memory download grew past its size limit.
        public static let tooLarge = Code(base: .tooLarge)
        /// The request itself is invalid: bad URL, scheme, destination or checksum.
        public static let invalidRequest = Code(base: .invalidRequest)
        /// Reading or writing a local file failed.
        public static let fileSystem = Code(base: .fileSystem)
        /// The disk holding the destination is full. The partial file is kept.
        public static let diskFull = Code(base: .diskFull)
        /// A download with the same ID or destination is already active and the manager is
        /// configured to refuse duplicates.
        public static let duplicate = Code(base: .duplicate)
        /// The download was cancelled (see ``DownloadError/cancellationReason``).
        public static let cancelled = Code(base: .cancelled)
        /// The server's answer broke the HTTP rules Haul relies on, such as a
        /// `Content-Range` that does not match the requested range.
        public static let protocolViolation = Code(base: .protocolViolation)
        /// A sync manifest is malformed or breaks a validation rule; the message names the
        /// offending entry (index and path) and, for XML, the line.
        public static let invalidManifest = Code(base: .invalidManifest)
        /// A sync would have to write or delete through a symbolic link, or outside its
        /// directory, or something local is in the way of the manifest's layout; the message
        /// names the path.
        public static let unsafePath = Code(base: .unsafePath)
        /// Another live process sharing the journal runs the download, and the manager is
        /// configured not to follow it (``DownloadManager/Configuration/followsOtherProcesses``);
        /// the message names the process.
        public static let runningElsewhere = Code(base: .runningElsewhere)
        /// An `https` URL redirected to an `http` one, which would send the content (and any
        /// credentials) unencrypted. Allow it with
        /// ``DownloadManager/Configuration/allowsInsecureRedirects``.
        public static let insecureRedirect = Code(base: .insecureRedirect)
        /// A redirect Haul cannot follow: without a `Location`, with one that is not a URL,
        /// or to a scheme other than `http` and `https` (`ftp:`, `file:`, …). Permanent:
        /// not retried.
        public static let unusableRedirect = Code(base: .unusableRedirect)
        /// A journaled download was started with credential headers that the journal does
        /// not store (see ``DownloadRequest/storesCredentials``), and this process was not
        /// given them: the job is left paused. Add the request again with its credentials.
        public static let credentialsRequired = Code(base: .credentialsRequired)
        /// A secure (`https`) connection could not be set up: the server's certificate is
        /// not trusted (signed by an authority the manager does not trust, expired, or for
        /// another host), the TLS handshake failed, or a file of
        /// ``DownloadManager/TLSOptions`` (an authority, a client certificate or its key)
        /// could not be loaded. The message says which. Not retried. Trust a private authority with
        /// ``DownloadManager/TLSOptions/additionalTrustRoots`` (`haul get --ca-certificate`).
        public static let tls = Code(base: .tls)
        /// A setting of the manager is unusable: a malformed proxy URL
        /// (``DownloadManager/ProxyServer/init(url:)``), a netrc file that cannot be read
        /// or parsed (``Netrc``), or an address family the host has no address of. The
        /// message names the setting. Not retried.
        public static let invalidConfiguration = Code(base: .invalidConfiguration)
        /// The proxy refused the request: it asked for credentials (`407`), or would not
        /// open a tunnel (`CONNECT`) to the server. Not retried; the message names the
        /// proxy, never its password. A proxy that cannot be reached is a
        /// ``network`` error, retried like any other.
        public static let proxy = Code(base: .proxy)
        /// The URL stopped serving the content: a signed URL whose expiry passed (its query
        /// says so: `X-Amz-Date` with `X-Amz-Expires`, `Expires`, `se`, …), answered
        /// `401`, `403` or `410`, and no fresh URL could be had. The partial file is kept:
        /// give a fresh URL (``DownloadManager/Configuration/refreshURL``,
        /// `haul get --refresh-command`, or the download added again with the new URL) and
        /// it resumes. Not retried as it is.
        public static let urlExpired = Code(base: .urlExpired)
        /// The object store refused a request of an upload (``DownloadDestination/object(bucket:key:staging:)``):
        /// the message gives its own code (`AccessDenied`, `NoSuchBucket`, `BadDigest`, …)
        /// and ``DownloadError/statusCode`` its HTTP status. Retried when the store was busy
        /// or failed inside (5xx, `SlowDown`); the downloaded content is kept for the retry.
        public static let objectStorage = Code(base: .objectStorage)
        /// The request's ``DownloadRequest/cachePolicy`` is
        /// ``DownloadRequest/CachePolicy-swift.enum/returnCacheDataDontLoad`` and the cache
        /// holds no response for it (or no cache is configured): nothing was requested.
        public static let notCached = Code(base: .notCached)
        /// A stream's playlist (HLS) encrypts its segments for a DRM system: `SAMPLE-AES`, or a
        /// key format other than `identity` (FairPlay, Widevine, PlayReady). Haul does not
        /// decrypt such content; it is refused before any segment is fetched. Not retried.
        public static let drmProtected = Code(base: .drmProtected)

        public var description: String { base.rawValue }

        /// The code whose ``description`` is `name`, as the journal stores it.
        init?(named name: String?) {
            guard let name, let base = Base(rawValue: name) else { return nil }
            self.base = base
        }

        init(base: Base) { self.base = base }
    }

    /// Why a download was cancelled.
    public struct CancellationReason: Hashable, Sendable, CustomStringConvertible {
        /// A short, stable word describing the reason, such as `"evicted"`.
        public let rawValue: String

        /// Someone called `cancel()`.
        public static let userRequested = CancellationReason(rawValue: "cancelled")
        /// The manager's `replaceOldest` policy made room for a newer download.
        /// The partial file is kept, so adding the download again resumes it.
        public static let evicted = CancellationReason(rawValue: "evicted")
        /// Every caller waiting for the download withdrew its interest.
        public static let noLongerWanted = CancellationReason(rawValue: "no longer wanted")
        /// The manager was shut down.
        public static let shutdown = CancellationReason(rawValue: "shutdown")

        public var description: String { rawValue }
    }

    /// The kind of failure.
    public let code: Code
    /// A message a person can act on.
    public let message: String
    /// The HTTP status, for ``Code/httpStatus``.
    public let statusCode: Int?
    /// The reason, for ``Code/cancelled``.
    public let cancellationReason: CancellationReason?
    /// The delay a server asked for with `Retry-After`, if any.
    package let retryAfter: Duration?
    /// Whether the failure was reaching the host at all (refused, unreachable, DNS,
    /// connect timeout), which may mean the network is gone.
    let isConnectivity: Bool
    /// Whether the server is known not to have processed the request: an HTTP/2 stream it
    /// refused (`REFUSED_STREAM`), or cancelled after it said it would take no more on
    /// that connection (`GOAWAY`). Such a request is safe to send again at once.
    let wasNotProcessed: Bool
    /// The URL the failure is about (after redirects, or a segment's or a mirror's), when
    /// it came from the network; the message does not repeat it.
    let url: URL?

    init(
        _ code: Code,
        _ message: String,
        statusCode: Int? = nil,
        cancellationReason: CancellationReason? = nil,
        retryAfter: Duration? = nil,
        isConnectivity: Bool = false,
        wasNotProcessed: Bool = false,
        url: URL? = nil
    ) {
        self.code = code
        self.url = url
        self.message = message
        self.isConnectivity = isConnectivity
        self.wasNotProcessed = wasNotProcessed
        self.statusCode = statusCode
        self.cancellationReason = cancellationReason
        self.retryAfter = retryAfter
    }

    public var description: String { message }

    /// Whether the retry policy may try again after this error.
    ///
    /// Connection failures, timeouts, 408, 429 and 5xx are retried; other 4xx are not.
    package var isRetryable: Bool {
        switch code.base {
        case .network, .timeout, .protocolViolation:
            return true
        case .httpStatus, .objectStorage:
            guard let status = statusCode else { return false }
            return status == 408 || status == 429 || (500...599).contains(status)
        default:
            return false
        }
    }

    static func cancelled(_ reason: CancellationReason, id: DownloadID) -> DownloadError {
        DownloadError(.cancelled, "\(id): \(reason.rawValue)", cancellationReason: reason)
    }

    static func invalid(_ message: String) -> DownloadError {
        DownloadError(.invalidRequest, message)
    }

    static func fileSystem(_ operation: String, path: String, errno code: Int32) -> DownloadError {
        let reason = String(cString: strerror(code))
        if code == ENOSPC || code == EDQUOT {
            return DownloadError(
                .diskFull,
                "no space left to \(operation) \(path): free some space and resume; the partial file is kept"
            )
        }
        return DownloadError(.fileSystem, "cannot \(operation) \(path): \(reason)")
    }
}

extension DownloadError {
    /// A failure to reach or use a shared queue's database: retried like a network failure.
    package static func sharedQueue(_ message: String) -> DownloadError {
        DownloadError(.network, message)
    }

    /// Another process runs (or ran) the job: a shared queue's lease was taken over.
    package static func runningElsewhere(_ message: String) -> DownloadError {
        DownloadError(.runningElsewhere, message)
    }
}

extension DownloadError {
    /// This error about `url`, unless it already names the URL it is about.
    func about(_ url: URL) -> DownloadError {
        guard self.url == nil else { return self }
        return replacing(message: message, url: url)
    }

    /// This error as the download of `download` reports it: the message names the URL it
    /// is about only when that is another one (a redirect's target, a mirror), as
    /// "(from URL)"; the download itself is named wherever the message is shown. The same
    /// words go to the events, the journal, the service's API and the command line.
    func naming(download: URL) -> DownloadError {
        guard let url, url.absoluteString != download.absoluteString,
            !message.hasSuffix("(from \(url.absoluteString))")
        else { return self }
        return replacing(message: message + " (from \(url.absoluteString))", url: url)
    }

    /// This error with another message and URL, everything else kept.
    private func replacing(message: String, url: URL?) -> DownloadError {
        DownloadError(
            code, message, statusCode: statusCode, cancellationReason: cancellationReason, retryAfter: retryAfter,
            isConnectivity: isConnectivity, wasNotProcessed: wasNotProcessed, url: url)
    }
}
