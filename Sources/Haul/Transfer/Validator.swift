/// What proves a partial file still belongs to the same content: a strong ETag or,
/// failing that, a Last-Modified date. Sent back in `If-Range`.
enum Validator: Codable, Hashable, Sendable {
    case etag(String)
    case lastModified(String)

    /// The validator of a response: a strong ETag, else Last-Modified, else none.
    /// Weak ETags (`W/"…"`) cannot be used with `If-Range`.
    init?(etag: String?, lastModified: String?) {
        if let etag, !etag.isEmpty, !etag.hasPrefix("W/") {
            self = .etag(etag)
        } else if let lastModified, !lastModified.isEmpty {
            self = .lastModified(lastModified)
        } else {
            return nil
        }
    }

    var headerValue: String {
        switch self {
        case .etag(let value), .lastModified(let value): value
        }
    }
}
