// Planning a sync of a 100,000-entry manifest (issue 4: "must plan in under 2 s").
//
//     Benchmarks/sync-plan.sh [COUNT]
//
// Builds a tree of COUNT small files (100 per directory) and its manifest, serves the
// manifest from the in-process test server, and times, with a journaled manager:
//
//   parse        Manifest.parse of the XML and of the JSON document (no I/O);
//   cold plan    a dry-run sync into an empty directory: fetch + parse + plan, all missing;
//   first plan   a dry-run sync against the full tree with an empty digest cache: every
//                file is hashed (what a first sync of an existing tree costs);
//   warm plan    the same again, digests cached in the journal: the steady state of a
//                periodic sync, and the number the 2 s goal is about;
//   304 plan     the same with the manifest unchanged on the server (one 304).
//
// Each timing is the median of 3 runs (the first plan runs once: it fills the cache).

import Crypto
import Foundation
import Haul
import HaulTestSupport

let count = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 100_000
let root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-sync-bench-\(UUID().uuidString)")
let tree = root.appendingPathComponent("tree")
defer { try? FileManager.default.removeItem(at: root) }

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
func time(_ runs: Int = 3, _ body: () async throws -> Void) async throws -> Double {
    var samples: [Double] = []
    for _ in 0..<runs {
        let start = ContinuousClock.now
        try await body()
        samples.append(seconds(ContinuousClock.now - start))
    }
    return median(samples)
}

// The tree and its manifest.
var entries: [Manifest.Entry] = []
entries.reserveCapacity(count)
let started = ContinuousClock.now
for index in 0..<count {
    let path = String(format: "d%04d/file-%06d.txt", index / 100, index)
    if index % 100 == 0 {
        try FileManager.default.createDirectory(
            at: tree.appendingPathComponent(String(path.prefix(5))), withIntermediateDirectories: true)
    }
    let bytes = Array("content of \(path)\n".utf8)
    FileManager.default.createFile(atPath: tree.appendingPathComponent(path).path, contents: Data(bytes))
    let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    entries.append(Manifest.Entry(path: path, url: path, size: Int64(bytes.count), sha256: digest))
}
let manifest = Manifest(version: "bench", files: entries)
let xml = try manifest.serialized(as: .xml)
let json = try manifest.serialized(as: .json)
print(
    "tree of \(count) files built in \(String(format: "%.1f", seconds(ContinuousClock.now - started))) s; manifest: \(xml.count / 1_000_000) MB XML, \(json.count / 1_000_000) MB JSON"
)

let parseXML = try await time { _ = try Manifest.parse(data: xml) }
let parseJSON = try await time { _ = try Manifest.parse(data: json) }

let server = try await FaultServer.start()
server.setFile("manifest.json", [UInt8](json))
let journal = try Journal(path: root.appendingPathComponent("journal.sqlite").path)
let manager = DownloadManager(journal: journal)
let syncer = Syncer(manager: manager)
let url = server.url("/files/manifest.json")
let dryRun = SyncOptions(dryRun: true)

let empty = root.appendingPathComponent("empty")
let cold = try await time {
    let summary = try await syncer.sync(from: url, into: empty, options: dryRun)
    precondition(summary.plan.count(.download) == count)
}
// A fresh URL each time so the manifest is fetched, not 304: a different query string.
var round = 0
let first = try await time(1) {
    let summary = try await syncer.sync(from: server.url("/files/manifest.json?r=first"), into: tree, options: dryRun)
    precondition(summary.plan.unchangedCount == count)
}
let warm = try await time {
    round += 1
    let summary = try await syncer.sync(from: server.url("/files/manifest.json?r=\(round)"), into: tree, options: dryRun)
    precondition(summary.plan.unchangedCount == count && !summary.plan.manifestNotModified)
}
let notModified = try await time {
    let summary = try await syncer.sync(from: server.url("/files/manifest.json?r=1"), into: tree, options: dryRun)
    precondition(summary.plan.manifestNotModified && summary.plan.unchangedCount == count)
}
await manager.shutdown()
try await server.shutdown()

print(String(format: "parse: %.2f s XML, %.2f s JSON", parseXML, parseJSON))
print(String(format: "cold plan (empty directory, fetch + parse + plan): %.2f s", cold))
print(String(format: "first plan (hash every file): %.2f s", first))
print(String(format: "warm plan (digests cached): %.2f s", warm))
print(String(format: "304 plan (manifest unchanged): %.2f s", notModified))
print(warm < 2 && cold < 2 ? "goal met: plans under 2 s" : "goal missed: a plan took 2 s or more")
