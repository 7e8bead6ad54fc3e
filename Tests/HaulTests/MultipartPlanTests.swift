import Testing

@testable import Haul

@Suite("Multipart upload plans")
struct MultipartPlanTests {
    static let mib: Int64 = 1 << 20
    static let gib: Int64 = 1 << 30
    static let tib: Int64 = 1 << 40

    /// A size, the settings, and the plan they must give.
    struct PlanCase: Sendable, CustomTestStringConvertible {
        var name: String
        var size: Int64?
        var threshold: Int64 = MultipartPlan.defaultSinglePutThreshold
        var preferred: Int64 = MultipartPlan.defaultPreferredPartSize
        var singlePut: Bool
        var partSize: Int64
        var partCount: Int?
        /// The size of the last part, when the size is known.
        var lastPartSize: Int64?
        var testDescription: String { name }
    }

    @Test(arguments: [
        PlanCase(name: "0 bytes", size: 0, singlePut: true, partSize: 0, partCount: 1, lastPartSize: 0),
        PlanCase(name: "1 byte", size: 1, singlePut: true, partSize: 1, partCount: 1, lastPartSize: 1),
        PlanCase(
            name: "exactly 5 MiB", size: 5 * mib, singlePut: true, partSize: 5 * mib, partCount: 1,
            lastPartSize: 5 * mib),
        PlanCase(
            name: "5 MiB + 1 with a 5 MiB threshold", size: 5 * mib + 1, threshold: 5 * mib, preferred: 5 * mib,
            singlePut: false, partSize: 5 * mib, partCount: 2, lastPartSize: 1),
        PlanCase(
            name: "the threshold itself", size: 8 * mib, singlePut: true, partSize: 8 * mib, partCount: 1,
            lastPartSize: 8 * mib),
        PlanCase(
            name: "threshold + 1", size: 8 * mib + 1, singlePut: false, partSize: 8 * mib, partCount: 2,
            lastPartSize: 1),
        PlanCase(
            name: "100 MiB", size: 100 * mib, singlePut: false, partSize: 8 * mib, partCount: 13, lastPartSize: 4 * mib),
        PlanCase(
            name: "10,000 x 5 MiB fits 5 MiB parts", size: 10_000 * 5 * mib, preferred: 5 * mib, singlePut: false,
            partSize: 5 * mib, partCount: 10_000, lastPartSize: 5 * mib),
        PlanCase(
            name: "10,000 x 5 MiB + 1 grows to 6 MiB", size: 10_000 * 5 * mib + 1, preferred: 5 * mib,
            singlePut: false, partSize: 6 * mib, partCount: 8334, lastPartSize: 10_000 * 5 * mib + 1 - 8333 * 6 * mib),
        PlanCase(
            name: "10,000 x 8 MiB + 1 grows to 9 MiB", size: 10_000 * 8 * mib + 1, singlePut: false, partSize: 9 * mib,
            partCount: 8889, lastPartSize: 10_000 * 8 * mib + 1 - 8888 * 9 * mib),
        PlanCase(
            name: "5 TiB", size: 5 * tib, singlePut: false, partSize: 525 * mib, partCount: 9987,
            lastPartSize: 5 * tib - 9986 * 525 * mib),
        PlanCase(
            name: "a preferred size rounded up to a MiB", size: 20 * mib, preferred: 6 * mib + 1, singlePut: false,
            partSize: 7 * mib, partCount: 3, lastPartSize: 6 * mib),
        PlanCase(
            name: "a large preferred size", size: 20 * gib, preferred: 5 * gib, singlePut: false, partSize: 5 * gib,
            partCount: 4, lastPartSize: 5 * gib),
        PlanCase(
            name: "below 5 MiB with no threshold: one short part", size: 3 * mib, threshold: 0, singlePut: false,
            partSize: 8 * mib, partCount: 1, lastPartSize: 3 * mib),
        PlanCase(name: "unknown size", size: nil, singlePut: false, partSize: 8 * mib, partCount: nil),
    ])
    func plans(_ planCase: PlanCase) throws {
        // When
        let plan = try MultipartPlan(
            totalSize: planCase.size, singlePutThreshold: planCase.threshold, preferredPartSize: planCase.preferred)

        // Then: the expected shape
        #expect(plan.isSinglePut == planCase.singlePut)
        #expect(plan.partSize == planCase.partSize)
        #expect(plan.partCount == planCase.partCount)
        #expect(plan.totalSize == planCase.size)

        // And: S3's limits hold, the parts tile the object, the last part has the rest
        guard let count = plan.partCount, let size = planCase.size else { return }
        #expect(count <= 10_000)
        if !plan.isSinglePut {
            #expect(plan.partSize >= MultipartPlan.minimumPartSize && plan.partSize <= MultipartPlan.maximumPartSize)
            #expect(plan.partSize % Self.mib == 0)
        }
        #expect(plan.byteRange(ofPart: 1)?.lowerBound == 0)
        let last = try #require(plan.byteRange(ofPart: count))
        #expect(last.upperBound == size)
        #expect(Int64(last.count) == planCase.lastPartSize)
        #expect(plan.byteRange(ofPart: count + 1) == nil)
        #expect(plan.byteRange(ofPart: 0) == nil)
        if count > 1 {
            #expect(plan.byteRange(ofPart: 2)?.lowerBound == plan.byteRange(ofPart: 1)?.upperBound)
        }
    }

    @Test func overFiveTiBIsRefused() {
        #expect(throws: DownloadError.self) { try MultipartPlan(totalSize: 5 * Self.tib + 1) }
        #expect(throws: DownloadError.self) { try MultipartPlan(totalSize: -1) }
        do {
            _ = try MultipartPlan(totalSize: 6 * Self.tib)
        } catch {
            #expect(error.code == .invalidRequest)
            #expect(error.message.contains("5 TiB"))
        }
    }

    @Test func settingsOutsideS3sLimitsAreRefused() {
        for (threshold, preferred) in [
            (-1, 8 * Self.mib), (5 * Self.gib + 1, 8 * Self.mib), (8 * Self.mib, 5 * Self.mib - 1),
            (8 * Self.mib, 5 * Self.gib + 1),
        ] as [(Int64, Int64)] {
            #expect(throws: DownloadError.self, "\(threshold), \(preferred)") {
                try MultipartPlan(totalSize: 100, singlePutThreshold: threshold, preferredPartSize: preferred)
            }
        }
        // A single PUT up to 5 GiB is allowed
        #expect((try? MultipartPlan(totalSize: 5 * Self.gib, singlePutThreshold: 5 * Self.gib))?.isSinglePut == true)
    }

    @Test func unknownSizeSaysHowLargeAnObjectCanBe() throws {
        let plan = try MultipartPlan(totalSize: nil)
        #expect(plan.largestObjectSize == 10_000 * 8 * Self.mib)
        #expect(plan.byteRange(ofPart: 10_000) == (9_999 * 8 * Self.mib)..<(10_000 * 8 * Self.mib))
        #expect(plan.byteRange(ofPart: 10_001) == nil)
        #expect(plan.part(containing: 10_000 * 8 * Self.mib - 1) == 10_000)
        #expect(plan.part(containing: 10_000 * 8 * Self.mib) == nil)

        // Large parts are capped by the 5 TiB object limit
        let large = try MultipartPlan(totalSize: nil, preferredPartSize: 5 * Self.gib)
        #expect(large.largestObjectSize == 5 * Self.tib)
        #expect(large.byteRange(ofPart: 1024) != nil)
        #expect(large.byteRange(ofPart: 1025) == nil)
    }

    @Test func thePartHoldingAnOffset() throws {
        // Given: 100 MiB in 8 MiB parts
        let plan = try MultipartPlan(totalSize: 100 * Self.mib)

        // Then: part boundaries fall where byteRange says
        #expect(plan.part(containing: 0) == 1)
        #expect(plan.part(containing: 8 * Self.mib - 1) == 1)
        #expect(plan.part(containing: 8 * Self.mib) == 2)
        #expect(plan.part(containing: 100 * Self.mib - 1) == 13)
        #expect(plan.part(containing: 100 * Self.mib) == nil)
        #expect(plan.part(containing: -1) == nil)
        for number in [1, 2, 7, 13] {
            let range = try #require(plan.byteRange(ofPart: number))
            #expect(plan.part(containing: range.lowerBound) == number)
            #expect(plan.part(containing: range.upperBound - 1) == number)
        }

        // And: a single PUT is part 1; an empty object has no byte
        let single = try MultipartPlan(totalSize: 10)
        #expect(single.part(containing: 9) == 1)
        #expect(try MultipartPlan(totalSize: 0).part(containing: 0) == nil)
    }
}
