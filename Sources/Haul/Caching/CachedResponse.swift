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
        first { $0.name.equalsIgnoringASCIICase(name) }?.value
    }

    /// Every value of the fields named `name`, each split at its commas and trimmed: the
    /// list a header like `Cache-Control` or `Vary` gives, however many lines carry it.
    func list(_ name: String) -> [String] {
        filter { $0.name.equalsIgnoringASCIICase(name) }
            .flatMap { $0.value.split(separator: ",") }
            .map { $0.trimmingOptionalWhitespace() }
            .filter { !$0.isEmpty }
    }
}

extension String {
    /// Whether the string equals `other` with ASCII letters compared without case: how
    /// header field names compare (RFC 9110 §5.1), without Foundation's locale-aware
    /// comparison.
    func equalsIgnoringASCIICase(_ other: String) -> Bool {
        var this = self
        var that = other
        return this.withUTF8 { left in
            that.withUTF8 { right in
                guard left.count == right.count else { return false }
                for index in left.indices where left[index] != right[index] {
                    guard left[index] | 0x20 == right[index] | 0x20, (0x61...0x7A).contains(left[index] | 0x20)
                    else { return false }
                }
                return true
            }
        }
    }
}

extension StringProtocol {
    /// The text without the spaces and tabs at either end (HTTP's optional whitespace,
    /// RFC 9110 §5.6.3).
    func trimmingOptionalWhitespace() -> String {
        let utf8 = self.utf8
        var lower = utf8.startIndex
        while lower < utf8.endIndex, utf8[lower] == 0x20 || utf8[lower] == 0x09 { lower = utf8.index(after: lower) }
        var upper = lower
        var index = lower
        while index < utf8.endIndex {
            let byte = utf8[index]
            index = utf8.index(after: index)
            if byte != 0x20 && byte != 0x09 { upper = index }
        }
        return String(decoding: utf8[lower..<upper], as: UTF8.self)
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

/// A cached response with its body, and what the cache rules read from it.
struct CachedEntry: Sendable {
    let response: CachedResponse
    let body: Data
    /// What ``CacheRules`` read from `response`, once.
    let facts: CacheRules.Facts

    init(response: CachedResponse, body: Data) {
        self.response = response
        self.body = body
        facts = CacheRules.Facts(response)
    }
}
