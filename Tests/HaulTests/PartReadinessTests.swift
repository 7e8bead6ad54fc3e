import Testing

@testable import Haul

/// ``PartReadiness``: which parts of a multipart upload a download's writes make ready to
/// send, each once, without a store.
struct PartReadinessTests {
    static let mib: Int64 = 1 << 20
    /// 20 MiB in 8 MiB parts: 1 = [0, 8), 2 = [8, 16), 3 = [16, 20) MiB.
    static let plan = try! MultipartPlan(totalSize: 20 * mib)

    static func mib(_ ranges: [(Int64, Int64)]) -> [(Int64, Int64)] { ranges.map { ($0.0 * mib, $0.1 * mib) } }

    @Test func onlyAMultipartPlanOfKnownSizeIsStreamed() throws {
        #expect(PartReadiness(plan: try MultipartPlan(totalSize: 4 * Self.mib)) == nil)
        #expect(PartReadiness(plan: try MultipartPlan(totalSize: nil)) == nil)
        #expect(PartReadiness(plan: Self.plan) != nil)
    }

    @Test(arguments: [
        // a write (MiB), what is still missing (MiB) → parts ready
        ((0, 4), [(4, 20)], []),  // part 1 half written
        ((4, 8), [(8, 20)], [1]),  // its last byte
        ((4, 9), [(9, 20)], [1]),  // a write across the boundary completes part 1 only
        ((15, 16), [(0, 8), (16, 20)], [2]),  // part 2 written out of order
        ((12, 16), [(8, 12), (16, 20)], []),  // part 2 with a hole (another segment's)
        ((19, 20), [(0, 16)], [3]),  // the short last part
        ((0, 20), [], [1, 2, 3]),
        ((8, 16), [(7, 8), (16, 17)], [2]),  // missing ranges on either side, none inside
    ] as [((Int64, Int64), [(Int64, Int64)], [Int])])
    func aPartIsReadyWhenItsLastByteIsWritten(write: (Int64, Int64), missing: [(Int64, Int64)], ready: [Int]) throws {
        var readiness = try #require(PartReadiness(plan: Self.plan))
        let found = readiness.ready(around: write.0 * Self.mib..<write.1 * Self.mib, missing: Self.mib(missing))
        #expect(found == ready)
    }

    @Test func eachPartIsHandedOutOnce() throws {
        var readiness = try #require(PartReadiness(plan: Self.plan))
        #expect(readiness.ready(around: 0..<8 * Self.mib, missing: Self.mib([(8, 20)])) == [1])
        #expect(readiness.ready(around: 0..<16 * Self.mib, missing: Self.mib([(16, 20)])) == [2])
        #expect(readiness.ready(missing: []) == [3])
        #expect(readiness.ready(missing: []).isEmpty)
    }

    @Test func partsTheStoreHoldsAreNotHandedOut() throws {
        var readiness = try #require(PartReadiness(plan: Self.plan))
        readiness.held([1, 3])
        #expect(readiness.ready(missing: []) == [2])
    }

    @Test func aResumedDownloadsWrittenPartsAreReadyAtOnce() throws {
        var readiness = try #require(PartReadiness(plan: Self.plan))
        // Segments stopped at 10 and 18 MiB: part 1 is whole, 2 and 3 are not.
        #expect(readiness.ready(missing: Self.mib([(10, 16), (18, 20)])) == [1])
    }

    @Test func withPiecesAPartWaitsForEveryPieceOverIt() throws {
        // 6 MiB pieces: [0, 6), [6, 12), [12, 18), [18, 20).
        let checksums = try PieceChecksums(
            .sha1, length: 6 * Self.mib, hashes: Array(repeating: String(repeating: "a", count: 40), count: 4))
        var ledger = PieceLedger(checksums, total: 20 * Self.mib)
        var readiness = try #require(PartReadiness(plan: Self.plan))
        // Everything written, piece 0 checked: part 1 ([0, 8)) also needs piece 1.
        ledger.passed(0)
        var checked = ledger
        let first = readiness.ready(missing: [], isVerified: { checked.isVerified($0) })
        #expect(first.isEmpty)
        ledger.passed(1)
        // A write into piece 1 that completes it: widened to the piece, it reaches part 1 and 2.
        let around = ledger.span(of: 7 * Self.mib..<(7 * Self.mib + 1))
        #expect(around == 6 * Self.mib..<12 * Self.mib)
        checked = ledger
        let second = readiness.ready(around: around, missing: [], isVerified: { checked.isVerified($0) })
        #expect(second == [1])
        ledger.passed(2)
        ledger.passed(3)
        checked = ledger
        let third = readiness.ready(missing: [], isVerified: { checked.isVerified($0) })
        #expect(third == [2, 3])
    }

    @Test(arguments: [
        // bytes, sorted missing ranges → overlap
        ((5, 10), [], false),
        ((5, 10), [(0, 5), (10, 12)], false),
        ((5, 10), [(0, 6)], true),
        ((5, 10), [(9, 12)], true),
        ((5, 10), [(0, 1), (6, 7), (20, 30)], true),
        ((5, 10), [(0, 1), (2, 3), (11, 12)], false),
    ] as [((Int64, Int64), [(Int64, Int64)], Bool)])
    func overlapIsFoundInSortedRanges(bytes: (Int64, Int64), ranges: [(Int64, Int64)], overlaps: Bool) {
        #expect(PartReadiness.overlaps(bytes.0..<bytes.1, ranges) == overlaps)
    }
}
