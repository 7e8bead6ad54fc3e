import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// The requests Haul makes of an S3-compatible store: one `PUT`, and the five steps of a
/// multipart upload (initiate, part, list, complete, abort), plus the listing of uploads
/// left unfinished under a key.
///
/// Every request is signed with ``SigV4Signer`` at the moment it is sent and goes through
/// the manager's ``HTTPClients`` (so the environment's proxies apply, as they do to the
/// downloads). Integrity comes from checksums S3 checks, not from the signature: every body
/// carries its SHA-256 as `x-amz-checksum-sha256` (the small XML of a completion, its
/// `Content-MD5`), and a store that finds it wrong answers `BadDigest`. (One digest, not two:
/// the store's own CPU is what limits an upload on a shared machine, and every byte hashed
/// here is a byte it waits for.) (Stores such as SeaweedFS do not check
/// `x-amz-content-sha256` against the body, so the payload itself is sent unsigned.)
///
/// Failures become ``DownloadError``s with the store's own code in the message:
/// ``DownloadError/Code/objectStorage`` (with the HTTP status) for what the store refused,
/// ``DownloadError/Code/network`` for what never reached it; both are retried as S3 asks
/// (5xx, 429, `SlowDown`, `InternalError`).
final class S3Client: Sendable {
    /// The credentials, region and endpoint.
    let configuration: AWSConfiguration
    private let clients: HTTPClients
    private let signer: SigV4Signer
    private let logger: Logger
    /// The clock requests are signed with.
    private let now: @Sendable () -> Date

    /// The longest response body read (S3's XML answers are small; a listing of 1,000
    /// parts is about 200 KB).
    static let responseLimit = 4 << 20

    init(
        configuration: AWSConfiguration, clients: HTTPClients, logger: Logger,
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.configuration = configuration
        self.clients = clients
        self.signer = SigV4Signer(credentials: configuration.credentials, region: configuration.region)
        self.logger = logger
        self.now = now
    }

    // MARK: - Objects

    /// The size and ETag of the object at `location`, or `nil` when there is none.
    func headObject(_ location: S3Location) async throws(DownloadError) -> (size: Int64, etag: String)? {
        let what = "look up \(location)"
        let reply = try await send("HEAD", try objectURL(location), headers: [], body: nil, what: what, accepting: [404])
        guard reply.status != .notFound else { return nil }
        guard let length = reply.headers.first(name: "content-length").flatMap({ Int64($0) }) else {
            throw DownloadError(.protocolViolation, "cannot \(what): the store's answer has no Content-Length")
        }
        return (length, try Self.etag(reply, what: what))
    }

    /// Stores `body` at `location` in one request, with its SHA-256 (base64, see
    /// ``sha256(of:)``) as S3's checksum.
    ///
    /// - Returns: the object's ETag.
    func putObject(_ location: S3Location, body: ByteBuffer, sha256: String) async throws(DownloadError) -> String {
        let reply = try await send(
            "PUT", try objectURL(location), headers: [("x-amz-checksum-sha256", sha256)], body: body,
            what: "store \(location)")
        return try Self.etag(reply, what: "store \(location)")
    }

    // MARK: - Multipart uploads

    /// Starts a multipart upload to `location` whose parts carry SHA-256 checksums.
    ///
    /// - Returns: the upload's ID.
    func createMultipartUpload(_ location: S3Location) async throws(DownloadError) -> String {
        let what = "start an upload to \(location)"
        let reply = try await send(
            "POST", try objectURL(location, query: [("uploads", nil)]),
            headers: [("x-amz-checksum-algorithm", "SHA256")], body: nil, what: what)
        return try decode(S3InitiatedUpload.self, reply, what: what).uploadID
    }

    /// Uploads part `number` of an upload, with its SHA-256 (base64, see ``sha256(of:)``)
    /// for the store to check.
    ///
    /// - Returns: the part as ``S3XML/completeMultipartUploadBody(_:)`` needs it.
    func uploadPart(
        _ location: S3Location, uploadID: String, number: Int, body: ByteBuffer, sha256: String
    ) async throws(DownloadError) -> S3CompletedPart {
        let what = "upload part \(number) of \(location)"
        let reply = try await send(
            "PUT",
            try objectURL(location, query: [("partNumber", String(number)), ("uploadId", uploadID)]),
            headers: [("x-amz-checksum-sha256", sha256)], body: body, what: what)
        return S3CompletedPart(number: number, etag: try Self.etag(reply, what: what), checksumSHA256: sha256)
    }

    /// The parts the store holds for an upload, every page of them.
    func listParts(_ location: S3Location, uploadID: String) async throws(DownloadError) -> [S3UploadedPart] {
        let what = "list the parts of an upload to \(location)"
        var parts: [S3UploadedPart] = []
        var marker: Int?
        while true {
            var query: [(String, String?)] = [("uploadId", uploadID)]
            if let marker { query.append(("part-number-marker", String(marker))) }
            let reply = try await send("GET", try objectURL(location, query: query), headers: [], body: nil, what: what)
            let page = try decode(S3PartListing.self, reply, what: what)
            parts += page.parts
            guard page.isTruncated, let next = page.nextPartNumberMarker, next != marker else { return parts }
            marker = next
        }
    }

    /// Joins the parts into the object: it appears at `location` only now.
    ///
    /// The store can answer `200 OK` and then an `<Error>` body; that is a failure here.
    /// - Returns: the object's ETag.
    func completeMultipartUpload(
        _ location: S3Location, uploadID: String, parts: [S3CompletedPart]
    ) async throws(DownloadError) -> String {
        let what = "complete the upload to \(location)"
        let body = ByteBuffer(bytes: try S3XML.completeMultipartUploadBody(parts))
        let reply = try await send(
            "POST", try objectURL(location, query: [("uploadId", uploadID)]),
            headers: [("Content-Type", "application/xml"), Self.contentMD5(of: body)],
            body: body, what: what)
        return try decode(S3CompletedUpload.self, reply, what: what).etag
    }

    /// Abandons an upload: the store deletes its parts. An upload already gone is not an error.
    func abortMultipartUpload(_ location: S3Location, uploadID: String) async throws(DownloadError) {
        _ = try await send(
            "DELETE", try objectURL(location, query: [("uploadId", uploadID)]), headers: [], body: nil,
            what: "abort the upload to \(location)", accepting: [404])
    }

    /// The unfinished uploads whose key is exactly `location`'s, every page of them.
    func pendingUploads(_ location: S3Location) async throws(DownloadError) -> [S3PendingUpload] {
        let what = "list the unfinished uploads to \(location)"
        var uploads: [S3PendingUpload] = []
        var markers: (key: String, uploadID: String)?
        while true {
            var query: [(String, String?)] = [("prefix", location.key), ("uploads", nil)]
            if let markers { query += [("key-marker", markers.key), ("upload-id-marker", markers.uploadID)] }
            let url = try location.bucketURL(
                endpoint: configuration.endpoint, region: configuration.region, query: query)
            let reply = try await send("GET", url, headers: [], body: nil, what: what)
            let page = try decode(S3UploadListing.self, reply, what: what)
            uploads += page.uploads.filter { $0.key == location.key }
            guard page.isTruncated, let key = page.nextKeyMarker, let upload = page.nextUploadIDMarker,
                markers.map({ $0.key != key || $0.uploadID != upload }) ?? true
            else { return uploads }
            markers = (key, upload)
        }
    }

    // MARK: - Sending

    /// A response: its status, headers and (small) body.
    struct Reply: Sendable {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: ByteBuffer
    }

    private func objectURL(_ location: S3Location, query: [(String, String?)] = []) throws(DownloadError) -> URL {
        try location.objectURL(endpoint: configuration.endpoint, region: configuration.region, query: query)
    }

    /// Signs and sends one request; a status outside 2xx (and `accepting`) is an error. A
    /// response body over `limit` bytes is an error too.
    func send(
        _ method: String, _ url: URL, headers: [(String, String)], body: ByteBuffer?, what: String,
        accepting: Set<Int> = [], limit: Int = responseLimit
    ) async throws(DownloadError) -> Reply {
        var request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: HTTPMethod(rawValue: method))
        } catch {
            throw DownloadError(.invalidConfiguration, "cannot \(what): \(url) is not a URL the client can send")
        }
        let signature = try signer.sign(method: method, url: url, headers: headers, payloadHash: .unsigned, date: now())
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        for (name, value) in signature.headers { request.headers.replaceOrAdd(name: name, value: value) }
        if let body { request.body = .byteBuffer(body) }

        let receiver = CollectingReceiver { _ in limit }
        if let error = await clients.execute(request, receiver: receiver, logger: logger) {
            throw TransportErrors.translate(error, url: url)
        }
        let head: HTTPResponseHead?
        let collected: ByteBuffer
        do {
            (head, collected) = try receiver.collected()
        } catch {
            throw DownloadError(.protocolViolation, "cannot \(what): the store's answer is over \(limit) bytes")
        }
        guard let head else { throw DownloadError(.protocolViolation, "cannot \(what): the store sent no answer") }
        let reply = Reply(status: head.status, headers: head.headers, body: collected)
        guard (200..<300).contains(Int(head.status.code)) || accepting.contains(Int(head.status.code)) else {
            throw Self.failure(reply, what: what)
        }
        return reply
    }

    /// The error for a refused request: S3's code and message when it sent an `<Error>`.
    static func failure(_ reply: Reply, what: String) -> DownloadError {
        let status = Int(reply.status.code)
        let refusal: S3ErrorResponse? =
            if reply.body.readableBytes > 0, case .error(let error)? = try? S3XML.decode(
                S3InitiatedUpload.self, from: Data(reply.body.readableBytesView))
            { error } else { nil }
        let reason = refusal.map(\.description) ?? "HTTP \(status) \(reply.status.reasonPhrase)"
        // A busy store's code (`SlowDown`) counts as 503 whatever status came with it.
        let retryable = refusal?.isRetryable ?? false
        return DownloadError(.objectStorage, "cannot \(what): \(reason)", statusCode: retryable ? 503 : status)
    }

    private func decode<Value: S3XMLDecodable>(_ type: Value.Type, _ reply: Reply, what: String) throws(DownloadError)
        -> Value
    {
        switch try S3XML.decode(type, from: Data(reply.body.readableBytesView)) {
        case .value(let value): return value
        case .error(let refusal):
            // An `<Error>` sent with 200 (a completion that failed late) has no status of
            // its own: a busy store's counts as 503, anything else as 400.
            throw DownloadError(
                .objectStorage, "cannot \(what): \(refusal)", statusCode: refusal.isRetryable ? 503 : 400)
        }
    }

    private static func etag(_ reply: Reply, what: String) throws(DownloadError) -> String {
        guard let etag = reply.headers.first(name: "etag"), !etag.isEmpty else {
            throw DownloadError(.protocolViolation, "cannot \(what): the store's answer has no ETag")
        }
        return etag
    }

    /// The value of `x-amz-checksum-sha256` for `body`: its SHA-256 in base64. CPU work of a
    /// few milliseconds per part: computed on the I/O pool, beside the read.
    static func sha256(of body: ByteBuffer) -> String {
        body.withUnsafeReadableBytes { Data(SHA256.hash(data: $0)).base64EncodedString() }
    }

    /// `Content-MD5` for `body`: its MD5 in base64.
    static func contentMD5(of body: ByteBuffer) -> (String, String) {
        body.withUnsafeReadableBytes { ("Content-MD5", Data(Insecure.MD5.hash(data: $0)).base64EncodedString()) }
    }
}
