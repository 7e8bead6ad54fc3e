import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

/// A fault server publishing a content tree and its manifest under `/files/content/`, a
/// journaled manager, and a destination directory.
struct SyncFixture {
    let base: Fixture
    var server: FaultServer { base.server }
    var manager: DownloadManager { base.manager }
    /// The directory to sync into (not created: the sync creates it).
    var directory: URL { base.directory.appendingPathComponent("mirror") }
    var manifestURL: URL { server.url("/files/content/manifest.json") }
    var manifestPath: String { "/files/content/manifest.json" }

    static func with(_ body: (SyncFixture) async throws -> Void) async throws {
        try await Fixture.with(journal: true) { f in try await body(SyncFixture(base: f)) }
    }

    /// Serves `files` (path → content) and a JSON manifest listing them with relative URLs,
    /// sizes and SHA-256. `query` is appended to some entries' URLs (fault knobs);
    /// `lie` replaces the manifest's size or hash for some entries.
    @discardableResult
    func publish(
        _ files: [String: [UInt8]], version: String = "v1", query: [String: String] = [:],
        lie: [String: (size: Int64?, sha256: String?)] = [:], extraEntries: [Manifest.Entry] = []
    ) throws -> Manifest {
        var entries: [Manifest.Entry] = []
        for (path, bytes) in files.sorted(by: { $0.key < $1.key }) {
            server.setFile("content/" + path, bytes)
            var url = ManifestBuilder.encodedURLPath(path)
            if let knobs = query[path] { url += "?" + knobs }
            entries.append(
                Manifest.Entry(
                    path: path, url: url, size: lie[path]?.size ?? Int64(bytes.count),
                    sha256: lie[path]?.sha256 ?? Self.sha256(bytes), mtime: Date(timeIntervalSince1970: 1_700_000_000),
                    mode: 0o640))
        }
        let manifest = Manifest(version: version, files: entries + extraEntries)
        server.setFile("content/manifest.json", [UInt8](try manifest.serialized(as: .json)))
        return manifest
    }

    /// Serves a manifest document as given, unvalidated.
    func publishRaw(_ text: String) {
        server.setFile("content/manifest.json", Array(text.utf8))
    }

    func sync(
        _ options: SyncOptions = SyncOptions(), manager: DownloadManager? = nil,
        events: @escaping @Sendable (SyncEvent) -> Void = { _ in }
    ) async throws(DownloadError) -> SyncSummary {
        try await Syncer(manager: manager ?? self.manager).sync(
            from: manifestURL, into: directory, options: options, events: events)
    }

    func contents(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: directory.appendingPathComponent(path).path).map { [UInt8]($0) }
    }

    /// Every path below the directory (files, links and directories), sorted.
    func tree(_ root: URL? = nil) -> [String] {
        let root = root ?? directory
        guard let enumerator = FileManager.default.enumerator(atPath: root.path) else { return [] }
        return (enumerator.allObjects as? [String] ?? []).sorted()
    }

    /// Requests the server saw for content files (not the manifest).
    func fileRequests() -> [RecordedRequest] {
        server.requests().filter { $0.path.hasPrefix("/files/content/") && $0.path != manifestPath }
    }

    static func sha256(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    static func content(_ label: String, size: Int = 4096) -> [UInt8] {
        var bytes = Array(label.utf8)
        while bytes.count < size { bytes += Array(" \(label)".utf8) }
        return Array(bytes.prefix(size))
    }
}
