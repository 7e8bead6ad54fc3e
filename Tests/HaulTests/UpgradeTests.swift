import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import Haul

/// A journal written by an earlier release resumes under this code, every partial kept.
/// The fixture and how it was made: `Fixtures/upgrade-10c1a37/README.md`.
@Suite("Upgrades", .serialized)
struct UpgradeTests {
    /// Where the fixture was made: the journal names these paths.
    static let madeAt = "/tmp/haul-upgrade-fixture"
    /// Where it is restored: a directory of this run's own (two suites running at once on
    /// one machine must not share it), the journal's paths moved there as its ports are.
    static let root = FileManager.default.temporaryDirectory.appendingPathComponent(
        "haul-upgrade-\(UUID().uuidString)"
    ).path
    /// The port of the URLs in the journal.
    static let port = 47391
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/upgrade-10c1a37")

    /// The served files: name, size, seed, ETag (as `make-upgrade-fixture.sh` served them).
    static let files: [(name: String, size: Int, seed: Int, etag: String)] = [
        ("a.bin", 300 * 1024, 1, "a-v1"), ("b.bin", 400 * 1024, 2, "b-v1"),
    ]

    static func content(size: Int, seed: Int) -> [UInt8] {
        (0..<size).map { i in UInt8(truncatingIfNeeded: i &* 7 &+ (i >> 8) &* 13 &+ seed) }
    }

    @Test func journalOfRelease10c1a37ResumesEveryPartial() async throws {
        // Given the journal and partials the release left, restored in a directory of this run's
        let manager = FileManager.default
        try? manager.removeItem(atPath: Self.root)
        try manager.createDirectory(atPath: Self.root + "/downloads", withIntermediateDirectories: true)
        try manager.copyItem(
            atPath: Self.fixture.appendingPathComponent("journal.sqlite").path, toPath: Self.root + "/journal.sqlite")
        var partialSizes: [String: Int] = [:]
        for file in Self.files {
            for suffix in [".haul-partial", ".haul-meta"] {
                try manager.copyItem(
                    atPath: Self.fixture.appendingPathComponent("downloads/\(file.name)\(suffix)").path,
                    toPath: Self.root + "/downloads/\(file.name)\(suffix)")
            }
            let size = try manager.attributesOfItem(atPath: Self.root + "/downloads/\(file.name).haul-partial")[.size]
            partialSizes[file.name] = (size as? NSNumber)?.intValue
        }
        #expect(partialSizes["a.bin"].map { $0 > 0 && $0 < 300 * 1024 } == true)
        #expect(partialSizes["b.bin"].map { $0 > 0 && $0 < 400 * 1024 } == true)
        // (the killed b.bin resumes in the boot that wrote it, as after an upgrade without a
        // reboot: see the fixture's README)
        // And a server with the same bytes. (The release's server listened on port 47391,
        // which lies in the ephemeral range, where another test's server or a process it
        // started can hold it: the journal's and the sidecars' URLs are moved to this
        // server's port, and nothing else changes.)
        let server = try await FaultServer.start()
        let (old, new) = ("127.0.0.1:\(Self.port)", "127.0.0.1:\(server.port)")
        let queue = try DatabaseQueue(path: Self.root + "/journal.sqlite")
        try await queue.write { db in
            try db.execute(
                sql: "UPDATE job SET bootID = ? WHERE url LIKE '%/b.bin'", arguments: [ProcessIdentity.bootID])
            try db.execute(
                sql: "UPDATE job SET id = replace(id, ?, ?), url = replace(url, ?, ?), finalURL = replace(finalURL, ?, ?)",
                arguments: [old, new, old, new, old, new])
            try db.execute(
                sql: "UPDATE job SET destinationPath = replace(destinationPath, ?, ?), partialPath = replace(partialPath, ?, ?)",
                arguments: [Self.madeAt, Self.root, Self.madeAt, Self.root])
        }
        try queue.close()
        for file in Self.files {
            let sidecar = Self.root + "/downloads/\(file.name).haul-meta"
            let text = try String(contentsOfFile: sidecar, encoding: .utf8)
            try text.replacingOccurrences(of: old, with: new).write(toFile: sidecar, atomically: true, encoding: .utf8)
        }
        let modified = Date(timeIntervalSince1970: 1_704_067_200)
        for file in Self.files {
            server.setFile(
                file.name,
                ServedFile(
                    bytes: Self.content(size: file.size, seed: file.seed), etag: .custom(file.etag),
                    lastModified: .custom(modified)))
        }

        // When this code resumes the journal's unfinished downloads
        let journal = try Journal(path: Self.root + "/journal.sqlite")
        let resumed = try await withDownloadManager(journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool) { downloads in
            let resumed = try await downloads.resumeUnfinished()
            await downloads.waitUntilIdle()
            return resumed
        }
        #expect(resumed == 2)

        // Then each asked for the rest of its partial, and the files are complete and right
        for file in Self.files {
            let gets = server.requests(path: "/files/\(file.name)").filter { $0.method == "GET" }
            let ranges = gets.map { request in request.headers.first { $0.name.lowercased() == "range" }?.value }
            #expect(ranges.first == "bytes=\(partialSizes[file.name] ?? -1)-", "\(file.name): \(ranges)")
            let saved = try Data(contentsOf: URL(fileURLWithPath: Self.root + "/downloads/\(file.name)"))
            #expect(saved == Data(Self.content(size: file.size, seed: file.seed)), "\(file.name)")
            #expect(!manager.fileExists(atPath: Self.root + "/downloads/\(file.name).haul-partial"))
        }
        let rows = try journal.jobs()
        #expect(rows.count == 2)
        #expect(rows.allSatisfy { $0.state == .completed }, "\(rows.map(\.state))")
        // Its rows keep their URLs as IDs: the same URL into another directory is a row of
        // its own, and the old one still answers to its URL (a repeat is one 304).
        let url = server.url("/files/a.bin")
        #expect(rows.contains { $0.id.rawValue == url.absoluteString })
        let elsewhere = URL(fileURLWithPath: Self.root + "/elsewhere")
        try manager.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        let ids = try await withDownloadManager(
            journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool
        ) { downloads in
            let other = try await downloads.download(DownloadRequest(url: url, destination: .directory(elsewhere)))
            _ = try await other.result
            let again = try await downloads.download(
                DownloadRequest(url: url, destination: .directory(URL(fileURLWithPath: Self.root + "/downloads"))))
            #expect(try await again.result.isUnchanged)
            return [other.id, again.id]
        }
        #expect(ids.map(\.rawValue) == [url.absoluteString + " -> " + elsewhere.path + "/", url.absoluteString])
        #expect(try journal.jobs().count == 3)
        try await server.shutdown()
        try? manager.removeItem(atPath: Self.root)
    }
}
