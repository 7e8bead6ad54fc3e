import Crypto
import Foundation

/// Signs requests with AWS Signature Version 4 (the `Authorization` header form), as S3
/// and S3-compatible stores (SeaweedFS, MinIO, Ceph) check them.
///
/// A pure value: it reads a request's method, URL, headers and payload hash, a date and
/// its credentials, and answers the headers to add. Nothing is sent and no clock is read.
///
/// ```swift
/// let signer = SigV4Signer(credentials: credentials, region: "us-east-1")
/// let signed = try signer.sign(
///     method: "PUT", url: location.objectURL(endpoint: endpoint, region: region),
///     headers: [("Content-Length", "5")], payloadHash: .unsigned, date: Date())
/// for (name, value) in signed.headers { request.headers.add(name: name, value: value) }
/// ```
///
/// The rules, as AWS's SigV4 documentation and its test suite give them, with S3's
/// exceptions:
/// - **Canonical URI**: the URL's path, percent-decoded to bytes and encoded again with
///   every byte outside `A-Z a-z 0-9 - . _ ~` and `/` as `%XX` (uppercase hex). S3 encodes
///   once (other services encode twice) and does not normalise: `//` and `.` segments are
///   kept. An empty path is `/`.
/// - **Canonical query**: each name and value decoded and encoded the same way, `/`
///   included, sorted by encoded name then encoded value; `name=` for a parameter without a
///   value (`?uploads`). `+` is a literal plus, not a space.
/// - **Canonical headers**: names lowercased; values trimmed, runs of white space inside
///   them (line folds included) collapsed to one space; several headers of one name joined
///   with `,` in their order; sorted by name. `host` is always signed: the caller's `Host`
///   if given, else the URL's host with its port only when it is not the scheme's default.
///
/// The transport must send exactly the URL's percent-encoded path and query, and the same
/// `Host`, that were signed: build URLs with ``S3Location`` (whose encoding is this one),
/// and sign only headers no proxy or client rewrites (not `User-Agent`, `Expect`,
/// `Connection`, `Transfer-Encoding`).
struct SigV4Signer: Sendable {
    /// The credentials that sign.
    let credentials: AWSCredentials
    /// The region in the credential scope, such as `us-east-1`.
    let region: String
    /// The service in the credential scope: `s3`, or `service` in AWS's generic test suite.
    let service: String
    /// Whether `x-amz-content-sha256` is sent and signed. S3 requires it; AWS's generic test
    /// suite signs without it.
    let sendsContentHash: Bool

    /// A signer for `service` (`s3` unless told) in `region`.
    init(credentials: AWSCredentials, region: String, service: String = "s3", sendsContentHash: Bool = true) {
        self.credentials = credentials
        self.region = region
        self.service = service
        self.sendsContentHash = sendsContentHash
    }

    /// The last line of the canonical request and the value of `x-amz-content-sha256`:
    /// the hex SHA-256 of the body, or `UNSIGNED-PAYLOAD`.
    struct PayloadHash: Hashable, Sendable, CustomStringConvertible {
        /// The text signed and sent.
        let value: String

        /// The body is not hashed (S3 accepts this; over TLS, or with a part's own checksum).
        static let unsigned = PayloadHash(value: "UNSIGNED-PAYLOAD")
        /// The hash of an empty body, for `GET`, `HEAD`, `DELETE` and `POST ?uploads`.
        static let emptyBody = sha256(of: Data())

        private init(value: String) { self.value = value }

        /// A SHA-256 written as 64 hexadecimal digits (either case), or `nil` for anything else.
        init?(hex: String) {
            let lowered = hex.lowercased()
            guard lowered.utf8.count == 64, lowered.utf8.allSatisfy(SigV4Signer.isLowerHexDigit) else { return nil }
            value = lowered
        }

        /// The hash of `body`.
        static func sha256(of body: some DataProtocol) -> PayloadHash {
            PayloadHash(value: Hex.lowercase(SHA256.hash(data: body)))
        }

        var description: String { value }
    }

    /// The result of ``SigV4Signer/sign(method:url:headers:payloadHash:date:)``: the headers
    /// to add, and the steps that made them (for tests and for diagnosing a
    /// `SignatureDoesNotMatch`, whose error body gives S3's own canonical request).
    struct Signature: Sendable {
        /// The headers to add to the request, in this order: `x-amz-date`,
        /// `x-amz-content-sha256` (unless the signer sends none), `x-amz-security-token`
        /// (with a session token), `Authorization`.
        let headers: [(name: String, value: String)]
        /// The canonical request: method, URI, query, headers, signed headers, payload hash.
        let canonicalRequest: String
        /// `AWS4-HMAC-SHA256`, the date, the scope and the canonical request's hash.
        let stringToSign: String
        /// The lowercased names signed, joined with `;`.
        let signedHeaders: String
        /// The signature, 64 lowercase hexadecimal digits.
        let signature: String

        /// The value of the `Authorization` header.
        var authorization: String {
            headers.first { $0.name == "Authorization" }?.value ?? ""
        }
    }

    /// Names of the headers the signer sets itself: a caller's header of one of these names
    /// is replaced, not signed twice.
    static let ownHeaderNames: Set<String> = [
        "authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token",
    ]

    /// Signs a request.
    ///
    /// - Parameters:
    ///   - method: the HTTP method, such as `PUT` (uppercased).
    ///   - url: the request's absolute URL; its percent-encoded path and query are what the
    ///     transport sends.
    ///   - headers: the other headers sent and signed (`Host` included if the caller sets it;
    ///     `Content-Length`, `Content-Type`, `Range`, `x-amz-checksum-sha256`, …).
    ///   - payloadHash: the body's hash or ``PayloadHash/unsigned``.
    ///   - date: the signing time; S3 refuses a request more than 15 minutes off its clock
    ///     (`RequestTimeTooSkewed`).
    /// - Throws: ``DownloadError/Code/invalidRequest`` for a URL without a host, or a date
    ///   outside the years 1900 to 9999.
    func sign(
        method: String, url: URL, headers: [(String, String)], payloadHash: PayloadHash, date: Date
    ) throws(DownloadError) -> Signature {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: false),
            let host = Self.hostHeader(components)
        else { throw DownloadError.invalid("cannot sign a request to \(url.absoluteString): it has no host") }
        let timestamp = try Self.timestamp(date)
        let day = String(timestamp.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"

        var signed = headers.filter { !Self.ownHeaderNames.contains($0.0.lowercased()) }
        if !signed.contains(where: { $0.0.lowercased() == "host" }) { signed.append(("host", host)) }
        var added: [(name: String, value: String)] = [("x-amz-date", timestamp)]
        if sendsContentHash { added.append(("x-amz-content-sha256", payloadHash.value)) }
        if let token = credentials.sessionToken { added.append(("x-amz-security-token", token)) }
        signed += added.map { ($0.name, $0.value) }

        let (canonicalHeaders, signedHeaders) = Self.canonicalHeaders(signed)
        let canonicalRequest = [
            method.uppercased(),
            Self.canonicalURI(percentEncodedPath: components.percentEncodedPath),
            Self.canonicalQuery(percentEncodedQuery: components.percentEncodedQuery),
            canonicalHeaders,
            signedHeaders,
            payloadHash.value,
        ].joined(separator: "\n")
        let stringToSign = [
            "AWS4-HMAC-SHA256", timestamp, scope, Hex.lowercase(SHA256.hash(data: Data(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        let signature = Hex.lowercase(
            HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: signingKey(day: day)))
        added.append(
            (
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), "
                    + "SignedHeaders=\(signedHeaders), Signature=\(signature)"
            ))
        return Signature(
            headers: added, canonicalRequest: canonicalRequest, stringToSign: stringToSign,
            signedHeaders: signedHeaders, signature: signature)
    }

    /// The key that signs on `day` (`yyyyMMdd`): HMAC-SHA256 of `day`, the region, the
    /// service and `aws4_request` in turn, starting from `AWS4` + the secret.
    func signingKey(day: String) -> SymmetricKey {
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return key
    }

    // MARK: - Canonical forms

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC, as `x-amz-date` has it.
    static func timestamp(_ date: Date) throws(DownloadError) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
        guard milliseconds.isFinite, abs(milliseconds) < 1e15,
            let text = UTCDateText.text(
                millisecondsSince1970: Int64(milliseconds), separator: UInt8(ascii: "T"), milliseconds: false,
                zulu: true)
        else { throw DownloadError.invalid("cannot sign a request dated \(date): outside the years 1900 to 9999") }
        return text.filter { $0 != "-" && $0 != ":" }
    }

    /// The `Host` header for a URL: its host (in brackets for IPv6), with `:port` only when
    /// the port is given and is not the scheme's default (80 for `http`, 443 for `https`).
    static func hostHeader(_ components: URLComponents) -> String? {
        guard var host = components.percentEncodedHost, !host.isEmpty else { return nil }
        if host.contains(":"), !host.hasPrefix("[") { host = "[\(host)]" }
        guard let port = components.port else { return host }
        let defaultPort =
            switch components.scheme?.lowercased() {
            case "http": 80
            case "https": 443
            default: -1
            }
        return port == defaultPort ? host : "\(host):\(port)"
    }

    /// The canonical URI of a percent-encoded path: decoded to bytes and encoded again with
    /// `/` kept, with no other normalisation (S3's rule); `/` for an empty path.
    static func canonicalURI(percentEncodedPath: String) -> String {
        percentEncodedPath.isEmpty ? "/" : encode(decode(percentEncodedPath), keepingSlash: true)
    }

    /// The canonical query of a percent-encoded query: its parameters decoded and encoded
    /// again (`/` too), sorted by name then value, `name=value` joined with `&`.
    static func canonicalQuery(percentEncodedQuery: String?) -> String {
        guard let query = percentEncodedQuery, !query.isEmpty else { return "" }
        return query.split(separator: "&", omittingEmptySubsequences: true)
            .map { parameter -> (String, String) in
                let pair = parameter.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let value = pair.count > 1 ? pair[1] : ""
                return (encode(decode(pair[0]), keepingSlash: false), encode(decode(value), keepingSlash: false))
            }
            .sorted { a, b in
                a.0 != b.0 ? a.0.utf8.lexicographicallyPrecedes(b.0.utf8) : a.1.utf8.lexicographicallyPrecedes(b.1.utf8)
            }
            .map { "\($0.0)=\($0.1)" }
            .joined(separator: "&")
    }

    /// The canonical headers block (each `name:value` followed by a line break) and the
    /// signed headers list, for `headers`.
    static func canonicalHeaders(_ headers: [(String, String)]) -> (block: String, signed: String) {
        var values: [String: [String]] = [:]
        for (name, value) in headers {
            let collapsed = value.split(whereSeparator: isWhiteSpace).joined(separator: " ")
            values[name.lowercased(), default: []].append(collapsed)
        }
        let names = values.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let block = names.map { "\($0):\(values[$0, default: []].joined(separator: ","))\n" }.joined()
        return (block, names.joined(separator: ";"))
    }

    // MARK: - Encoding

    /// `bytes` with every byte outside `A-Z a-z 0-9 - . _ ~` (and `/`, when `keepingSlash`)
    /// as `%XX` with uppercase hexadecimal digits: AWS's `UriEncode`.
    static func encode(_ bytes: some Sequence<UInt8>, keepingSlash: Bool) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 3)
        for byte in bytes {
            if isUnreserved(byte) || (keepingSlash && byte == UInt8(ascii: "/")) {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xF)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of percent-encoded `text`: each `%XX` (either case) decoded, a `%` not
    /// followed by two hexadecimal digits kept as it is.
    static func decode(_ text: some StringProtocol) -> [UInt8] {
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return out
    }

    /// Whether `byte` is one of RFC 3986's unreserved characters.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// The value of a hexadecimal digit of either case.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Whether `byte` is `0-9` or `a-f`.
    static func isLowerHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// Space, tab, carriage return or line feed: what header values collapse.
    private static func isWhiteSpace(_ character: Character) -> Bool {
        character == " " || character == "\t" || character == "\r" || character == "\n" || character == "\r\n"
    }
}
