import Foundation
import Testing

@testable import Haul

/// The piece ledger's rules, without files: which pieces are ready to check, once; what a
/// bad piece gives back; the bitfield kept beside the partial.
@Suite("PieceLedger")
struct PieceLedgerTests {
    static func checksums(count: Int, length: Int64 = 100) throws -> PieceChecksums {
        try PieceChecksums(.sha1, length: length, hashes: Array(repeating: String(repeating: "a", count: 40), count: count))
    }

    @Test func piecesAreReadyOnceWhenWhollyWritten() throws {
        // 5 pieces of 100 bytes in 450: the last is 50
        var ledger = PieceLedger(try Self.checksums(count: 5), total: 450)
        // Bytes 0-149 written, the rest missing: piece 0 is ready, piece 1 is not
        #expect(ledger.ready(around: 0..<150, missing: [(150, 450)]) == [0])
        // Asked again while it is being checked: not handed out twice
        #expect(ledger.ready(around: 0..<150, missing: [(150, 450)]).isEmpty)
        // 150-450 written by another connection: 1 to 4 are ready, the short last one too
        #expect(ledger.ready(around: 150..<450, missing: []) == [1, 2, 3, 4])
        ledger.passed(0)
        #expect(ledger.verifiedCount == 1)
        #expect(ledger.ready(around: 0..<450, missing: []).isEmpty)
    }

    @Test func aBadPieceGivesItsRangeAndItsWritersAndFailsTheDownloadAtTheThirdTime() throws {
        var ledger = PieceLedger(try Self.checksums(count: 3), total: 300)
        ledger.wrote(0..<150, by: 0)
        ledger.wrote(150..<300, by: 1)
        #expect(ledger.ready(around: 0..<300, missing: []) == [0, 1, 2])
        let bad = ledger.failed(1)
        #expect(bad.range == 100..<200)
        #expect(bad.writers == [0, 1])
        #expect(!bad.exhausted)
        // Fetched again by source 2: only it is the writer now
        ledger.wrote(100..<200, by: 2)
        #expect(ledger.ready(around: 100..<200, missing: []) == [1])
        #expect(ledger.failed(1).writers == [2])
        _ = ledger.ready(around: 100..<200, missing: [])
        #expect(ledger.failed(1).exhausted)
    }

    @Test func aResumedDownloadChecksOnlyThePiecesNotCheckedBefore() throws {
        var ledger = PieceLedger(try Self.checksums(count: 4), total: 400, verified: [0, 2])
        // Piece 3 is still missing a byte
        #expect(ledger.unchecked(missing: [(399, 400)]) == [1])
    }

    @Test(arguments: [(0, ""), (1, "80"), (9, "ff80"), (12, "a5f0")])
    func theBitfieldRoundTrips(count: Int, expected: String) throws {
        guard count > 0 else {
            #expect(PieceLedger.pieces(inBitfield: "", count: 0).isEmpty)
            return
        }
        let verified: Set<Int> =
            switch count {
            case 1: [0]
            case 9: Set(0..<9)
            default: [0, 2, 5, 7, 8, 9, 10, 11]
            }
        let ledger = PieceLedger(try Self.checksums(count: count), total: Int64(count) * 100, verified: verified)
        #expect(ledger.bitfield == expected)
        #expect(PieceLedger.pieces(inBitfield: expected, count: count) == verified)
        // A bitfield of another length is not trusted
        #expect(PieceLedger.pieces(inBitfield: expected + "00", count: count).isEmpty)
    }

    @Test func checksumsMustFitTheSize() throws {
        let checksums = try Self.checksums(count: 3)
        #expect(checksums.fits(total: 201))
        #expect(checksums.fits(total: 300))
        #expect(!checksums.fits(total: 301))
        #expect(!checksums.fits(total: 200))
        // Sizes near Int64.max do not overflow (an API body's expectedSize once crashed the service)
        #expect(!checksums.fits(total: .max))
        #expect(!(try Self.checksums(count: 1, length: 2)).fits(total: .max))
        #expect(try Self.checksums(count: 1, length: .max).fits(total: .max))
        #expect(!checksums.fits(total: -1))
        #expect(throws: DownloadError.self) { try PieceChecksums(.sha256, length: 10, hashes: ["ab"]) }
        #expect(throws: DownloadError.self) { try PieceChecksums(.sha1, length: 0, hashes: [String(repeating: "a", count: 40)]) }
    }
}
