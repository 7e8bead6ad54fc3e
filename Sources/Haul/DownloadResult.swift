public import Foundation

/// What a completed download produced.
public struct DownloadResult: Sendable {
    /// The download's ID.
    public let id: DownloadID
    /// The verified file, for file and directory destinations; for an object destination,
    /// the object as `s3://bucket/key`.
    public let fileURL: URL?
    /// The body, for memory destinations.
    public let data: Data?
    /// The URL the content came from, after redirects.
    public let finalURL: URL
    /// The size of the content.
    public let byteCount: Int64
    /// How many bytes crossed the network in this run; less than ``byteCount`` when an
    /// earlier partial was resumed.
    public let bytesTransferred: Int64
    /// Whether the content was already there: a download that had completed before, whose
    /// server said it had not changed since (`304 Not Modified`), so nothing was fetched and
    /// the file or object was left as it was.
    public internal(set) var isUnchanged = false
    /// Where the answer came from: the network, or the manager's cache
    /// (``DownloadManager/Configuration/cache``) as it was, or after the server said it is
    /// still current.
    public internal(set) var source: Source = .network

    /// Where a download's answer came from.
    public enum Source: String, Sendable, Hashable, CaseIterable {
        /// The server sent the body.
        case network
        /// The cache's memory tier answered, with no request.
        case memory
        /// The cache's disk tier answered, with no request.
        case disk
        /// The cache answered after a conditional request whose `304 Not Modified` said
        /// the stored response is still current: no body crossed the network.
        case revalidated
    }

    /// Where the content went, as text: the file's path, or an object's `s3://bucket/key`;
    /// `nil` for memory.
    package var savedAt: String? {
        fileURL.map { $0.isFileURL ? $0.path : "\($0.scheme ?? "s3")://\($0.host ?? "")\($0.path)" }
    }
}
