import Foundation
import Haul
import HaulTestSupport
import Testing

/// `Syncer` against a real nginx serving a directory and a manifest `haul manifest` wrote
/// for it; nginx's access log shows what crossed the wire.
@Suite(
    "sync against nginx",
    .enabled(if: NginxServer.isAvailable, "nginx is not installed: run .ci/run or apt-get install nginx"),
    .timeLimit(.minutes(4)))
struct NginxSyncTests {
    @Test func syncThenOne304ThenOnlyTheChangedFile() async throws {
        try await NginxServer.with { nginx in
            let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("haul-nginx-sync-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: scratch) }
            let journal = try Journal(path: scratch.appendingPathComponent("journal.sqlite").path)
            let manager = DownloadManager(configuration: Fixture.testConfiguration(), journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
            let mirror = scratch.appendingPathComponent("mirror")
            let modified = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3600).rounded(.down))
            var files: [String: [UInt8]] = [:]
            for index in 0..<6 {
                files["tree/dir\(index % 2)/file \(index).bin"] = FaultServer.randomBytes(count: 50_000 * (index + 1), seed: UInt64(index))
            }
            // nginx's ETag is mtime and size: each manifest gets a later mtime, as a publisher's would.
            var published = Date().addingTimeInterval(-600)
            func publish() throws {
                published += 60
                for (path, bytes) in files { try nginx.write(bytes, at: "/content/" + path, modified: modified) }
                let manifest = try ManifestBuilder(
                    directory: nginx.root.appendingPathComponent("content/tree"),
                    baseURL: nginx.url("/content/tree"), version: "\(files.count)"
                ).build()
                try nginx.write([UInt8](try manifest.serialized(as: .xml)), at: "/content/manifest.xml", modified: published)
            }
            let syncer = Syncer(manager: manager)
            let url = nginx.url("/content/manifest.xml")

            // First sync: everything.
            try publish()
            let first = try await syncer.sync(from: url, into: mirror)
            #expect(first.matchesManifest)
            #expect(first.downloaded.files == 6)
            for (path, bytes) in files {
                let local = mirror.appendingPathComponent(String(path.dropFirst("tree/".count)))
                let same = FileManager.default.contents(atPath: local.path).map { [UInt8]($0) } == bytes
                #expect(same, "\(path)")
            }
            _ = try await nginx.logEntry { $0.path == "/content/tree/dir1/file 5.bin" }
            let afterFirst = try nginx.accessLog().count

            // Second sync, nothing changed: one request, a 304.
            let second = try await syncer.sync(from: url, into: mirror)
            #expect(second.plan.manifestNotModified)
            let conditional = try await nginx.logEntry { $0.status == 304 }
            #expect(conditional.path == "/content/manifest.xml")
            #expect(try nginx.accessLog().count == afterFirst + 1)

            // One file changes: the manifest and that file, nothing else (atomically this time).
            files["tree/dir0/file 2.bin"] = FaultServer.randomBytes(count: 150_000, seed: 99)
            try publish()
            let third = try await syncer.sync(from: url, into: mirror, options: SyncOptions(atomic: true))
            #expect(third.matchesManifest)
            #expect(third.updated.files == 1)
            #expect(third.unchanged.files == 5)
            _ = try await nginx.logEntry { $0.path == "/content/tree/dir0/file 2.bin" && $0.bodyBytesSent == 150_000 }
            let latest = try nginx.accessLog().dropFirst(afterFirst + 1)
            #expect(latest.map(\.path) == ["/content/manifest.xml", "/content/tree/dir0/file 2.bin"])
            #expect(latest.map(\.status) == [200, 200])
            let replaced =
                FileManager.default.contents(atPath: mirror.appendingPathComponent("dir0/file 2.bin").path).map { [UInt8]($0) }
                == files["tree/dir0/file 2.bin"]
            #expect(replaced)
            await manager.shutdown()
        }
    }
}
