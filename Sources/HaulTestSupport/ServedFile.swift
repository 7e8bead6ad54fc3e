public import Foundation

/// A file that a ``FaultServer`` serves under `/files/<name>`, together with the
/// validators (`ETag`, `Last-Modified`) the server advertises for it.
///
/// ```swift
/// server.setFile("a", ServedFile(bytes: payload, etag: .none, lastModified: .automatic))
/// ```
public struct ServedFile: Sendable {
    /// How the server chooses the `ETag` of a file.
    public enum ETag: Sendable, Hashable {
        /// A strong ETag of the form `"v<version>-<serial>"` that changes every time
        /// the file is (re)registered with `FaultServer.setFile`.
        case automatic
        /// The file has no ETag; none is sent.
        case none
        /// A fixed entity tag. If `value` is not already quoted (`"…"` or `W/"…"`) it is
        /// wrapped in double quotes, so `.custom("abc")` is sent as `"abc"`.
        case custom(String)
    }

    /// How the server chooses the `Last-Modified` date of a file.
    public enum LastModified: Sendable, Hashable {
        /// A fixed base date (2024-01-01 00:00:00 GMT) plus one second for every time
        /// the file has been registered under its name, so it changes on each registration.
        case automatic
        /// The file has no `Last-Modified` date; none is sent.
        case none
        /// A fixed date (sent with one-second precision as an RFC 7231 IMF-fixdate).
        case custom(Date)
    }

    /// The content of the file.
    public var bytes: [UInt8]
    /// The ETag policy of the file.
    public var etag: ETag
    /// The Last-Modified policy of the file.
    public var lastModified: LastModified

    /// Creates a file description.
    ///
    /// - Parameters:
    ///   - bytes: The content of the file.
    ///   - etag: The ETag policy; defaults to ``ETag-swift.enum/automatic``.
    ///   - lastModified: The Last-Modified policy; defaults to ``LastModified-swift.enum/automatic``.
    public init(bytes: [UInt8], etag: ETag = .automatic, lastModified: LastModified = .automatic) {
        self.bytes = bytes
        self.etag = etag
        self.lastModified = lastModified
    }

    /// Creates a file description from `Data`.
    public init(data: Data, etag: ETag = .automatic, lastModified: LastModified = .automatic) {
        self.init(bytes: [UInt8](data), etag: etag, lastModified: lastModified)
    }
}
