import Foundation
import Testing

@testable import Haul

/// ``UploadResumption``: which record a resumed upload trusts, which parts it keeps, which
/// uploads it aborts and which parts it sends, without a store.
struct UploadResumptionTests {
    static let location = try! S3Location(bucket: "bkt", key: "k/file.bin")
    static let mib: Int64 = 1 << 20
    /// 20 MiB in 8 MiB parts: 8, 8 and 4 MiB.
    static let plan = try! MultipartPlan(totalSize: 20 * mib)

    static func record(
        parts: [(Int, String)], size: Int64 = 20 * mib, key: String = "k/file.bin", validator: String? = "\"v1\""
    ) -> ObjectUpload.UploadRecord {
        ObjectUpload.UploadRecord(
            bucket: "bkt", key: key, uploadID: "u1", size: size, partSize: 8 * mib,
            parts: parts.map { .init(number: $0.0, etag: $0.1, sha256: nil) }, validator: validator)
    }

    static func start(_ stored: ObjectUpload.UploadRecord?, validator: String? = "\"v1\"") -> UploadResumption.Start {
        UploadResumption.start(
            stored: stored, location: location, size: 20 * mib, partSize: 8 * mib, validator: validator)
    }

    @Test func aRecordIsKeptOnlyForTheSameObjectSizeAndPartSize() {
        let fits = Self.record(parts: [(1, "a")])
        #expect(Self.start(nil) == .fresh)
        #expect(Self.start(fits) == .verify(fits))
        for (size, partSize) in [(21 * Self.mib, 8 * Self.mib), (20 * Self.mib, 16 * Self.mib)] {
            #expect(
                UploadResumption.start(
                    stored: fits, location: Self.location, size: size, partSize: partSize, validator: "\"v1\"")
                    == .abandon(fits))
        }
        let other = Self.record(parts: [], key: "k/other.bin")
        #expect(Self.start(other) == .abandon(other))
    }

    @Test(arguments: [
        // the record's validator, this content's → kept
        ("\"v1\"", "\"v1\"", true),
        ("\"v1\"", "\"v2\"", false),  // another version of the content
        ("\"v1\"", nil, false),  // the content no longer says which version it is
        ("", nil, false),  // parts of a content without a validator: never trusted again
        ("", "\"v1\"", false),
        (nil, "\"v1\"", true),  // written by the release that uploaded only after verifying
        (nil, nil, true),
    ] as [(String?, String?, Bool)])
    func partsAreKeptOnlyForTheVersionOfTheContentTheyWereReadFrom(recorded: String?, current: String?, kept: Bool) {
        let stored = Self.record(parts: [(1, "a")], validator: recorded)
        let expected: UploadResumption.Start = kept ? .verify(stored) : .abandon(stored)
        #expect(Self.start(stored, validator: current) == expected)
    }

    @Test func aRecordOfTheReleaseBeforeValidatorsStillDecodes() throws {
        let json = #"{"bucket":"bkt","key":"k/file.bin","uploadID":"u1","size":20971520,"partSize":8388608,"parts":[{"number":1,"etag":"a"}]}"#
        let record = try JSONDecoder().decode(ObjectUpload.UploadRecord.self, from: Data(json.utf8))
        #expect(record.validator == nil)
        #expect(Self.start(record, validator: "\"v9\"") == .verify(record))
    }

    @Test(arguments: [
        // listed by the store (number, etag, size in MiB) → parts kept
        ([(1, "a", 8), (2, "b", 8)], [1, 2]),
        ([(1, "a", 8)], [1]),  // part 2 never reached the store
        ([(1, "a", 8), (2, "other", 8)], [1]),  // the store holds another part 2
        ([(1, "a", 8), (2, "b", 7)], [1]),  // a part 2 of the wrong size
        ([(2, "old", 8), (1, "a", 8), (2, "b", 8)], [1, 2]),  // part 2 listed twice (sent again)
        ([], []),
    ])
    func onlyPartsTheStoreHoldsAsRecordedAreKept(listed: [(Int, String, Int)], kept: [Int]) {
        let record = Self.record(parts: [(1, "a"), (2, "b")])
        let parts = listed.map { S3UploadedPart(number: $0.0, etag: $0.1, size: Int64($0.2) * Self.mib, checksumSHA256: nil) }
        let reconciled = UploadResumption.reconcile(record, listed: parts, plan: Self.plan)
        #expect(reconciled.parts.map(\.number) == kept)
        #expect(reconciled.uploadID == "u1")
    }

    @Test func theLastPartIsCheckedAgainstItsOwnSize() {
        let record = Self.record(parts: [(3, "c")])
        let right = S3UploadedPart(number: 3, etag: "c", size: 4 * Self.mib, checksumSHA256: nil)
        let wrong = S3UploadedPart(number: 3, etag: "c", size: 8 * Self.mib, checksumSHA256: nil)
        #expect(UploadResumption.reconcile(record, listed: [right], plan: Self.plan).parts.count == 1)
        #expect(UploadResumption.reconcile(record, listed: [wrong], plan: Self.plan).parts.isEmpty)
    }

    @Test func everyOtherUnfinishedUploadToTheKeyIsAborted() {
        let pending = ["u0", "u1", "u2"].map { S3PendingUpload(key: "k/file.bin", uploadID: $0, initiated: nil) }
        #expect(UploadResumption.stale(pending, keeping: "u1") == ["u0", "u2"])
        #expect(UploadResumption.stale(pending, keeping: nil) == ["u0", "u1", "u2"])
        #expect(UploadResumption.stale([], keeping: "u1").isEmpty)
    }

    @Test func theMissingPartsAreSentInOrder() {
        #expect(UploadResumption.missing(Self.record(parts: []), plan: Self.plan) == [1, 2, 3])
        #expect(UploadResumption.missing(Self.record(parts: [(2, "b")]), plan: Self.plan) == [1, 3])
        #expect(UploadResumption.missing(Self.record(parts: [(3, "c"), (1, "a"), (2, "b")]), plan: Self.plan).isEmpty)
    }
}
