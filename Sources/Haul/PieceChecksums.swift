import Foundation

/// The digests of a content's pieces, each `length` bytes (the last may be shorter), as a
/// Metalink file gives them (RFC 5854 §4.2.10).
///
/// A download with piece checksums fetches the content in ranges and checks each piece as
/// soon as it is complete. A piece that does not match is fetched again, from another
/// source when the download has mirrors, and the source that served it is demoted (and
/// dropped after a second bad piece): a bad byte costs a piece, never the whole file.
/// The pieces already checked are kept beside the partial file, so a resumed download
/// does not check them again.
public struct PieceChecksums: Sendable, Hashable {
    /// The digest algorithm of every piece.
    public let algorithm: Checksum.Algorithm
    /// The length of every piece but the last, in bytes.
    public let length: Int64
    /// The digests, in order, as lowercase hexadecimal.
    public let hashes: [String]

    /// Creates piece checksums, validating the length and every digest.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` when `length` is not positive, there
    ///   is no digest, or a digest is not one of `algorithm`.
    public init(_ algorithm: Checksum.Algorithm, length: Int64, hashes: [String]) throws(DownloadError) {
        guard length > 0 else { throw .invalid("piece checksums need a positive piece length, not \(length)") }
        guard !hashes.isEmpty else { throw .invalid("piece checksums need at least one digest") }
        var lowered: [String] = []
        lowered.reserveCapacity(hashes.count)
        for (index, hash) in hashes.enumerated() {
            let hex = hash.lowercased()
            guard hex.utf8.count == algorithm.hexLength, hex.allSatisfy(\.isHexDigit) else {
                throw .invalid("piece \(index)'s digest is not a \(algorithm.rawValue) digest")
            }
            lowered.append(hex)
        }
        self.algorithm = algorithm
        self.length = length
        self.hashes = lowered
    }

    /// The byte range `[start, end)` of piece `index` in a content of `total` bytes.
    func range(of index: Int, total: Int64) -> Range<Int64> {
        let start = Int64(index) * length
        return start..<min(total, start + length)
    }

    /// Whether the checksums fit a content of `total` bytes: one digest per piece.
    package func fits(total: Int64) -> Bool {
        // (Pieces of a size near Int64.max: `total + length - 1` would overflow.)
        guard total >= 0, length > 0 else { return false }
        let pieces = total / length + (total % length == 0 ? 0 : 1)
        return Int64(hashes.count) == pieces
    }
}
