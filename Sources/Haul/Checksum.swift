/// An expected digest of a download's content, checked before the file is moved into place.
public struct Checksum: Sendable, Hashable, CustomStringConvertible {
    /// A supported digest algorithm.
    public enum Algorithm: String, Sendable, CaseIterable {
        /// SHA-256 (`sha-256` in a `Digest` header or a manifest).
        case sha256 = "sha-256"
        /// SHA-1 (`sha-1`), for servers that publish nothing stronger.
        case sha1 = "sha-1"
        /// MD5 (`md5`), for servers that publish nothing stronger.
        case md5 = "md5"

        var hexLength: Int {
            switch self {
            case .sha256: 64
            case .sha1: 40
            case .md5: 32
            }
        }

        /// Parses `sha-256`, `sha256`, `SHA-1`, `sha1` or `md5`.
        package init?(name: String) {
            switch name.lowercased().replacingOccurrences(of: "-", with: "").replacingOccurrences(of: "_", with: "") {
            case "sha256": self = .sha256
            case "sha1": self = .sha1
            case "md5": self = .md5
            default: return nil
            }
        }
    }

    /// The digest algorithm.
    public let algorithm: Algorithm
    /// The expected digest as lowercase hexadecimal.
    public let hex: String

    /// Creates a checksum, validating the digest's length and characters.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` when `hex` is not a digest of `algorithm`.
    public init(_ algorithm: Algorithm, hex: String) throws(DownloadError) {
        let lowered = hex.lowercased()
        guard lowered.count == algorithm.hexLength, lowered.allSatisfy({ $0.isHexDigit }) else {
            throw .invalid(
                "checksum '\(hex)' is not a \(algorithm.rawValue) digest: expected \(algorithm.hexLength) hexadecimal digits"
            )
        }
        self.algorithm = algorithm
        self.hex = lowered
    }

    /// The checksum of a digest just computed (`digest`: the hash function's output).
    package init(_ algorithm: Algorithm, digest: some Sequence<UInt8>) {
        self.algorithm = algorithm
        self.hex = Hex.lowercase(digest)
    }

    /// Parses `ALGORITHM=HEX`, for example `sha-256=9f86d0…`.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` naming what is wrong.
    public init(parsing text: String) throws(DownloadError) {
        guard let equals = text.firstIndex(of: "=") else {
            throw .invalid("checksum '\(text)' must look like sha-256=HEX (or sha-1=HEX, md5=HEX)")
        }
        let name = String(text[..<equals])
        guard let algorithm = Algorithm(name: name) else {
            throw .invalid("unknown checksum algorithm '\(name)': use sha-256, sha-1 or md5")
        }
        try self.init(algorithm, hex: String(text[text.index(after: equals)...]))
    }

    public var description: String { "\(algorithm.rawValue)=\(hex)" }
}
