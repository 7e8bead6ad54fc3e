public import Foundation

/// What to download, where to, and how.
///
/// ```swift
/// let request = DownloadRequest(
///     url: URL(string: "https://example.com/big.iso")!,
///     destination: .directory(downloads),
///     checksum: try Checksum(.sha256, hex: "9f86d0…")
/// )
/// ```
///
/// ## Credentials
///
/// `Authorization`, `Proxy-Authorization` and `Cookie` headers, and any header named in
/// ``sensitiveHeaderNames``, are credentials: they go only to the origin (scheme, host and
/// port) of ``url``. A redirect to another origin drops them (they are sent again if a
/// later redirect returns to the origin), and segment requests to another origin go
/// without them. User info in the URL (`https://user:password@host/…`) is removed from
/// ``url`` and becomes an `Authorization: Basic …` header for that origin, so the password
/// never shows in the ID, events, logs or the journal. A journal does not store credential
/// headers unless ``storesCredentials`` is set: a later process (`haul resume`) then needs
/// the request again, with its credentials.
///
/// ```swift
/// var request = DownloadRequest(
///     url: URL(string: "https://api.example.com/releases/assets/42")!,
///     destination: .directory(downloads),
///     headers: [("Authorization", "Bearer \(token)"), ("X-Api-Key", key)])
/// request.sensitiveHeaderNames = ["X-Api-Key"]
/// ```
public struct DownloadRequest: Sendable {
    /// The headers that are always credentials, whatever ``sensitiveHeaderNames`` says.
    public static let credentialHeaderNames: Set<String> = ["Authorization", "Proxy-Authorization", "Cookie"]

    /// The caller's ID for the download. Defaults to the URL's absolute string (without
    /// user info). A download is its URL and its destination: when that URL already names a
    /// download to another destination (active in the manager, or a row of its journal),
    /// the default becomes `URL -> PATH`, so that each destination is a download of its
    /// own; the handle's ``DownloadHandle/id`` says which. An ID given here is kept as is.
    public var id: DownloadID
    /// The resource to fetch. Only `http` and `https` are supported.
    ///
    /// User info (`user:password@`) never stays in it: it is removed, and becomes an
    /// `Authorization: Basic …` header unless one is given.
    public var url: URL {
        didSet { absorbUserInfo() }
    }
    /// Other addresses of the same content (mirrors), in order of preference after
    /// ``url``. A segmented download spreads its connections across them; a source that
    /// fails, or answers with other content (another size, a validator that changes), is
    /// dropped for the rest of the run with a ``DownloadEvent/sourceDropped(_:reason:)``
    /// event, and the download fails only when none is left.
    ///
    /// Only `http` and `https`; user info is not allowed in a mirror (give credentials in
    /// ``headers``: they go only to ``url``'s origin).
    public var mirrors: [URL] = []
    /// Where the bytes go.
    public var destination: DownloadDestination
    /// How urgently the download is wanted; it can change later with
    /// ``DownloadHandle/setPriority(_:)``.
    public var priority: DownloadPriority
    /// The size the content must have, checked before the file is moved into place.
    public var expectedSize: Int64?
    /// The digest the content must have, checked before the file is moved into place.
    public var checksum: Checksum?
    /// The digests of the content's pieces (from a Metalink file): each piece is checked
    /// as soon as it is complete, and a bad one is fetched again (see ``PieceChecksums``).
    public var pieces: PieceChecksums?
    /// Extra request headers, sent with every attempt. Credential headers (see
    /// ``sensitiveHeaderNames``) go only to the origin of ``url``; the others follow
    /// redirects everywhere.
    public var headers: [(name: String, value: String)]
    /// Downloads again even when the destination still holds this download's completed
    /// file, unchanged since it was saved.
    ///
    /// By default (with a journal) such a file is revalidated with a conditional request
    /// (`If-None-Match`, else `If-Modified-Since`): a `304 Not Modified` completes the
    /// download with no body transferred, and changed content replaces the file
    /// atomically, as usual.
    public var forceDownload = false
    /// What happens to the partial file when every task awaiting the result is cancelled;
    /// ``AbandonAction/keepPartial`` unless set, so asking again resumes. Memory
    /// destinations have no partial file.
    public var whenAbandoned: AbandonAction
    /// Names of further headers in ``headers`` that are credentials, like `X-Api-Key`
    /// (compared case-insensitively). They go only to the origin of ``url`` and are not
    /// stored in the journal unless ``storesCredentials`` is set. `Authorization`,
    /// `Proxy-Authorization` and `Cookie` are always credentials
    /// (``credentialHeaderNames``). Empty by default.
    public var sensitiveHeaderNames: Set<String> = []
    /// Whether a journal stores this request's credential headers, so that another
    /// process (`haul resume`) can continue the download without being given them again.
    /// Off by default: they are kept in this manager's memory only, and a job restored
    /// from the journal without them is left paused with
    /// ``DownloadError/Code/credentialsRequired``. The journal file is readable by its
    /// owner only (mode 0600).
    public var storesCredentials = false
    /// The most bytes per second this download may receive, all its connections together;
    /// `nil` (the default) for no limit of its own. The manager's limits apply as well.
    /// Change it while it runs with ``DownloadHandle/setRateLimit(_:)``.
    public var maxBytesPerSecond: Int?
    /// How many connections this download may use when it is large enough to be split
    /// (1-64); `nil` (the default) for the manager's
    /// ``DownloadManager/Configuration/segmentedConnections``. A per-host cap that was set
    /// lower (``DownloadManager/Configuration/maxConnectionsPerHost``) clamps it; the
    /// default cap does not.
    public var connections: Int?
    /// A zsync control file to build the content from the blocks files on disk already
    /// hold, fetching only the rest (see ``DeltaSource``); `nil` (the default) for an
    /// ordinary download. Only for file destinations.
    ///
    /// It is used before the download's first request, while nothing of it is on disk; a
    /// journal does not keep it, so a download restored from one after its scan stopped
    /// midway fetches every byte.
    public var delta: DeltaSource?
    /// Makes this the download of an HLS stream: ``url`` is its playlist, and the
    /// destination receives the stream as one playable file (see ``HLSStream``); `nil`
    /// (the default) for an ordinary download. Only for file destinations and objects:
    /// `.file`, `.directory` (named after the playlist when no name is given: `show.m3u8`
    /// is saved as `show.ts`) and `.object`.
    public var stream: HLSStream?
    /// How the request uses the manager's cache (``DownloadManager/Configuration/cache``);
    /// ``CachePolicy-swift.enum/useProtocolCachePolicy`` by default. Only memory, file and
    /// directory destinations use a cache, and not a delta download
    /// (``delta``).
    public var cachePolicy: CachePolicy = .useProtocolCachePolicy
    /// What the manager's cache gives this run of the request (set by the manager).
    var cacheUse: CacheUse?
    /// Whether a manager with a journal records this download in it (as it does every
    /// download into a file). `false` for an HLS stream's segments: they are staged parts of
    /// the stream's file, which is what a caller asks for and resumes (from its staging
    /// directory), and rows naming them would outlive them.
    package var isJournaled = true

    /// Creates a request.
    public init(
        url: URL,
        destination: DownloadDestination,
        id: DownloadID? = nil,
        priority: DownloadPriority = .normal,
        expectedSize: Int64? = nil,
        checksum: Checksum? = nil,
        headers: [(name: String, value: String)] = [],
        whenAbandoned: AbandonAction = .keepPartial
    ) {
        self.url = url
        self.destination = destination
        self.priority = priority
        self.expectedSize = expectedSize
        self.checksum = checksum
        self.headers = headers
        self.whenAbandoned = whenAbandoned
        self.id = id ?? DownloadID(url.absoluteString)
        absorbUserInfo()
        // An ID spelled as the URL with its password is the URL without it.
        if id == nil || id?.rawValue == url.absoluteString { self.id = DownloadID(self.url.absoluteString) }
    }

    /// Creates a request for content served at several addresses: the first of `urls` is
    /// ``url`` (and names the download), the others its ``mirrors``.
    ///
    /// - Precondition: `urls` is not empty.
    public init(
        urls: [URL],
        destination: DownloadDestination,
        id: DownloadID? = nil,
        priority: DownloadPriority = .normal,
        expectedSize: Int64? = nil,
        checksum: Checksum? = nil,
        headers: [(name: String, value: String)] = [],
        whenAbandoned: AbandonAction = .keepPartial
    ) {
        precondition(!urls.isEmpty, "DownloadRequest(urls:) needs at least one URL")
        self.init(
            url: urls[0], destination: destination, id: id, priority: priority, expectedSize: expectedSize,
            checksum: checksum, headers: headers, whenAbandoned: whenAbandoned)
        mirrors = Array(urls.dropFirst())
    }

    /// Every address of the content: ``url``, then its ``mirrors``.
    public var urls: [URL] { [url] + mirrors }

    /// Where ``url``'s content is fetched from now, when not from ``url`` itself: a fresh
    /// signed URL it was refreshed to, or one given for it (`PATCH /downloads/{id}`).
    /// ``url`` stays the download's identity (its ID, its partial file's source).
    package var location: URL?

    /// The addresses attempts go to: ``location`` (or ``url``), then the ``mirrors``.
    var sourceURLs: [URL] { [location ?? url] + mirrors }

    /// Whether `name` is a credential header of this request.
    func isCredential(_ name: String) -> Bool {
        Self.isCredential(name, extra: Set(sensitiveHeaderNames.map { $0.lowercased() }))
    }

    /// Whether `name` is a credential given the lowercased `extra` names.
    static func isCredential(_ name: String, extra: Set<String>) -> Bool {
        switch name.lowercased() {
        case "authorization", "proxy-authorization", "cookie": true
        case let lowercased: extra.contains(lowercased)
        }
    }

    /// Moves user info out of ``url`` into an `Authorization: Basic` header (unless one is
    /// given).
    private mutating func absorbUserInfo() {
        guard url.user != nil || url.password != nil else { return }
        let stripped = url.removingUserInfo
        guard stripped != url else { return }
        let authorization = Self.basicAuthorization(from: url)
        url = stripped
        guard let authorization, !headers.contains(where: { $0.name.lowercased() == "authorization" }) else { return }
        headers.append(authorization)
    }

    /// `Authorization: Basic …` from `url`'s user info (percent-decoded); `nil` without any.
    static func basicAuthorization(from url: URL) -> (name: String, value: String)? {
        guard url.user != nil || url.password != nil,
            let components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        else { return nil }
        let credentials = "\(components.user ?? ""):\(components.password ?? "")"
        return ("Authorization", "Basic " + Data(credentials.utf8).base64EncodedString())
    }
}
