import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// The seeding of a delta download's partial, on files and no server: seeds read in pieces
/// with blocks across the pieces' edges, several seeds, and what is recorded beside it.
@Suite("zsync: seeding a partial")
struct DeltaSeederTests {
    /// A target made of an old version's pieces, changed in places, a second seed holding
    /// what the first lacks, and a directory to build it in.
    struct Setup {
        let directory: URL
        let target: [UInt8]
        let control: ZsyncControl
        let paths: PartialPaths

        init(_ target: [UInt8]) throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("seeder-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            self.target = target
            control = target.withUnsafeBytes {
                ZsyncControl.describing(
                    $0, blockSize: 1024, sequenceMatches: 2, rsumBytes: 3, checksumBytes: 5, filename: "t.bin",
                    modificationTime: nil, urls: ["t.bin"])
            }
            paths = try #require(
                try PartialPaths(destination: .file(directory.appendingPathComponent("t.bin")), url: URL(string: "http://h/t.bin")!))
        }

        func seed(_ name: String, _ bytes: [UInt8]) throws -> URL {
            let url = directory.appendingPathComponent(name)
            try Data(bytes).write(to: url)
            return url
        }

        /// The partial with its missing ranges filled from the target: the target, when the
        /// seeding wrote every block it claims to have.
        func rebuilt() throws -> [UInt8] {
            var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: paths.partial)))
            let metadata = try #require(PartialMetadata.load(from: paths.metadata))
            #expect(metadata.validator == nil && metadata.totalBytes == Int64(target.count))
            for range in try #require(metadata.remaining) {
                bytes.replaceSubrange(Int(range[0])..<Int(range[1]), with: target[Int(range[0])..<Int(range[1])])
            }
            return bytes
        }

        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    @Test(arguments: [4096, 5000, 1 << 20])
    func seedsReadInPiecesGiveEveryBlockTheyHold(pieceSize: Int) async throws {
        // Given an old version, and a new one with an insertion, a change and a new end
        let old = FaultServer.randomBytes(count: 300_000, seed: 81)
        var target = Array(old[..<40_000]) + FaultServer.randomBytes(count: 300, seed: 82) + Array(old[40_000...])
        target.replaceSubrange(150_000..<152_500, with: FaultServer.randomBytes(count: 2500, seed: 83))
        target += FaultServer.randomBytes(count: 777, seed: 84)
        let setup = try Setup(target)
        defer { setup.remove() }
        let seed = try setup.seed("old.bin", old)
        var seeder = DeltaSeeder(control: setup.control, threadPool: TestResources.pool, parallelism: 4)
        seeder.pieceSize = pieceSize

        // When the partial is seeded, in pieces of `pieceSize`
        let report = try #require(try await seeder.prepare(seeds: [seed], paths: setup.paths, url: URL(string: "http://h/t.bin")!))

        // Then what it wrote is the target's, and what it misses is what changed: the same
        // as one scan of the whole seed finds
        #expect(try setup.rebuilt() == target ? true : false)
        var whole = BlockMatcher(setup.control)
        old.withUnsafeBytes { _ = whole.scan($0) }
        let missing = whole.missingRanges().reduce(Int64(0)) { $0 + $1.upperBound - $1.lowerBound }
        #expect(report.missingBytes == missing)
        #expect(report.reusedBytes + report.missingBytes == Int64(target.count))
        #expect(report.scannedBytes == Int64(old.count))

        // And a second run finds the partial recorded: nothing is scanned again
        #expect(try await seeder.prepare(seeds: [seed], paths: setup.paths, url: URL(string: "http://h/t.bin")!) == nil)
    }

    /// A seed that ends as the target does gives the target's short last block, padded with
    /// zeros as the control file pads it, whatever an earlier piece left in the memory
    /// past the seed's end (the last piece is read into a buffer that held one before it).
    @Test(arguments: [4096, 5000, 1 << 20])
    func theShortLastBlockIsFoundWhateverTheBufferHeldBefore(pieceSize: Int) async throws {
        // Given a target whose length is not a multiple of the block size, and itself as a seed
        let target = FaultServer.randomBytes(count: 300_500, seed: 85)
        let setup = try Setup(target)
        defer { setup.remove() }
        let seed = try setup.seed("old.bin", target)
        var seeder = DeltaSeeder(control: setup.control, threadPool: TestResources.pool, parallelism: 4)
        seeder.pieceSize = pieceSize

        // When the partial is seeded, in pieces of `pieceSize`
        let report = try #require(try await seeder.prepare(seeds: [seed], paths: setup.paths, url: URL(string: "http://h/t.bin")!))

        // Then every block is found, the last one too: nothing is left to fetch
        #expect(report.missingBytes == 0, "\(report)")
        #expect(try setup.rebuilt() == target ? true : false)
    }

    /// A journal row keeps a delta download whole: the control file (its block table and
    /// digests, read back as they were), its address and the seeds; a shared queue's row
    /// leaves the seeds out.
    @Test func aJournalRowKeepsTheControlFileAndTheSeeds() throws {
        let (_, new) = DeltaDownloadTests.versions()
        let control = DeltaDownloadTests.control(of: new, urls: ["t.bin", "https://mirror.example/t.bin"])
        let delta = try DeltaSource(
            controlFile: control.encoded(), at: URL(string: "https://example.com/pub/t.bin.zsync")!,
            seeds: [URL(fileURLWithPath: "/srv/old/t.bin"), URL(fileURLWithPath: "/srv/other t.bin")])
        let request = DownloadRequest(
            delta: delta, destination: .file(FileManager.default.temporaryDirectory.appendingPathComponent("t.bin")))
        let record = try JobRecord.make(for: request)
        let restored = try #require(try record.request().delta)
        #expect(restored.controlURL == delta.controlURL)
        #expect(restored.seeds == delta.seeds)
        #expect(restored.targetURLs == delta.targetURLs)
        #expect(restored.checksum == delta.checksum)
        #expect(restored.control.encoded() == control.encoded() ? true : false)

        let queued = try #require(JobRecord.decode(delta: JobRecord.encode(delta: delta, seeds: false)))
        #expect(queued.seeds.isEmpty)
        #expect(queued.control.encoded() == control.encoded() ? true : false)
        #expect(JobRecord.decode(delta: "{\"controlURL\": \"x\", \"control\": \"not a control file\"}") == nil)
    }

    @Test func aSecondSeedGivesWhatTheFirstLacksAndAnUnrecordedPartialIsASeed() async throws {
        // Given a target whose first half is in one seed and second half in a partial left
        // without a record (a download stopped before this one)
        let target = FaultServer.randomBytes(count: 200_000, seed: 85)
        let setup = try Setup(target)
        defer { setup.remove() }
        let first = try setup.seed("first.bin", Array(target[..<100_000]))
        try Data(Array(repeating: 0, count: 100_000) + target[100_000...]).write(to: URL(fileURLWithPath: setup.paths.partial))
        var seeder = DeltaSeeder(control: setup.control, threadPool: TestResources.pool, parallelism: 2)
        seeder.pieceSize = 30_000

        // When the partial is seeded
        let report = try #require(try await seeder.prepare(seeds: [first], paths: setup.paths, url: URL(string: "http://h/t.bin")!))

        // Then both gave their blocks (the one block across the halves is missing), and the
        // old partial, moved aside to be scanned, is gone
        #expect(report.missingBytes <= 2048, "\(report)")
        #expect(try setup.rebuilt() == target ? true : false)
        #expect(!FileManager.default.fileExists(atPath: setup.paths.seedAside))
    }
}
