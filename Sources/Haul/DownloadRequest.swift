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
public struct DownloadRequest: Sendable {
    /// The caller's ID for the download. Defaults to the URL's absolute string.
    public var id: DownloadID
    /// The resource to fetch. Only `http` and `https` are supported.
    public var url: URL
    /// Where the bytes go.
    public var destination: DownloadDestination
    /// How urgently the download is wanted; it can change later with
    /// ``DownloadHandle/setPriority(_:)``.
    public var priority: DownloadPriority
    /// The size the content must have, checked before the file is moved into place.
    public var expectedSize: Int64?
    /// The digest the content must have, checked before the file is moved into place.
    public var checksum: Checksum?
    /// Extra request headers, sent with every attempt and redirect.
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
        self.id = id ?? DownloadID(url.absoluteString)
        self.priority = priority
        self.expectedSize = expectedSize
        self.checksum = checksum
        self.headers = headers
        self.whenAbandoned = whenAbandoned
    }
}
