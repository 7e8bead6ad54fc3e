/// Which pieces of a download with piece checksums (``PieceChecksums``) are checked, which
/// are being checked, and which sources wrote into each piece since it was last fetched.
///
/// A plain value, tested without sockets (`PieceLedgerTests`); ``SegmentedTransfer`` keeps
/// it behind a lock, and checks the pieces it hands out on the I/O pool.
struct PieceLedger: Sendable {
    let pieces: PieceChecksums
    /// The content's size.
    let total: Int64
    /// Whether each piece is checked.
    private(set) var verified: [Bool]
    /// Pieces handed out for checking and not yet reported.
    private var checking: Set<Int> = []
    /// The sources (indices in the download's ``SourceSet``) that wrote into each piece.
    private var writers: [Int: Set<Int>] = [:]
    /// How many times each piece did not match.
    private var failures: [Int: Int] = [:]

    /// Checks of one piece that may fail before the download does: a piece no source
    /// serves right is not fetched forever.
    static let maximumFailures = 3

    /// A ledger for a `total`-byte content in which `verified` pieces were checked before.
    init(_ pieces: PieceChecksums, total: Int64, verified: Set<Int> = []) {
        self.pieces = pieces
        self.total = total
        self.verified = (0..<pieces.hashes.count).map { verified.contains($0) }
    }

    var count: Int { verified.count }

    /// How many pieces are checked.
    var verifiedCount: Int { verified.lazy.filter { $0 }.count }

    /// The pieces that hold any byte of `range`.
    func pieces(overlapping range: Range<Int64>) -> ClosedRange<Int>? {
        guard !range.isEmpty, range.lowerBound < total else { return nil }
        let first = Int(range.lowerBound / pieces.length)
        let last = Int(min(range.upperBound - 1, total - 1) / pieces.length)
        return first...min(last, count - 1)
    }

    /// The bytes of the whole pieces that hold any byte of `range` (`range` itself when
    /// none does): what a write into `range` may complete.
    func span(of range: Range<Int64>) -> Range<Int64> {
        guard let overlapping = pieces(overlapping: range) else { return range }
        return pieces.range(of: overlapping.lowerBound, total: total).lowerBound
            ..< pieces.range(of: overlapping.upperBound, total: total).upperBound
    }

    /// Whether every piece that holds a byte of `range` has passed its check.
    func isVerified(_ range: Range<Int64>) -> Bool {
        guard let overlapping = pieces(overlapping: range) else { return true }
        return overlapping.allSatisfy { verified[$0] }
    }

    /// `source` wrote `range` into the file.
    mutating func wrote(_ range: Range<Int64>, by source: Int) {
        guard let overlapping = pieces(overlapping: range) else { return }
        for piece in overlapping { writers[piece, default: []].insert(source) }
    }

    /// The pieces holding any byte of `range` that are now wholly in the file (no byte of
    /// them among `missing`, sorted ranges `[start, end)`), and neither checked nor being
    /// checked: they are handed out for checking, once.
    mutating func ready(around range: Range<Int64>, missing: [(Int64, Int64)]) -> [Int] {
        guard let overlapping = pieces(overlapping: range) else { return [] }
        return take(overlapping, missing: missing)
    }

    /// Every piece wholly in the file that is neither checked nor being checked (a resumed
    /// download's pieces written before it stopped), handed out for checking.
    mutating func unchecked(missing: [(Int64, Int64)]) -> [Int] {
        take(0...(count - 1), missing: missing)
    }

    private mutating func take(_ candidates: ClosedRange<Int>, missing: [(Int64, Int64)]) -> [Int] {
        var ready: [Int] = []
        for piece in candidates where !verified[piece] && !checking.contains(piece) {
            let range = pieces.range(of: piece, total: total)
            let incomplete = missing.contains { $0.0 < range.upperBound && range.lowerBound < $0.1 }
            guard !incomplete else { continue }
            checking.insert(piece)
            ready.append(piece)
        }
        return ready
    }

    /// Piece `piece` matched its digest.
    mutating func passed(_ piece: Int) {
        checking.remove(piece)
        verified[piece] = true
        writers[piece] = nil
    }

    /// Piece `piece` did not match: returns its range, to fetch again, the sources that
    /// wrote into it, and whether it has failed ``maximumFailures`` times (the download
    /// fails then).
    mutating func failed(_ piece: Int) -> (range: Range<Int64>, writers: Set<Int>, failures: Int, exhausted: Bool) {
        checking.remove(piece)
        failures[piece, default: 0] += 1
        return (
            pieces.range(of: piece, total: total), writers.removeValue(forKey: piece) ?? [], failures[piece]!,
            failures[piece]! >= Self.maximumFailures
        )
    }

    /// The checked pieces as a bitfield in hexadecimal, piece 0 in the high bit of the
    /// first byte (the form of aria2's `bitfield`), for the partial's sidecar.
    var bitfield: String {
        var bytes = [UInt8](repeating: 0, count: (count + 7) / 8)
        for (piece, done) in verified.enumerated() where done { bytes[piece / 8] |= 0x80 >> UInt8(piece % 8) }
        return bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }

    /// The pieces a ``bitfield`` marks as checked, among `count`; empty when it is not one.
    static func pieces(inBitfield text: String, count: Int) -> Set<Int> {
        let digits = Array(text.utf8)
        guard digits.count == (count + 7) / 8 * 2 else { return [] }
        var set = Set<Int>()
        for index in 0..<(digits.count / 2) {
            guard let byte = UInt8(String(decoding: digits[(index * 2)...(index * 2 + 1)], as: UTF8.self), radix: 16)
            else { return [] }
            for bit in 0..<8 where byte & (0x80 >> UInt8(bit)) != 0 {
                let piece = index * 8 + bit
                if piece < count { set.insert(piece) }
            }
        }
        return set
    }
}
