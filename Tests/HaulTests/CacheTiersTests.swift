import Foundation
import Testing

@testable import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

@Suite("XXH64")
struct XXH64Tests {
    /// The reference's values: the empty, one-letter and three-letter strings, and the
    /// sanity buffer of xxHash's `xxhsum -b` check (bytes from a multiplicative generator),
    /// cross-checked with the system's libxxhash 0.8.
    @Test func matchesTheReferenceVectors() {
        #expect(XXH64.hash("") == 0xEF46_DB37_51D8_E999)
        #expect(XXH64.hash("a") == 0xD24E_C4F1_A98C_6E5B)
        #expect(XXH64.hash("abc") == 0x44BC_2CF5_AD77_0999)
        #expect(XXH64.hash("The quick brown fox jumps over the lazy dog") == 0x0B24_2D36_1FDA_71BC)
        let sanity = Self.sanityBuffer(count: 2367)
        let prime32: UInt64 = 2_654_435_761
        #expect(XXH64.hash(sanity.prefix(1)) == 0xE934_A84A_DB05_2768)
        #expect(XXH64.hash(sanity.prefix(1), seed: prime32) == 0x5014_6076_43A9_B4C3)
        #expect(XXH64.hash(sanity.prefix(14)) == 0x8282_DCC4_994E_35C8)
        #expect(XXH64.hash(sanity.prefix(14), seed: prime32) == 0xC3BD_6BF6_3DEB_6DF0)
        #expect(XXH64.hash(sanity.prefix(101)) == 0xA51E_A210_1B2D_114C)
        #expect(XXH64.hash(sanity.prefix(222)) == 0xB641_AE8C_B691_C174)
        #expect(XXH64.hash(sanity.prefix(222), seed: prime32) == 0x20CB_8AB7_AE10_C14A)
        #expect(XXH64.hash(sanity) == 0xA824_18DD_EC0E_A581)
        #expect(XXH64.hash(sanity, seed: prime32) == 0xA36A_93C1_8052_673A)
    }

    /// A buffer at an odd address hashes like the same bytes anywhere else.
    @Test func unalignedBytesHashAlike() {
        let sanity = Self.sanityBuffer(count: 300)
        let shifted = Data([0]) + sanity
        #expect(XXH64.hash(shifted.dropFirst()) == XXH64.hash(sanity))
    }

    private static func sanityBuffer(count: Int) -> Data {
        var generator: UInt64 = 2_654_435_761
        var bytes = Data(count: count)
        for index in 0..<count {
            bytes[index] = UInt8(truncatingIfNeeded: generator >> 56)
            generator &*= 11_400_714_785_074_694_797
        }
        return bytes
    }
}

@Suite("Memory tier")
struct MemoryTierTests {
    @Test func leastRecentlyUsedGoesFirstAndAHitRefreshes() {
        let entry = Self.entry(bodySize: 100)
        let cost = MemoryTier.cost(of: entry)
        let tier = MemoryTier(costLimit: 3 * cost, entryCostLimit: cost)
        for key in ["a", "b", "c"] { tier.store(entry, for: key) }
        #expect(tier.keysByRecency == ["c", "b", "a"])
        #expect(tier.entry(for: "a") != nil)
        tier.store(entry, for: "d")
        #expect(tier.entry(for: "b") == nil)
        #expect(tier.keysByRecency == ["d", "a", "c"])
        #expect(tier.count == 3 && tier.totalCost == 3 * cost)
        tier.store(entry, for: "c")
        tier.store(entry, for: "e")
        #expect(tier.keysByRecency == ["e", "c", "d"])
    }

    @Test func costLimitHoldsAfterManyStores() {
        let limit = 200_000
        let tier = MemoryTier(costLimit: limit, entryCostLimit: 20_000)
        var random = SplitMix(seed: 7)
        for step in 0..<5_000 {
            let key = "k\(random.next() % 300)"
            switch random.next() % 10 {
            case 0: tier.remove(key)
            case 1: _ = tier.entry(for: key)
            default: tier.store(Self.entry(bodySize: Int(random.next() % 19_000)), for: key)
            }
            if step % 100 == 0 { #expect(tier.totalCost <= limit) }
        }
        #expect(tier.totalCost <= limit)
        let keys = tier.keysByRecency
        #expect(keys.count == tier.count)
        let costs = keys.compactMap { tier.entry(for: $0) }.map(MemoryTier.cost(of:))
        #expect(costs.count == keys.count)
        #expect(costs.reduce(0, +) == tier.totalCost)
    }

    @Test func anEntryOverTheEntryLimitIsRefusedAndTheOlderOneDropped() {
        let tier = MemoryTier(costLimit: 100_000, entryCostLimit: 10_000)
        tier.store(Self.entry(bodySize: 1_000), for: "a")
        tier.store(Self.entry(bodySize: 1_000), for: "b")
        tier.store(Self.entry(bodySize: 20_000), for: "a")
        #expect(tier.entry(for: "a") == nil)
        #expect(tier.entry(for: "b") != nil)
        #expect(tier.count == 1 && tier.totalCost == MemoryTier.cost(of: Self.entry(bodySize: 1_000)))
    }

    @Test func costIsBodyHeadersAndOverhead() {
        var response = Self.entry(bodySize: 10).response
        response.headers = [HeaderField("ETag", "\"x\"")]
        response.varying = [HeaderField("accept", "é")]
        let entry = CachedEntry(response: response, body: Data(repeating: 1, count: 10))
        #expect(MemoryTier.cost(of: entry) == 10 + 4 + 3 + 6 + 2 + 200)
    }

    @Test func removeAndRemoveAllForget() {
        let tier = MemoryTier(costLimit: 1 << 20, entryCostLimit: 1 << 16)
        for index in 0..<10 { tier.store(Self.entry(bodySize: 10 * index), for: "k\(index)") }
        tier.remove("k3")
        #expect(tier.entry(for: "k3") == nil && tier.count == 9)
        tier.removeAll()
        #expect(tier.count == 0 && tier.totalCost == 0 && tier.keysByRecency.isEmpty)
        #expect(tier.entry(for: "k4") == nil)
        tier.store(Self.entry(bodySize: 5), for: "again")
        #expect(tier.entry(for: "again")?.body.count == 5)
    }

    static func entry(bodySize: Int) -> CachedEntry {
        CachedEntry(
            response: CachedResponse(
                url: "https://example.com/", status: 200, headers: [HeaderField("Content-Type", "text/plain")],
                varying: [], requestTime: 1, responseTime: 2, bodySize: bodySize),
            body: Data(repeating: 1, count: bodySize))
    }
}

@Suite("Disk tier")
struct DiskTierTests {
    @Test func anEntryComesBackWhole() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let keys = ["https://example.com/a?q=1", "https://例え.jp/パス", "", String(repeating: "k", count: 5_000)]
            for (index, key) in keys.enumerated() {
                let entry = sampleEntry(key: key, version: index, bodySize: [0, 1, 70_000, 300][index])
                try tier.write(entry, for: key)
                let read = try #require(tier.read(key))
                #expect(read.response == entry.response)
                #expect(read.body == entry.body)
            }
            let name = DiskTier.fileName(for: keys[0])
            #expect(name.count == 22 && name.hasSuffix(".entry"))
            #expect(name == String(format: "%016llx.entry", XXH64.hash(keys[0])))
            #expect(try permissions(directory.appendingPathComponent(name)) == 0o600)
            #expect(try permissions(directory) == 0o700)
            #expect(tier.read("https://example.com/none") == nil)
            #expect(tier.count == keys.count)
        }
    }

    @Test func everyTruncationIsAMissAndIsRemoved() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/t"
            try tier.write(sampleEntry(key: key, version: 1, bodySize: 64), for: key)
            let file = tier.fileURL(for: key)
            let whole = try Data(contentsOf: file)
            for length in 0..<whole.count {
                try whole.prefix(length).write(to: file)
                #expect(tier.read(key) == nil, "truncated to \(length)")
                #expect(!exists(file), "truncated to \(length)")
            }
            try (whole + Data([0])).write(to: file)
            #expect(tier.read(key) == nil && !exists(file))
            try whole.write(to: file)
            #expect(tier.read(key)?.body.count == 64)
        }
    }

    @Test func aFlippedByteAnywhereIsAMiss() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/f"
            try tier.write(sampleEntry(key: key, version: 1, bodySize: 100), for: key)
            let file = tier.fileURL(for: key)
            let whole = try Data(contentsOf: file)
            for offset in 0..<whole.count {
                var damaged = whole
                damaged[offset] ^= 0x10
                try damaged.write(to: file)
                #expect(tier.read(key) == nil, "byte \(offset) flipped")
                #expect(!exists(file), "byte \(offset) flipped")
            }
        }
    }

    @Test func wrongMagicOrVersionIsAMiss() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/v"
            try tier.write(sampleEntry(key: key, version: 1, bodySize: 10), for: key)
            let file = tier.fileURL(for: key)
            let whole = try Data(contentsOf: file)
            for (offset, byte) in [(5, UInt8(ascii: "3")), (5, UInt8(ascii: "0")), (0, UInt8(ascii: "X")), (7, 1)] {
                var other = whole
                other[offset] = byte
                // A valid checksum: only the magic or version is wrong.
                let checksum = XXH64.hash(other.prefix(other.count - 8)).littleEndian
                other.replaceSubrange((other.count - 8)..., with: withUnsafeBytes(of: checksum) { Data($0) })
                try other.write(to: file)
                #expect(tier.read(key) == nil)
                #expect(!exists(file))
            }
        }
    }

    @Test func anEarlierReleasesVersionOneEntryIsServed() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/old"
            let entry = sampleEntry(key: key, version: 3, bodySize: 1_000)
            // What an earlier release wrote: `HAULC1`, the metadata in JSON.
            let metadata = try JSONEncoder().encode(entry.response)
            var file = Data("HAULC1\0\0".utf8)
            for length in [UInt32(key.utf8.count), UInt32(metadata.count)] {
                withUnsafeBytes(of: length.littleEndian) { file.append(contentsOf: $0) }
            }
            withUnsafeBytes(of: UInt64(entry.body.count).littleEndian) { file.append(contentsOf: $0) }
            file += Data(key.utf8) + metadata + entry.body
            withUnsafeBytes(of: XXH64.hash(file).littleEndian) { file.append(contentsOf: $0) }
            try file.write(to: tier.fileURL(for: key))
            let read = try #require(tier.read(key))
            #expect(read.response == entry.response)
            #expect(read.body == entry.body)
            // Written again (after a 304), it is in the current version.
            try tier.update(read.response, for: key)
            #expect(try Data(contentsOf: tier.fileURL(for: key)).prefix(8) == Data("HAULC2\0\0".utf8))
            #expect(tier.read(key)?.body == entry.body)
        }
    }

    @Test func metadataComesBackAndAnyCutIsRefused() throws {
        let responses = [
            sampleEntry(key: "https://example.com/m", version: 1, bodySize: 10).response,
            CachedResponse(
                url: "", status: 200, headers: [], varying: [], requestTime: -1.5, responseTime: .infinity,
                bodySize: 0),
            CachedResponse(
                url: "https://例え.jp/パス", status: 203, headers: [HeaderField("X-Ünïcode", "värde"), HeaderField("", "")],
                varying: [HeaderField("accept", "*/*")], requestTime: 0, responseTime: 1e9, bodySize: 1 << 40),
        ]
        for response in responses {
            let bytes = EntryFormat.Metadata.encode(response)
            let decoded = bytes.withUnsafeBytes { EntryFormat.Metadata.decode($0) }
            #expect(decoded == response)
            for length in 0..<bytes.count {
                let cut = bytes.prefix(length).withUnsafeBytes { EntryFormat.Metadata.decode($0) }
                #expect(cut == nil, "cut to \(length)")
            }
            let longer = (bytes + [0]).withUnsafeBytes { EntryFormat.Metadata.decode($0) }
            #expect(longer == nil)
        }
    }

    @Test func anotherKeysFileUnderTheNameIsAMiss() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            try tier.write(sampleEntry(key: "a", version: 1, bodySize: 10), for: "a")
            try FileManager.default.copyItem(at: tier.fileURL(for: "a"), to: tier.fileURL(for: "b"))
            #expect(tier.read("b") == nil)
            #expect(tier.read("a")?.response.url == "a")
        }
    }

    @Test func aKilledWritersTemporaryFileIsNeverServedAndSweptOnceOld() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/k"
            let bytes = try EntryFormat.encode(sampleEntry(key: key, version: 1, bodySize: 500), key: key)
            defer { bytes.deallocate() }
            let whole = Data(UnsafeRawBufferPointer(bytes))
            // A writer killed before its rename, and one killed halfway through its write.
            let finished = directory.appendingPathComponent(".tmp-4242-9f3a")
            let torn = directory.appendingPathComponent(".tmp-4243-77c1")
            try whole.write(to: finished)
            try whole.prefix(100).write(to: torn)
            #expect(tier.read(key) == nil)
            var report = tier.sweep()
            #expect(exists(finished) && exists(torn))
            #expect(report.entries == 0 && report.bytes == 0)
            try setModificationTime(finished, secondsAgo: 120)
            try setModificationTime(torn, secondsAgo: 30)
            report = tier.sweep()
            #expect(!exists(finished))
            #expect(exists(torn))
            try setModificationTime(torn, secondsAgo: 61)
            tier.sweep()
            #expect(!exists(torn))
            #expect(tier.read(key) == nil)
        }
    }

    @Test func theSizeLimitHoldsOverTenThousandEntries() throws {
        try withDirectory { directory in
            let limit: Int64 = 4_000_000
            let tier = try DiskTier(directory: directory, sizeLimit: limit)
            for index in 0..<10_000 {
                let key = "https://example.com/\(index)"
                try tier.write(sampleEntry(key: key, version: index, bodySize: 1_024 + (index * 617) % 3_073), for: key)
            }
            #expect(try entryBytes(in: directory) <= limit)
            let report = tier.sweep()
            let bytes = try entryBytes(in: directory)
            #expect(bytes <= limit)
            #expect(report.bytes == bytes && tier.totalBytes == bytes)
            #expect(report.entries == (try entryNames(in: directory).count))
            #expect(report.entries < 10_000)

            // Give the survivors a known order of use: by key, oldest first. Then read the
            // 50 oldest, which makes them the most recently used.
            let survivors = (0..<10_000).filter { exists(tier.fileURL(for: "https://example.com/\($0)")) }
            for (position, index) in survivors.enumerated() {
                try setModificationTime(
                    tier.fileURL(for: "https://example.com/\(index)"), secondsAgo: 1_000_000 - Double(position))
            }
            let read = survivors.prefix(50)
            for index in read { #expect(tier.read("https://example.com/\(index)") != nil) }

            // A smaller limit on the same directory: the least recently used go.
            let smaller = try DiskTier(directory: directory, sizeLimit: bytes / 2, trimRatio: 0.7)
            let trimmed = smaller.sweep()
            #expect(trimmed.removed > 0)
            #expect(try entryBytes(in: directory) <= Int64(Double(bytes / 2) * 0.7))
            for index in read { #expect(exists(tier.fileURL(for: "https://example.com/\(index)"))) }
            let present = survivors.dropFirst(50).map { exists(tier.fileURL(for: "https://example.com/\($0)")) }
            // Among the others, the removed ones are exactly the oldest.
            let firstKept = present.firstIndex(of: true) ?? present.count
            #expect(firstKept == trimmed.removed)
            #expect(present[firstKept...].allSatisfy { $0 })
        }
    }

    @Test func aWriteCountsTheDirectoryFirstAndTheInitDoesNot() throws {
        try withDirectory { directory in
            let first = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            for index in 0..<5 { try first.write(sampleEntry(key: "\(index)", version: 0, bodySize: 100), for: "\(index)") }
            let second = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            #expect(second.totalBytes == 0 && second.count == 0)
            try second.write(sampleEntry(key: "5", version: 0, bodySize: 100), for: "5")
            #expect(second.count == 6)
            #expect(second.totalBytes == (try entryBytes(in: directory)))
            second.remove("0")
            #expect(second.count == 5)
            #expect(second.totalBytes == (try entryBytes(in: directory)))
        }
    }

    @Test func twoTiersShareADirectory() throws {
        try withDirectory { directory in
            let writer = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let reader = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/shared"
            let entry = sampleEntry(key: key, version: 3, bodySize: 200_000)
            try writer.write(entry, for: key)
            let read = try #require(reader.read(key))
            #expect(read.body == entry.body && read.response == entry.response)
            let newer = sampleEntry(key: key, version: 4, bodySize: 1_000)
            try writer.write(newer, for: key)
            #expect(reader.read(key)?.body == newer.body)
            reader.remove(key)
            #expect(writer.read(key) == nil)
        }
    }

    @Test func anUpdateKeepsTheBodyAndAHitMarksUse() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            let key = "https://example.com/u"
            let entry = sampleEntry(key: key, version: 1, bodySize: 5_000)
            try tier.write(entry, for: key)
            var response = entry.response
            response.headers.append(HeaderField("Age", "12"))
            response.responseTime += 60
            try tier.update(response, for: key)
            let read = try #require(tier.read(key))
            #expect(read.response == response && read.body == entry.body)
            try tier.update(response, for: "https://example.com/none")
            #expect(tier.read("https://example.com/none") == nil)

            let file = tier.fileURL(for: key)
            try setModificationTime(file, secondsAgo: 3_600)
            let before = try modificationDate(file)
            #expect(tier.read(key) != nil)
            #expect(try modificationDate(file) > before.addingTimeInterval(3_000))
        }
    }

    @Test func removeAllLeavesOtherFilesAlone() throws {
        try withDirectory { directory in
            let tier = try DiskTier(directory: directory, sizeLimit: 1 << 30)
            for index in 0..<20 { try tier.write(sampleEntry(key: "\(index)", version: 0, bodySize: 10), for: "\(index)") }
            let notes = directory.appendingPathComponent("notes.txt")
            let upper = directory.appendingPathComponent("0123456789ABCDEF.entry")
            let subdirectory = directory.appendingPathComponent("0123456789abcdef.entry")
            let young = directory.appendingPathComponent(".tmp-1-2")
            try Data("x".utf8).write(to: notes)
            try Data("x".utf8).write(to: upper)
            try Data("x".utf8).write(to: young)
            try FileManager.default.createDirectory(at: subdirectory, withIntermediateDirectories: false)
            #expect(tier.sweep().entries == 20)
            tier.removeAll()
            #expect(Set(try entryNames(in: directory)) == [upper.lastPathComponent, subdirectory.lastPathComponent])
            #expect(exists(notes) && exists(upper) && exists(subdirectory) && exists(young))
            #expect(tier.count == 0 && tier.totalBytes == 0)
            #expect(tier.read("3") == nil)
        }
    }

    /// Four threads, two tiers on one directory (with a limit that makes them trim),
    /// 500 operations each on 20 keys: every body read is exactly one that was written for
    /// its key (each body says its key and version, and the rest follows from them).
    @Test func concurrentWritersAndReadersSeeOnlyWholeBodies() throws {
        try withDirectory { directory in
            let tiers = [
                try DiskTier(directory: directory, sizeLimit: 40_000),
                try DiskTier(directory: directory, sizeLimit: 40_000),
            ]
            let keys = (0..<20).map { "https://example.com/c/\($0)" }
            let plans = (0..<4).map { thread in
                var random = SplitMix(seed: UInt64(thread + 1))
                return (0..<500).map { _ in (key: Int(random.next() % 20), action: random.next() % 20) }
            }
            var written: [Set<Int>] = Array(repeating: [], count: 20)
            for (thread, plan) in plans.enumerated() {
                for (step, operation) in plan.enumerated() where operation.action < 8 {
                    written[operation.key].insert(thread * 1_000 + step)
                }
            }
            let outcome = Outcome()
            let group = DispatchGroup()
            for (thread, plan) in plans.enumerated() {
                group.enter()
                let tier = tiers[thread % 2]
                let finished = Thread {
                    defer { group.leave() }
                    for (step, operation) in plan.enumerated() {
                        let key = keys[operation.key]
                        switch operation.action {
                        case 0..<8:
                            let version = thread * 1_000 + step
                            do {
                                try tier.write(
                                    sampleEntry(key: key, version: version, bodySize: 500 + version % 3_000), for: key)
                            } catch {
                                outcome.fail("write: \(error)")
                            }
                        case 8..<17:
                            guard let entry = tier.read(key) else { continue }
                            outcome.read(entry, for: operation.key, key: key)
                        case 17:
                            try? tier.update(
                                CachedResponse(
                                    url: key, status: 200, headers: [], varying: [], requestTime: 0, responseTime: 0,
                                    bodySize: 0),
                                for: key)
                        case 18:
                            tier.remove(key)
                        default:
                            tier.sweep()
                        }
                    }
                }
                finished.start()
            }
            group.wait()
            let (failures, reads) = outcome.result
            #expect(failures.isEmpty, "\(failures.prefix(5))")
            for (keyIndex, versions) in reads.enumerated() {
                #expect(versions.isSubset(of: written[keyIndex]))
            }
            #expect(reads.map(\.count).reduce(0, +) > 0)
            tiers[0].sweep()
            #expect(try entryBytes(in: directory) <= 40_000)
        }
    }
}

/// What the concurrent test's threads saw.
private final class Outcome: @unchecked Sendable {
    private let lock = NSLock()
    private var failures: [String] = []
    private var reads: [Set<Int>] = Array(repeating: [], count: 20)

    func fail(_ message: String) {
        lock.withLock { failures.append(message) }
    }

    /// Checks a body read for `key`: it must say that key, and be exactly the body of the
    /// version it says.
    func read(_ entry: CachedEntry, for keyIndex: Int, key: String) {
        // Split as bytes: a "|" followed by a combining mark is no Character "|".
        let prefix = entry.body.prefix(40)
        let fields = prefix.split(separator: UInt8(ascii: "|"), maxSplits: 2, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        guard fields.count == 3, fields[0] == key.split(separator: "/").last.map(String.init),
            let version = Int(fields[1])
        else {
            fail("unreadable body for \(key): \(Array(prefix))")
            return
        }
        guard entry.body == sampleBody(key: key, version: version, bodySize: 500 + version % 3_000) else {
            fail("body for \(key), version \(version), not as written")
            return
        }
        guard entry.response.url == key else {
            fail("metadata of \(entry.response.url) for \(key)")
            return
        }
        lock.withLock { _ = reads[keyIndex].insert(version) }
    }

    var result: ([String], [Set<Int>]) { lock.withLock { (failures, reads) } }
}

/// A small seeded generator (SplitMix64), so that the tests' mixes repeat.
private struct SplitMix {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}

/// An entry for `key` whose body says its key's last path component and `version`, then
/// bytes that follow from both.
private func sampleEntry(key: String, version: Int, bodySize: Int) -> CachedEntry {
    let body = sampleBody(key: key, version: version, bodySize: bodySize)
    let response = CachedResponse(
        url: key, status: 200,
        headers: [
            HeaderField("Content-Type", "application/octet-stream"), HeaderField("ETag", "\"\(version)\""),
            HeaderField("Cache-Control", "max-age=60"),
        ],
        varying: [HeaderField("accept-encoding", "gzip")], requestTime: 1_700_000_000.5 + Double(version),
        responseTime: 1_700_000_000.75 + Double(version), bodySize: body.count)
    return CachedEntry(response: response, body: body)
}

private func sampleBody(key: String, version: Int, bodySize: Int) -> Data {
    guard bodySize > 0 else { return Data() }
    var body = Data("\(key.split(separator: "/").last ?? "")|\(version)|".utf8)
    var random = SplitMix(seed: UInt64(version) &* 31 &+ UInt64(truncatingIfNeeded: XXH64.hash(key)))
    while body.count < bodySize { body.append(UInt8(truncatingIfNeeded: random.next())) }
    return body.prefix(bodySize)
}

/// Runs `body` with a new temporary directory's URL (not yet created), then removes it.
private func withDirectory(_ body: (URL) throws -> Void) throws {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("haul-cache-tiers-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    try body(directory)
}

private func exists(_ url: URL) -> Bool {
    FileManager.default.fileExists(atPath: url.path)
}

private func entryNames(in directory: URL) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".entry") }
}

/// The sizes of the `.entry` files in `directory`, added up.
private func entryBytes(in directory: URL) throws -> Int64 {
    var total: Int64 = 0
    for name in try entryNames(in: directory) {
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
        if attributes[.type] as? FileAttributeType == .typeRegular {
            total += (attributes[.size] as? NSNumber)?.int64Value ?? 0
        }
    }
    return total
}

private func permissions(_ url: URL) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: url.path)
    return ((attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1) & 0o777
}

private func modificationDate(_ url: URL) throws -> Date {
    try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.modificationDate] as? Date)
}

/// Sets the file's access and modification times to `secondsAgo` before now, with utimes.
private func setModificationTime(_ url: URL, secondsAgo: Double) throws {
    let time = Date().timeIntervalSince1970 - secondsAgo
    let seconds = time.rounded(.down)
    let value = timeval(tv_sec: time_t(seconds), tv_usec: .init((time - seconds) * 1_000_000))
    let result = [value, value].withUnsafeBufferPointer { utimes(url.path, $0.baseAddress) }
    #expect(result == 0)
}
