import Foundation
import Haul
import HaulTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `Syncer` against the fault server: conditional manifest fetches, plans, verification,
/// deletion, safety and the atomic switch.
@Suite("content sync", .timeLimit(.minutes(4)))
struct SyncTests {
    static let tree: [String: [UInt8]] = [
        "a.txt": SyncFixture.content("a"),
        "docs/b.txt": SyncFixture.content("b", size: 100_000),
        "docs/deep/c.bin": SyncFixture.content("c", size: 70_000),
        "empty": [],
    ]

    @Test func firstSyncDownloadsEverythingAndAnUnchangedManifestCostsOne304() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)

            // When the directory is synced for the first time
            let first = try await f.sync()

            // Then every file is there, verified, with the manifest's mode and mtime; the
            // empty file needed no request
            #expect(first.matchesManifest)
            #expect(first.downloaded.files == 4)
            #expect(first.downloaded.bytes == Int64(4096 + 100_000 + 70_000))
            for (path, bytes) in Self.tree { #expect(sha256(f.contents(path)) == sha256(bytes), "\(path)") }
            #expect(f.tree() == ["a.txt", "docs", "docs/b.txt", "docs/deep", "docs/deep/c.bin", "empty"])
            let attributes = try FileManager.default.attributesOfItem(atPath: f.directory.appendingPathComponent("a.txt").path)
            #expect((attributes[.posixPermissions] as? Int) == 0o640)
            #expect((attributes[.modificationDate] as? Date) == Date(timeIntervalSince1970: 1_700_000_000))
            #expect(f.fileRequests().count == 3)

            // When it is synced again with nothing changed
            f.server.resetStatistics()
            let second = try await f.sync()

            // Then the only request is the conditional manifest fetch, answered 304
            let requests = f.server.requests()
            #expect(requests.count == 1)
            #expect(requests.first?.path == f.manifestPath)
            #expect(requests.first?.header("If-None-Match") == f.server.etag(forFile: "content/manifest.json"))
            #expect(second.plan.manifestNotModified)
            #expect(second.matchesManifest)
            #expect(second.unchanged.files == 4)
            #expect(second.downloaded.files == 0 && second.updated.files == 0)
        }
    }

    @Test func changingOneFileOnTheServerDownloadsOnlyThatFile() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            var changed = Self.tree
            changed["docs/b.txt"] = SyncFixture.content("B2", size: 100_000)
            try f.publish(changed, version: "v2")
            f.server.resetStatistics()

            let summary = try await f.sync()

            #expect(summary.matchesManifest)
            #expect(summary.updated.files == 1)
            #expect(summary.unchanged.files == 3)
            #expect(f.fileRequests().map(\.path) == ["/files/content/docs/b.txt"])
            #expect(sha256(f.contents("docs/b.txt")) == sha256(changed["docs/b.txt"]))
        }
    }

    @Test func aCorruptedLocalFileIsDetectedAndReplaced() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            // Same size, different bytes (and a new mtime, as any write gives).
            let path = f.directory.appendingPathComponent("docs/deep/c.bin").path
            var corrupted = Self.tree["docs/deep/c.bin"]!
            corrupted[1000] ^= 0xFF
            try Data(corrupted).write(to: URL(fileURLWithPath: path))
            f.server.resetStatistics()

            let summary = try await f.sync()

            #expect(summary.plan.manifestNotModified)
            #expect(summary.plan.changes.map(\.path) == ["docs/deep/c.bin"])
            #expect(summary.updated.files == 1)
            #expect(sha256(f.contents("docs/deep/c.bin")) == sha256(Self.tree["docs/deep/c.bin"]))
            #expect(f.fileRequests().map(\.path) == ["/files/content/docs/deep/c.bin"])
        }
    }

    @Test func theJournalCachesDigestsSoAnUnchangedTreeIsNotReadAgain() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            // Corrupt a file but keep its size and mtime (and inode): only hashing can tell.
            let path = f.directory.appendingPathComponent("a.txt").path
            let before = try FileManager.default.attributesOfItem(atPath: path)
            let handle = try #require(FileHandle(forUpdatingAtPath: path))
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data("X".utf8))
            try handle.close()
            try FileManager.default.setAttributes([.modificationDate: before[.modificationDate]!], ofItemAtPath: path)

            // The cached digest is trusted...
            let cached = try await f.sync()
            #expect(cached.plan.changes.isEmpty)
            // ...until --verify hashes everything again.
            let verified = try await f.sync(SyncOptions(verifyContents: true))
            #expect(verified.plan.changes.map(\.path) == ["a.txt"])
            #expect(sha256(f.contents("a.txt")) == sha256(Self.tree["a.txt"]))
        }
    }

    @Test func extraneousFilesAreKeptUnlessDeletionIsAsked() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            let extra = f.directory.appendingPathComponent("old/stale.txt")
            try FileManager.default.createDirectory(at: extra.deletingLastPathComponent(), withIntermediateDirectories: true)
            try Data("stale".utf8).write(to: extra)

            let kept = try await f.sync()
            #expect(kept.plan.extraneousKept == ["old/stale.txt"])
            #expect(kept.deleted.files == 0)
            #expect(FileManager.default.fileExists(atPath: extra.path))

            let deleted = try await f.sync(SyncOptions(deleteExtraneous: true))
            #expect(deleted.deleted.files == 1)
            #expect(deleted.deleted.bytes == 5)
            #expect(deleted.matchesManifest)
            #expect(f.tree() == ["a.txt", "docs", "docs/b.txt", "docs/deep", "docs/deep/c.bin", "empty"])
        }
    }

    @Test func aDryRunChangesNothing() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            let summary = try await f.sync(SyncOptions(dryRun: true))
            #expect(summary.plan.count(.download) == 4)
            #expect(!summary.matchesManifest)
            #expect(f.fileRequests().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: f.directory.path))
        }
    }

    @Test func stagesAreReportedInOrder() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            let stages = Locked<[SyncStage]>([])
            _ = try await f.sync(SyncOptions(atomic: true)) { event in
                if case .stage(let stage) = event { stages.withLock { $0.append(stage) } }
            }
            #expect(stages.withLock { $0 } == [.fetchManifest, .plan, .transfer, .verify, .commit])
        }
    }

    // MARK: - Safety

    @Test func aSymbolicLinkLeadingOutOfTheDirectoryIsRefused() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            let outside = f.base.directory.appendingPathComponent("outside")
            try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(at: f.directory, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                at: f.directory.appendingPathComponent("docs"), withDestinationURL: outside)

            let error = await #expect(throws: DownloadError.self) { try await f.sync(SyncOptions(deleteExtraneous: true)) }

            #expect(error?.code == .unsafePath)
            #expect(error?.message.contains("outside the directory") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path).isEmpty)
            #expect(f.fileRequests().isEmpty)
        }
    }

    @Test func aLinkWhereAFileBelongsIsReplacedWithoutTouchingItsTarget() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            let secret = f.base.directory.appendingPathComponent("secret")
            try Data("do not touch".utf8).write(to: secret)
            try FileManager.default.createDirectory(at: f.directory, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                at: f.directory.appendingPathComponent("a.txt"), withDestinationURL: secret)

            let summary = try await f.sync()

            #expect(summary.matchesManifest)
            #expect(summary.updated.files == 1)
            #expect(sha256(f.contents("a.txt")) == sha256(Self.tree["a.txt"]))
            #expect(try String(contentsOf: secret, encoding: .utf8) == "do not touch")
            let kind = try FileManager.default.attributesOfItem(atPath: f.directory.appendingPathComponent("a.txt").path)[.type]
            #expect(kind as? FileAttributeType == .typeRegular)
        }
    }

    @Test func deletingAnExtraneousLinkRemovesTheLinkNotItsTarget() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            let outside = f.base.directory.appendingPathComponent("keep-me")
            try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
            try Data("precious".utf8).write(to: outside.appendingPathComponent("data"))
            try FileManager.default.createSymbolicLink(
                at: f.directory.appendingPathComponent("shortcut"), withDestinationURL: outside)

            let summary = try await f.sync(SyncOptions(deleteExtraneous: true))

            #expect(summary.matchesManifest)
            #expect(summary.deleted.files == 1)
            #expect(!f.tree().contains("shortcut"))
            #expect(try String(contentsOf: outside.appendingPathComponent("data"), encoding: .utf8) == "precious")
        }
    }

    @Test(arguments: [
        ("traversal", #"{"version":"1","files":[{"path":"../escape","url":"a.txt","size":1}]}"#, "'..'"),
        ("absolute", #"{"version":"1","files":[{"path":"/etc/passwd","url":"a.txt","size":1}]}"#, "absolute"),
        (
            "duplicate",
            #"{"version":"1","files":[{"path":"a","url":"a.txt","size":1},{"path":"a","url":"b.txt","size":1}]}"#,
            "duplicate"
        ),
        ("not a manifest", "<html>oops</html>", "invalid manifest"),
    ])
    func hostileManifestsAreRejectedBeforeAnyChange(label: String, manifest: String, reason: String) async throws {
        try await SyncFixture.with { f in
            f.server.setFile("content/a.txt", [1])
            f.publishRaw(manifest)

            let error = await #expect(throws: DownloadError.self) { try await f.sync() }

            #expect(error?.code == .invalidManifest, "\(label)")
            #expect(error?.message.contains(reason) == true, "\(label): \(error?.message ?? "")")
            #expect(f.fileRequests().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: f.base.directory.appendingPathComponent("escape").path))
        }
    }

    @Test func aWrongHashOrSizeServedFailsAndKeepsTheOldFile() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree)
            _ = try await f.sync()
            // The manifest promises new content that the server does not deliver.
            var changed = Self.tree
            changed["a.txt"] = SyncFixture.content("new a")
            changed["docs/b.txt"] = SyncFixture.content("new b", size: 100_000)
            try f.publish(
                changed, version: "v2",
                lie: [
                    "a.txt": (nil, SyncFixture.sha256(SyncFixture.content("something else"))),
                    "docs/b.txt": (100_001, nil),
                ])

            let summary = try await f.sync()

            #expect(!summary.matchesManifest)
            let codes = Dictionary(uniqueKeysWithValues: summary.failures.map { ($0.path, $0.error.code) })
            #expect(codes == ["a.txt": .checksumMismatch, "docs/b.txt": .sizeMismatch])
            #expect(sha256(f.contents("a.txt")) == sha256(Self.tree["a.txt"]))
            #expect(sha256(f.contents("docs/b.txt")) == sha256(Self.tree["docs/b.txt"]))
            #expect(!f.tree().contains { $0.hasSuffix(".haul-partial") })
        }
    }

    @Test func aSecondSyncOfTheSameDirectoryIsRefusedWhileTheFirstRuns() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.tree, query: ["a.txt": "gate=hold"])
            let first = Task { try await f.sync() }
            await f.server.waitForGateWaiters("hold", count: 1)

            let error = await #expect(throws: DownloadError.self) { try await f.sync() }
            #expect(error?.code == .duplicate)

            f.server.release("hold")
            #expect(try await first.value.matchesManifest)
        }
    }

    // MARK: - Atomic switch

    /// Reads every file of a manifest through one open descriptor of the directory, the way a
    /// consistent reader must, and names the generations it found.
    static func generations(in directory: String, paths: [String]) -> Set<String> {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY)
        guard descriptor >= 0 else { return ["<no directory>"] }
        defer { close(descriptor) }
        var found: Set<String> = []
        for path in paths {
            let file = openat(descriptor, path, O_RDONLY)
            guard file >= 0 else {
                found.insert("<missing>")
                continue
            }
            var buffer = [UInt8](repeating: 0, count: 2)
            let count = read(file, &buffer, 2)
            close(file)
            found.insert(String(decoding: buffer.prefix(max(0, count)), as: UTF8.self))
        }
        return found
    }

    static func generationTree(_ generation: String) -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for index in 0..<12 {
            files["part\(index / 4)/file\(index).txt"] = SyncFixture.content("\(generation) file \(index)", size: 20_000)
        }
        return files
    }

    /// With `atomic`, a reader never sees generations mixed; without it, the same reader does
    /// (which shows the check can fail).
    @Test(arguments: [true, false])
    func aReaderSeesTheOldSetOrTheNewSetNeverAMix(atomic: Bool) async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.generationTree("g1"))
            _ = try await f.sync(SyncOptions(atomic: atomic))
            let paths = Self.generationTree("g1").keys.sorted()
            let root = f.directory.path
            #expect(Self.generations(in: root, paths: paths) == ["g1"])

            // Generation 2, with one file held back by the server until the reader has looked.
            try f.publish(Self.generationTree("g2"), version: "v2", query: [paths[5]: "gate=g2"])
            let (synced, arrived) = AsyncStream.makeStream(of: Void.self)
            let sync = Task {
                try await f.sync(SyncOptions(atomic: atomic)) { event in
                    if case .fileSynced = event { arrived.yield() }
                }
            }
            await f.server.waitForGateWaiters("g2", count: 1)
            var count = 0
            for await _ in synced {
                count += 1
                if count == paths.count - 1 { break }
            }

            // Every other file of generation 2 is in place (or staged); one is still held.
            let midway = Self.generations(in: root, paths: paths)
            f.server.release("g2")
            let summary = try await sync.value
            let after = Self.generations(in: root, paths: paths)

            #expect(summary.matchesManifest)
            #expect(after == ["g2"])
            if atomic {
                #expect(midway == ["g1"])
            } else {
                #expect(midway == ["g1", "g2"])
            }
        }
    }

    @Test func anAtomicSyncThatFailsSwitchesNothingAndTheNextRunReusesWhatWasStaged() async throws {
        try await SyncFixture.with { f in
            try f.publish(Self.generationTree("g1"))
            _ = try await f.sync(SyncOptions(atomic: true))
            let paths = Self.generationTree("g1").keys.sorted()

            // Generation 2, where one file fails every attempt.
            try f.publish(Self.generationTree("g2"), version: "v2", query: [paths[0]: "fail=500"])
            let failed = try await f.sync(SyncOptions(atomic: true))
            #expect(!failed.matchesManifest)
            #expect(failed.failures.map(\.path) == [paths[0]])
            #expect(Self.generations(in: f.directory.path, paths: paths) == ["g1"])

            // Once the server is fixed, only the missing file is fetched.
            try f.publish(Self.generationTree("g2"), version: "v3")
            f.server.resetStatistics()
            let fixed = try await f.sync(SyncOptions(atomic: true))
            #expect(fixed.matchesManifest)
            #expect(f.fileRequests().map(\.path) == ["/files/content/" + paths[0]])
            #expect(Self.generations(in: f.directory.path, paths: paths) == ["g2"])
            let parent = f.directory.deletingLastPathComponent().path
            #expect(try FileManager.default.contentsOfDirectory(atPath: parent).filter { $0.hasPrefix(".haul-") }.isEmpty)
        }
    }
}
