// Refreshing an app's content from a server's file list: a directory kept identical to a
// published manifest. Run with no arguments to publish a small tree on a local server, or
// with a manifest URL (and a directory) to sync from a real one.

import Foundation
import Haul
import HaulTestSupport

@main
struct ContentSync {
    static func main() async throws {
        let arguments = Array(CommandLine.arguments.dropFirst())
        guard arguments.count <= 2, arguments.first?.hasPrefix("-") != true else {
            print("usage: ContentSync [MANIFEST_URL [DIRECTORY]]")
            exit(2)
        }
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("content-sync-\(getpid())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)

        // The journal remembers the manifest (with its ETag) and the digests of the local
        // files, so that a sync of unchanged content costs one 304 and reads no file. An app
        // keeps it at a stable path (`Journal.defaultPath`, or its own); here it lasts one run.
        let journal = try Journal(path: work.appendingPathComponent("journal.sqlite").path)
        let manager = DownloadManager(journal: journal)
        let syncer = Syncer(manager: manager)
        var inStep = true

        if let manifest = arguments.first {
            guard let manifestURL = URL(string: manifest) else {
                print("not a URL: \(manifest)")
                exit(2)
            }
            let directory = URL(fileURLWithPath: arguments.count > 1 ? arguments[1] : "content")
            print("Syncing \(manifestURL.absoluteString) into \(directory.path), twice.")
            for title in ["first sync", "second sync"] {
                inStep = try await sync(title, syncer, manifestURL, directory, server: nil) && inStep
            }
        } else {
            let server = try await FaultServer.start()
            let publisher = Publisher(server: server, directory: work.appendingPathComponent("published"))
            try publisher.write(DemoContent.version1)
            try publisher.publish(version: "v1")
            let manifestURL = server.url("/files/manifest.json")
            let directory = work.appendingPathComponent("content")
            print("A local server publishes \(DemoContent.version1.count) files at \(manifestURL.absoluteString).")

            func sync(_ title: String) async throws -> Bool {
                try await Self.sync(title, syncer, manifestURL, directory, server: server)
            }
            inStep = try await sync("first sync")
            inStep = try await sync("second sync, nothing changed") && inStep

            // The publisher changes one file, adds one and removes one, and publishes again.
            try publisher.write(["css/site.css": DemoContent.text("body { margin: 0 }\n", repeated: 40)])
            try publisher.write(["img/banner.jpg": DemoContent.image(bytes: 96_000, seed: 20)])
            try publisher.remove("img/photo-3.jpg")
            try publisher.publish(version: "v2")
            inStep = try await sync("third sync, after the publisher changed 3 files") && inStep
            try await server.shutdown()
        }

        await manager.shutdown()
        try? FileManager.default.removeItem(at: work)
        if !inStep { exit(1) }
    }

    /// Runs one sync and prints what it did; returns whether the directory matches the manifest.
    static func sync(
        _ title: String, _ syncer: Syncer, _ manifestURL: URL, _ directory: URL, server: FaultServer?
    ) async throws -> Bool {
        print("\n== \(title)")
        server?.resetStatistics()
        let summary: SyncSummary
        do throws(DownloadError) {
            // Delete what the manifest no longer lists, and switch the new tree in at once.
            summary = try await syncer.sync(
                from: manifestURL, into: directory, options: SyncOptions(deleteExtraneous: true, atomic: true)
            ) { event in
                switch event {
                case .manifest(let version, let fileCount, let notModified):
                    let source = notModified ? " (304 Not Modified: the copy in the journal)" : ""
                    print("manifest \(version): \(fileCount) files\(source)")
                case .planned(let plan):
                    print(
                        "plan: \(plan.count(.download)) to download, \(plan.count(.update)) to update,",
                        "\(plan.count(.delete)) to delete, \(plan.unchangedCount) unchanged")
                case .fileSynced(let path, let action, let bytes):
                    print("  \(action) \(path) (\(bytes) bytes)")
                case .deleted(let path):
                    print("  deleted \(path)")
                case .fileFailed(let path, let error):
                    print("  failed \(path): DownloadError.\(error.code): \(error.message)")
                case .stage, .finished:
                    break
                }
            }
        } catch {
            print("sync failed: DownloadError.\(error.code): \(error.message)")
            return false
        }
        let requests = server.map { server in
            let count = server.requests().count
            return " in \(count) request\(count == 1 ? "" : "s")"
        }
        print(
            "done: \(summary.downloaded.files) downloaded, \(summary.updated.files) updated,",
            "\(summary.deleted.files) deleted, \(summary.unchanged.files) unchanged;",
            "\(summary.bytesTransferred) bytes transferred\(requests ?? "")")
        print(summary.matchesManifest ? "the directory matches the manifest" : "the directory does NOT match it")
        return summary.matchesManifest
    }
}

/// The publishing side: a directory of files, its manifest (from `ManifestBuilder`, as
/// `haul manifest` writes it) and the server that serves both.
struct Publisher {
    let server: FaultServer
    let directory: URL

    func write(_ files: [String: Data]) throws {
        for (path, content) in files {
            let file = directory.appendingPathComponent(path)
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try content.write(to: file)
        }
    }

    func remove(_ path: String) throws {
        try FileManager.default.removeItem(at: directory.appendingPathComponent(path))
        server.removeFile(path)
    }

    /// Builds the manifest of the directory and serves it with every file it lists. Its
    /// `url`s are relative (`css/site.css`), so they resolve against the manifest's URL.
    func publish(version: String) throws {
        let manifest = try ManifestBuilder(directory: directory, version: version).build()
        for entry in manifest.files {
            let content = try Data(contentsOf: directory.appendingPathComponent(entry.path))
            server.setFile(entry.path, content)
        }
        server.setFile("manifest.json", try manifest.serialized(as: .json))
    }
}

/// The content of the local demo: a page, a style sheet, a catalogue and a few images.
enum DemoContent {
    static var version1: [String: Data] {
        var files: [String: Data] = [
            "index.html": text("<!doctype html><title>Catalogue</title>\n", repeated: 30),
            "css/site.css": text("body { margin: 1em }\n", repeated: 40),
            "data/catalog.json": text("{\"items\": []}\n", repeated: 200),
        ]
        for number in 1...8 {
            files["img/photo-\(number).jpg"] = image(bytes: 20_000 * number, seed: UInt64(number))
        }
        return files
    }

    static func text(_ line: String, repeated count: Int) -> Data {
        Data(String(repeating: line, count: count).utf8)
    }

    static func image(bytes: Int, seed: UInt64) -> Data {
        Data(FaultServer.randomBytes(count: bytes, seed: seed))
    }
}
