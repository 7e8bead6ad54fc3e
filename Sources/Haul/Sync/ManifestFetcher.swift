import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Fetches a manifest with a conditional GET, following redirects and retrying like a
/// download.
struct ManifestFetcher: Sendable {
    /// What the server sent.
    enum Outcome: Sendable {
        /// A new manifest; `finalURL` is where it came from after redirects, the base for
        /// its relative URLs.
        case fetched(body: Data, etag: String?, lastModified: String?, finalURL: URL)
        /// 304: the remembered copy is still current.
        case notModified(finalURL: URL)
    }

    /// The largest manifest accepted (a manifest of a million entries is about 200 MB).
    static let maxSize = 512 * 1024 * 1024

    let clients: HTTPClients
    let configuration: DownloadManager.Configuration
    let logger: Logger
    /// Credential headers for the manifest URL's origin only (see ``RedirectPolicy``).
    var credentials: [(name: String, value: String)] = []

    func fetch(_ url: URL, etag: String?, lastModified: String?) async throws(DownloadError) -> Outcome {
        let outcome = await withRetries(configuration.retry) { () throws(DownloadError) in
            try await attempt(url, etag: etag, lastModified: lastModified)
        }
        switch outcome {
        case .succeeded(let fetched):
            return fetched
        case .failed(let error), .waitingForNetwork(let error), .interrupted(let error?):
            throw error
        case .interrupted(nil):
            throw DownloadError(.cancelled, "the sync was cancelled", cancellationReason: .userRequested)
        }
    }

    private func attempt(_ original: URL, etag: String?, lastModified: String?) async throws(DownloadError) -> Outcome {
        let policy = RedirectPolicy(
            url: original, headers: credentials, netrc: configuration.netrc,
            allowsDowngrade: configuration.allowsInsecureRedirects)
        var redirects = RedirectFollower(
            url: original, policy: policy, maxRedirects: configuration.maxRedirects, subject: .manifest)
        while true {
            let url = redirects.url
            var headers = HTTPHeaders()
            headers.add(name: "User-Agent", value: configuration.userAgent)
            for header in redirects.headers { headers.add(name: header.name, value: header.value) }
            headers.add(name: "Accept", value: "application/xml, application/json, text/xml;q=0.9, */*;q=0.5")
            if let etag { headers.add(name: "If-None-Match", value: etag) }
            if let lastModified { headers.add(name: "If-Modified-Since", value: lastModified) }
            let request: HTTPClient.Request
            do {
                request = try HTTPClient.Request(url: url, method: .GET, headers: headers)
            } catch {
                throw DownloadError.invalid("\(url.absoluteString): \(error)")
            }
            // The body of a redirect or an error is kept only to be read to its end (so the
            // connection can be reused), up to 1 MiB.
            let receiver = CollectingReceiver { head in
                let status = head.status.code
                return status == 304 || (300..<400).contains(status) || status >= 400 ? 1 << 20 : Self.maxSize
            }
            // The client's read timeout bounds each silence; the deadline only caps the whole fetch.
            let failure = await clients.execute(
                request, receiver: receiver, deadline: .now() + .hours(1), logger: logger)
            let response: HTTPResponseHead
            let body: ByteBuffer
            do {
                let collected = try receiver.collected()
                if let failure { throw failure }
                guard let head = collected.head else { throw HTTPClientError.remoteConnectionClosed }
                (response, body) = (head, collected.body)
            } catch is NIOTooManyBytesError {
                throw DownloadError(
                    .tooLarge, "the manifest at \(url.absoluteString) is larger than \(Self.maxSize / 1_048_576) MiB")
            } catch {
                throw TransportErrors.translate(await clients.diagnosed(error, url: url), url: url)
            }
            let status = Int(response.status.code)
            switch status {
            case 200:
                let data = Data(body.readableBytesView)
                if let length = response.headers.first(name: "Content-Length").flatMap(Int.init), length != data.count {
                    throw DownloadError(
                        .network, "the manifest at \(url.absoluteString) ended after \(data.count) of \(length) bytes")
                }
                return .fetched(
                    body: data, etag: response.headers.first(name: "ETag"),
                    lastModified: response.headers.first(name: "Last-Modified"), finalURL: url)
            case 304:
                guard etag != nil || lastModified != nil else {
                    throw DownloadError(
                        .protocolViolation, "\(url.absoluteString) answered 304 to a request that was not conditional")
                }
                return .notModified(finalURL: url)
            case 301, 302, 303, 307, 308:
                try redirects.follow(status: status, location: response.headers.first(name: "Location"))
            case 200..<300:
                throw DownloadError(
                    .protocolViolation, "\(url.absoluteString) answered \(status) instead of the manifest")
            default:
                var error = TransportErrors.httpError(
                    status: status, url: url, retryAfter: response.headers.first(name: "Retry-After"))
                if status == 404 {
                    error = DownloadError(
                        .httpStatus, "no manifest at \(url.absoluteString) (HTTP 404 Not Found): check the URL",
                        statusCode: 404)
                }
                throw error
            }
        }
    }
}
