import Foundation

/// Where in a bucket a download lands: an object (`s3://bucket/key`) or a prefix that works
/// as a directory (`s3://bucket/prefix/`, `s3://bucket`), and the URL of a request for it.
///
/// ```swift
/// let destination = try S3Location(parsing: "s3://downloads/isos/")
/// let object = try destination.appending("debian.iso")       // s3://downloads/isos/debian.iso
/// let url = try object.objectURL(endpoint: URL(string: "http://127.0.0.1:8333"), region: "us-east-1")
/// // http://127.0.0.1:8333/downloads/isos/debian.iso
/// ```
///
/// The text after the bucket is the key exactly as written, like the AWS CLI reads it:
/// nothing is percent-decoded (`a%20b` is a key with a `%`), and `?` and `#` are part of the
/// key.
///
/// Bucket names follow S3's rules for new buckets: 3 to 63 characters of lowercase letters,
/// digits, `.` and `-`, starting and ending with a letter or digit, no `..`, not an IPv4
/// address. Keys are at most 1024 bytes of UTF-8, with no control characters (S3's XML
/// listings cannot carry them), no leading `/`, and no `.` or `..` component (which HTTP
/// clients and servers may remove from a path, so the key signed would not be the key
/// stored). Empty components (`a//b`) are kept: S3 does not normalise paths.
package struct S3Location: Sendable, Hashable, CustomStringConvertible {
    /// The bucket.
    package let bucket: String
    /// The object's key; for a prefix, empty (the whole bucket) or ending with `/`.
    package let key: String

    /// The longest key S3 accepts, in bytes of UTF-8.
    static let maximumKeyLength = 1024

    /// Whether this is a prefix (a directory destination) rather than an object.
    package var isPrefix: Bool { key.isEmpty || key.hasSuffix("/") }

    /// `s3://bucket/key`.
    package var description: String { "s3://\(bucket)/\(key)" }

    /// Parses `s3://bucket/key` (an object) or `s3://bucket/prefix/` and `s3://bucket` (a
    /// prefix). The scheme is case-insensitive.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` with a message naming the text and
    ///   the rule it breaks.
    package init(parsing text: String) throws(DownloadError) {
        guard text.utf8.count > 5, text.prefix(5).lowercased() == "s3://" else {
            throw DownloadError.invalid("\(String(reflecting: text)) is not an S3 location: write s3://bucket/key")
        }
        let rest = text.dropFirst(5)
        let slash = rest.firstIndex(of: "/")
        let bucket = String(rest[..<(slash ?? rest.endIndex)])
        let key = slash.map { String(rest[rest.index(after: $0)...]) } ?? ""
        try self.init(bucket: bucket, key: key)
    }

    /// A location from its parts, validated.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` naming the bucket or key and the rule
    ///   it breaks.
    package init(bucket: String, key: String) throws(DownloadError) {
        if let problem = Self.bucketProblem(bucket) {
            throw DownloadError.invalid("invalid S3 bucket name \(String(reflecting: bucket)): \(problem)")
        }
        if !key.isEmpty, let problem = Self.keyProblem(key) {
            throw DownloadError.invalid("invalid S3 key \(String(reflecting: key)) in bucket \(bucket): \(problem)")
        }
        self.bucket = bucket
        self.key = key
    }

    /// The object `name` inside this prefix (`name` may hold `/`); for an object location,
    /// a copy of it (the key is the name already, as `cp file s3://bucket/key` has it).
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` when the resulting key breaks a rule,
    ///   or is itself a prefix.
    package func appending(_ name: String) throws(DownloadError) -> S3Location {
        guard isPrefix else { return self }
        let location = try S3Location(bucket: bucket, key: key + name)
        guard !location.isPrefix else {
            throw DownloadError.invalid("\(location) names a prefix, not an object: the name must not end with /")
        }
        return location
    }

    /// The object's `s3://bucket/key` URL, the key percent-encoded where a URL needs it
    /// (spaces, …): what ``DownloadResult/fileURL`` says of a download stored here.
    var address: URL {
        var address = URLComponents()
        address.scheme = "s3"
        address.host = bucket
        address.path = "/" + key
        return address.url ?? URL(string: "s3://\(bucket)/")!
    }

    // MARK: - Request URLs

    /// The URL of a request for the object (or, for a prefix, for the key as written),
    /// with `query` appended.
    ///
    /// - With an `endpoint` (SeaweedFS, MinIO, LocalStack): path-style,
    ///   `ENDPOINT/bucket/key`, any path of the endpoint kept in front.
    /// - Without one (AWS): virtual-hosted, `https://bucket.s3.REGION.amazonaws.com/key`
    ///   (`.amazonaws.com.cn` in China regions); path-style
    ///   `https://s3.REGION.amazonaws.com/bucket/key` for a bucket with a `.`, which the
    ///   `*.s3` certificate does not cover.
    ///
    /// The key's bytes outside `A-Z a-z 0-9 - . _ ~ /` are percent-encoded, and the query's
    /// names and values outside `A-Z a-z 0-9 - . _ ~`: the encoding ``SigV4Signer`` signs,
    /// so the path and query sent are the canonical ones. A parameter with a `nil` value is
    /// written bare (`?uploads`).
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` for a region that cannot be part
    ///   of a host name.
    func objectURL(endpoint: URL?, region: String, query: [(String, String?)] = []) throws(DownloadError) -> URL {
        try url(
            path: SigV4Signer.encode(key.utf8, keepingSlash: true), endpoint: endpoint, region: region, query: query)
    }

    /// The URL of a request for the bucket itself (listings, `?uploads`), with `query`
    /// appended: `ENDPOINT/bucket` path-style, `https://bucket.s3.REGION.amazonaws.com/`
    /// virtual-hosted. See ``objectURL(endpoint:region:query:)``.
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` for an unusable region.
    func bucketURL(endpoint: URL?, region: String, query: [(String, String?)] = []) throws(DownloadError) -> URL {
        try url(path: nil, endpoint: endpoint, region: region, query: query)
    }

    /// The URL for `path` (an encoded key, or `nil` for the bucket).
    private func url(
        path: String?, endpoint: URL?, region: String, query: [(String, String?)]
    ) throws(DownloadError) -> URL {
        let origin: String
        var encodedPath: String
        if let endpoint {
            guard let components = URLComponents(url: endpoint, resolvingAgainstBaseURL: false),
                let scheme = components.scheme, let host = components.percentEncodedHost
            else { throw DownloadError(.invalidConfiguration, "the S3 endpoint \(endpoint) has no host") }
            origin = "\(scheme)://\(host)" + (components.port.map { ":\($0)" } ?? "")
            var base = components.percentEncodedPath
            while base.hasSuffix("/") { base.removeLast() }
            encodedPath = "\(base)/\(bucket)" + (path.map { "/\($0)" } ?? "")
        } else {
            guard !region.isEmpty, region.utf8.count <= 63,
                region.utf8.allSatisfy({ (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D })
            else {
                throw DownloadError(
                    .invalidConfiguration,
                    "the AWS region \(String(reflecting: region)) is not a region name such as us-east-1")
            }
            let domain = region.hasPrefix("cn-") ? "amazonaws.com.cn" : "amazonaws.com"
            if bucket.contains(".") {
                origin = "https://s3.\(region).\(domain)"
                encodedPath = "/\(bucket)" + (path.map { "/\($0)" } ?? "")
            } else {
                origin = "https://\(bucket).s3.\(region).\(domain)"
                encodedPath = "/" + (path ?? "")
            }
        }
        if !query.isEmpty {
            let parameters = query.map { name, value in
                let encodedName = SigV4Signer.encode(name.utf8, keepingSlash: false)
                guard let value else { return encodedName }
                return encodedName + "=" + SigV4Signer.encode(value.utf8, keepingSlash: false)
            }
            encodedPath += "?" + parameters.joined(separator: "&")
        }
        guard let url = URL(string: origin + encodedPath) else {
            throw DownloadError(.invalidConfiguration, "cannot make an S3 URL from \(origin) and \(self)")
        }
        return url
    }

    // MARK: - Rules

    /// What is wrong with `bucket` as a bucket name, or `nil` if nothing is.
    static func bucketProblem(_ bucket: String) -> String? {
        let bytes = Array(bucket.utf8)
        guard (3...63).contains(bytes.count) else { return "a bucket name has 3 to 63 characters" }
        let isLetterOrDigit: (UInt8) -> Bool = { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) }
        guard bytes.allSatisfy({ isLetterOrDigit($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }) else {
            return "only lowercase letters, digits, dots and hyphens are allowed"
        }
        guard let first = bytes.first, let last = bytes.last, isLetterOrDigit(first), isLetterOrDigit(last) else {
            return "a bucket name starts and ends with a lowercase letter or a digit"
        }
        guard !bucket.contains("..") else { return "two dots in a row are not allowed" }
        let labels = bucket.split(separator: ".")
        if labels.count == 4, labels.allSatisfy({ $0.utf8.allSatisfy { (0x30...0x39).contains($0) } }) {
            return "a bucket name cannot be an IP address"
        }
        return nil
    }

    /// What is wrong with `key` as an object key or a prefix, or `nil` if nothing is.
    static func keyProblem(_ key: String) -> String? {
        let length = key.utf8.count
        guard length <= maximumKeyLength else {
            return "a key has at most \(maximumKeyLength) bytes of UTF-8, this one \(length)"
        }
        guard !key.hasPrefix("/") else { return "a key does not start with /" }
        if key.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            return "a key cannot contain control characters (NUL, tab, line breaks, …)"
        }
        let components = key.split(separator: "/", omittingEmptySubsequences: false)
        if components.contains(where: { $0 == "." || $0 == ".." }) {
            return "a key cannot have a . or .. component"
        }
        return nil
    }
}
