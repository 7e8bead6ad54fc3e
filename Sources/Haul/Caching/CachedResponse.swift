import Foundation

/// One header of a response (or request) as the cache keeps it: its name as received, and
/// its value.
struct HeaderField: Sendable, Hashable, Codable {
    var name: String
    var value: String

    init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

extension [HeaderField] {
    /// The value of the first field named `name` (compared case-insensitively), if any.
    func first(_ name: String) -> String? {
        first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Every value of the fields named `name`, each split at its commas and trimmed: the
    /// list a header like `Cache-Control` or `Vary` gives, however many lines carry it.
    func list(_ name: String) -> [String] {
        filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }
            .flatMap { $0.value.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
    }
}

/// A response as the cache keeps it, without its body: what RFC 9111 needs to decide
/// whether it may answer a request, and the headers a 304 updates.
struct CachedResponse: Sendable, Hashable, Codable {
    /// The URL it answers, as an absolute string without a fragment: the cache key.
    var url: String
    /// The response's status (200 for a cached body; see ``CacheRules/mayStore(_:status:headers:)``).
    var status: Int
    /// The response's header fields, in the order received, hop-by-hop fields removed.
    var headers: [HeaderField]
    /// The request header fields named by the response's `Vary`, with the values the
    /// request that stored it had (names lowercased; a field the request did not send is
    /// absent).
    var varying: [HeaderField]
    /// When the request that got it was sent, and when its head arrived (seconds since
    /// 1970, the wall clock: what `Date`, `Expires` and `Last-Modified` are compared with).
    var requestTime: Double
    var responseTime: Double
    /// The body's size in bytes.
    var bodySize: Int
}

/// A cached response with its body.
struct CachedEntry: Sendable {
    var response: CachedResponse
    var body: Data
}
