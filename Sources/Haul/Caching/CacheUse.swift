import Foundation
import NIOHTTP1

/// What the manager's cache gives one run of a request (``DownloadRequest/cacheUse``),
/// decided by ``CacheRules`` before the download is queued.
enum CacheUse: Sendable {
    /// A stored response answers: its body goes to the destination with no request.
    case answer(CachedEntry, from: DownloadResult.Source)
    /// The request goes out with these conditional fields; a `304` answers with the stored
    /// entry, its headers updated.
    case revalidate(CachedEntry, conditions: [HeaderField])
    /// Nothing stored can answer: the response is fetched, and stored where the rules
    /// allow.
    case store

    /// The conditional fields to send, if any.
    var conditions: [HeaderField] {
        if case .revalidate(_, let conditions) = self { return conditions }
        return []
    }
}

extension CacheRules.Request {
    /// What `request` brings to the cache rules: its policy, its header fields, and whether
    /// it carries credentials (its own, or the `netrc` entry of its host).
    init(_ request: DownloadRequest, netrc: Netrc?) {
        let extra = Set(request.sensitiveHeaderNames.map { $0.lowercased() })
        var hasCredentials = request.headers.contains { DownloadRequest.isCredential($0.name, extra: extra) }
        if !hasCredentials, let netrc, let host = request.url.host, netrc.credentials(forHost: host) != nil {
            hasCredentials = true
        }
        self.init(
            policy: request.cachePolicy, headers: request.headers.map { HeaderField($0.name, $0.value) },
            hasCredentials: hasCredentials)
    }
}

extension CachedResponse {
    /// The hop-by-hop fields (RFC 9110 §7.6.1), which a cache does not keep.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
        "proxy-authenticate", "proxy-authorization",
    ]

    /// The fields of `headers` a cache keeps.
    static func fields(of headers: HTTPHeaders) -> [HeaderField] {
        headers.compactMap { hopByHop.contains($0.name.lowercased()) ? nil : HeaderField($0.name, $0.value) }
    }

    /// The validator a completed file made from this response is revalidated with later.
    var validator: Validator? {
        Validator(etag: headers.first("ETag"), lastModified: headers.first("Last-Modified"))
    }
}
