import Crypto
import Foundation
import Haul
import Testing

@Suite("Manifests")
struct ManifestTests {
    static let hash = String(repeating: "ab", count: 32)

    static func sample() -> Manifest {
        Manifest(
            version: "2026-01-01 \"release\" & <co>",
            files: [
                Manifest.Entry(
                    path: "docs/a.txt", url: "a.txt", size: 12, sha256: hash,
                    mtime: Date(timeIntervalSince1970: 1_767_225_600), mode: 0o644),
                Manifest.Entry(
                    path: "docs/weird \"&'<>\".txt", url: "https://cdn.example.com/x%20y?q=1&r=2", size: 0,
                    mtime: Date(timeIntervalSince1970: 1_700_000_000), mode: 0o755),
                Manifest.Entry(
                    path: "é/ü.bin", url: "%C3%A9/%C3%BC.bin", size: 1 << 40, sha256: hash.uppercased(),
                    mtime: Date(timeIntervalSince1970: 0), mode: 0o4755),
            ])
    }

    // MARK: - Round trips

    @Test func xmlAndJSONRoundTripTheSameData() throws {
        let manifest = Self.sample()
        let xml = try manifest.serialized(as: .xml)
        let json = try manifest.serialized(as: .json)
        #expect(Manifest.detectFormat(data: xml) == .xml)
        #expect(Manifest.detectFormat(data: json) == .json)
        let fromXML = try Manifest.parse(data: xml)
        let fromJSON = try Manifest.parse(data: json)
        #expect(fromXML == manifest)
        #expect(fromJSON == manifest)
        #expect(fromXML.files[2].sha256 == Self.hash)
        // XML -> JSON -> XML is byte-identical.
        let again = try Manifest.parse(data: try fromXML.serialized(as: .json), format: .json)
        #expect(try again.serialized(as: .xml) == xml)
    }

    @Test func documentedShapesParse() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <manifest version="v1">
              <file path="docs/a.txt" url="a.txt" size="12" sha256="\(Self.hash)" mtime="2026-01-01T00:00:00Z" mode="0644"/>
              <file path="b" url="http://h/b" size="0" mtime="2026-01-01T01:00:00.750+01:00" mode="600"/>
            </manifest>
            """
        let json = """
              {"version": "v1", "files": [
                {"path": "docs/a.txt", "url": "a.txt", "size": 12, "sha256": "\(Self.hash)",
                 "mtime": "2026-01-01T00:00:00Z", "mode": "0644", "future": true},
                {"path": "b", "url": "http://h/b", "size": 0, "mtime": "2026-01-01T01:00:00.750+01:00", "mode": "600"}]}
            """
        let a = try Manifest.parse(data: Data(xml.utf8))
        let b = try Manifest.parse(data: Data(json.utf8))
        #expect(a == b)
        #expect(a.version == "v1")
        #expect(a.files.map(\.path) == ["docs/a.txt", "b"])
        #expect(a.files[0].mtime == Date(timeIntervalSince1970: 1_767_225_600))
        #expect(a.files[1].mtime == Date(timeIntervalSince1970: 1_767_225_600))
        #expect(a.files[0].mode == 0o644)
        #expect(a.files[1].mode == 0o600)
        #expect(a.files[1].sha256 == nil)
        let text = String(decoding: try a.serialized(as: .json), as: UTF8.self)
        #expect(text.contains("\"mode\" : \"0600\""))
        #expect(text.contains("\"mtime\" : \"2026-01-01T00:00:00Z\""))
    }

    @Test func relativeURLsResolveAgainstTheManifestURL() throws {
        let base = try #require(URL(string: "https://example.com/sync/manifest.xml"))
        func entry(_ url: String) -> Manifest.Entry {
            Manifest.Entry(path: "x", url: url, size: 0, mtime: Date(), mode: 0o644)
        }
        #expect(entry("docs/a%20b.txt").resolvedURL(relativeTo: base)?.absoluteString
            == "https://example.com/sync/docs/a%20b.txt")
        #expect(entry("../other/c").resolvedURL(relativeTo: base)?.absoluteString == "https://example.com/other/c")
        #expect(entry("/root/d").resolvedURL(relativeTo: base)?.absoluteString == "https://example.com/root/d")
        #expect(entry("https://cdn.example.com/e").resolvedURL(relativeTo: base)?.absoluteString
            == "https://cdn.example.com/e")
        #expect(entry("a b").resolvedURL(relativeTo: base) == nil)
    }

    // MARK: - Hostile manifests

    /// One bad entry (the second), with what the error must say about it.
    struct Hostile: Sendable, CustomTestStringConvertible {
        var label: String
        var path: String
        var url = "ok.txt"
        var size = "5"
        var sha256: String? = nil
        var mode = "0644"
        var mtime = "2026-01-01T00:00:00Z"
        var reason: String
        var testDescription: String { label }
    }

    static let hostile: [Hostile] = [
        Hostile(label: "empty path", path: "", reason: "path is empty"),
        Hostile(label: "absolute path", path: "/etc/passwd", reason: "absolute"),
        Hostile(label: "dot-dot", path: "a/../../b", reason: "'..'"),
        Hostile(label: "leading dot-dot", path: "../b", reason: "'..'"),
        Hostile(label: "dot", path: "a/./b", reason: "'.'"),
        Hostile(label: "empty component", path: "a//b", reason: "empty component"),
        Hostile(label: "trailing slash", path: "a/", reason: "empty component"),
        Hostile(label: "backslash", path: "a\\b", reason: "backslash"),
        Hostile(label: "control character", path: "a\u{1}b", reason: "control character"),
        Hostile(label: "duplicate", path: "first.txt", reason: "duplicate path, already at files[0]"),
        Hostile(label: "file and directory", path: "first.txt/inner", reason: "also a file at files[0]"),
        Hostile(label: "negative size", path: "n", size: "-1", reason: "negative"),
        Hostile(label: "non-integer size", path: "n", size: "1.5", reason: "size"),
        Hostile(label: "short sha256", path: "s", sha256: "abc", reason: "not 64 hex digits"),
        Hostile(label: "non-hex sha256", path: "s", sha256: String(repeating: "g", count: 64), reason: "64 hex"),
        Hostile(label: "unparseable url", path: "u", url: "http://[bad", reason: "url"),
        Hostile(label: "url with a space", path: "u", url: "a b", reason: "url"),
        Hostile(label: "non-http url", path: "u", url: "file:///etc/passwd", reason: "url"),
        Hostile(label: "bad mode", path: "m", mode: "0999", reason: "mode"),
        Hostile(label: "bad mtime", path: "t", mtime: "yesterday", reason: "mtime"),
    ]

    @Test(arguments: hostile)
    func hostileXMLNamesTheEntryAndLine(_ bad: Hostile) throws {
        // The XML form cannot carry control characters at all; the parser rejects those.
        let sha = bad.sha256.map { " sha256=\"\(Manifest.escapeForTest($0))\"" } ?? ""
        let xml = """
            <manifest version="v">
              <file path="first.txt" url="first.txt" size="1" mtime="2026-01-01T00:00:00Z" mode="0644"/>
              <file path="\(Manifest.escapeForTest(bad.path))" url="\(Manifest.escapeForTest(bad.url))" \
            size="\(bad.size)"\(sha) mtime="\(bad.mtime)" mode="\(bad.mode)"/>
            </manifest>
            """
        let error = try #require(throws: DownloadError.self) { try Manifest.parse(data: Data(xml.utf8)) }
        #expect(error.code == .invalidManifest)
        if bad.path.unicodeScalars.contains(where: { $0.value < 0x20 }) {
            // Not well-formed XML 1.0 at all: libxml2 names the line where it noticed.
            #expect(error.message.contains("malformed XML at line"), "\(error.message)")
            return
        }
        #expect(error.message.contains("files[1] \(String(reflecting: bad.path)) (line 3)"), "\(error.message)")
        #expect(error.message.contains(bad.reason), "\(error.message)")
    }

    @Test(arguments: hostile)
    func hostileJSONNamesTheEntry(_ bad: Hostile) throws {
        func string(_ value: String) throws -> String {
            String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
        }
        let size = Int64(bad.size) != nil ? bad.size : try string(bad.size)
        let sha = try bad.sha256.map { ", \"sha256\": \(try string($0))" } ?? ""
        let json = """
            {"version": "v", "files": [
              {"path": "first.txt", "url": "first.txt", "size": 1, "mtime": "2026-01-01T00:00:00Z", "mode": "0644"},
              {"path": \(try string(bad.path)), "url": \(try string(bad.url)), "size": \(size)\(sha),
               "mtime": \(try string(bad.mtime)), "mode": \(try string(bad.mode))}]}
            """
        let error = try #require(throws: DownloadError.self) { try Manifest.parse(data: Data(json.utf8)) }
        #expect(error.code == .invalidManifest)
        #expect(error.message.contains("files[1] \(String(reflecting: bad.path))"), "\(error.message)")
        #expect(error.message.contains(bad.reason), "\(error.message)")
    }

    @Test func canonicallyEquivalentPathsAreDuplicates() throws {
        let json = #"""
            {"version": "v", "files": [
              {"path": "caf\u00e9", "url": "a", "size": 1, "mtime": "2026-01-01T00:00:00Z", "mode": "0644"},
              {"path": "Caf\u00e9", "url": "b", "size": 1, "mtime": "2026-01-01T00:00:00Z", "mode": "0644"},
              {"path": "cafe\u0301", "url": "c", "size": 1, "mtime": "2026-01-01T00:00:00Z", "mode": "0644"}]}
            """#
        let error = try #require(throws: DownloadError.self) { try Manifest.parse(data: Data(json.utf8)) }
        #expect(error.message.contains("files[2]"), "\(error.message)")
        #expect(error.message.contains("duplicate path, already at files[0]"), "\(error.message)")
    }

    @Test func nulInAJSONPathIsRejected() throws {
        let json = #"{"version": "v", "files": [{"path": "a\u0000b", "url": "u", "size": 1, "mtime": "2026-01-01T00:00:00Z", "mode": "0644"}]}"#
        let error = try #require(throws: DownloadError.self) { try Manifest.parse(data: Data(json.utf8)) }
        #expect(error.message.contains("files[0]"))
        #expect(error.message.contains("control character"))
    }

    @Test(arguments: [
        ("<other version=\"v\"/>", "unknown root element <other> at line 1"),
        ("<manifest>\n</manifest>", "no version attribute"),
        ("<manifest version=\"\"/>", "version is empty"),
        ("<manifest version=\"v\">\n<file path=\"a\" url=\"u\" size=\"1\" mtime=\"2026-01-01T00:00:00Z\" mode=\"0644\"/>", "malformed XML"),
        ("<manifest version=\"v\"></manifest><manifest version=\"w\"/>", "malformed XML"),
        ("<manifest version=\"v\">\n  <dir path=\"a\"/>\n</manifest>", "unknown element <dir> at line 2"),
        ("<manifest version=\"v\">\n  text\n</manifest>", "unexpected text"),
        ("<!DOCTYPE m [<!ENTITY x \"y\">]><manifest version=\"v\"/>", "not allowed"),
        (
            "<manifest version=\"v\">\n\n  <file path=\"a\" size=\"1\" mtime=\"2026-01-01T00:00:00Z\" mode=\"0644\"/>\n</manifest>",
            "files[0] \"a\" (line 3): missing attribute url"
        ),
        ("{\"files\": []}", "has no \"version\""),
        ("{\"version\": \"v\"}", "has no \"files\""),
        ("{\"version\": \"v\", \"files\": {}}", "files is not"),
        ("{\"version\": \"v\", \"files\": [", "malformed JSON"),
        ("{\"version\": \"v\", \"files\": [{\"url\": \"u\"}]}", "files[0]: missing \"path\""),
        ("   ", "neither XML"),
    ])
    func malformedDocumentsAreRejected(document: String, expected: String) throws {
        let error = try #require(throws: DownloadError.self) { try Manifest.parse(data: Data(document.utf8)) }
        #expect(error.code == .invalidManifest)
        #expect(error.message.contains(expected), "\(error.message)")
    }

    @Test func serializingAnInvalidManifestFails() throws {
        let manifest = Manifest(
            version: "v", files: [Manifest.Entry(path: "../x", url: "x", size: 1, mtime: Date(), mode: 0o644)])
        #expect(throws: DownloadError.self) { try manifest.serialized(as: .xml) }
        #expect(throws: DownloadError.self) { try manifest.serialized(as: .json) }
    }

    // MARK: - Building

    @Test func buildsFromADirectory() throws {
        let fixture = try ManifestDirectory()
        defer { fixture.remove() }
        let manifest = try ManifestBuilder(directory: fixture.root, version: "v7").build()
        #expect(manifest.version == "v7")
        #expect(manifest.files.map(\.path) == ["a b.txt", "inside-link", "nested/deeper/big.bin", "nested/é.txt"])
        for entry in manifest.files {
            let contents = try #require(fixture.contents[entry.path])
            #expect(entry.size == Int64(contents.count), "\(entry.path)")
            let expected = SHA256.hash(data: contents).map { String(format: "%02x", $0) }.joined()
            #expect(entry.sha256 == expected, "\(entry.path)")
        }
        let a = try #require(manifest.files.first { $0.path == "a b.txt" })
        #expect(a.url == "a%20b.txt")
        #expect(a.mode == 0o640)
        #expect(a.mtime == Date(timeIntervalSince1970: 1_700_000_000))
        let e = try #require(manifest.files.first { $0.path == "nested/é.txt" })
        #expect(e.url == "nested/%C3%A9.txt")
        let base = try #require(URL(string: "https://example.com/mirror/manifest.json"))
        #expect(a.resolvedURL(relativeTo: base)?.absoluteString == "https://example.com/mirror/a%20b.txt")
        #expect(e.resolvedURL(relativeTo: base)?.absoluteString == "https://example.com/mirror/nested/%C3%A9.txt")
        // What it builds, it can write and read back.
        #expect(try Manifest.parse(data: try manifest.serialized(as: .xml)) == manifest)
        #expect(try Manifest.parse(data: try manifest.serialized(as: .json)) == manifest)
    }

    @Test func baseURLMakesURLsAbsolute() throws {
        let fixture = try ManifestDirectory()
        defer { fixture.remove() }
        let base = try #require(URL(string: "https://cdn.example.com/files"))
        let manifest = try ManifestBuilder(directory: fixture.root, baseURL: base, version: "v").build()
        #expect(manifest.files.first?.url == "https://cdn.example.com/files/a%20b.txt")
        #expect(manifest.files.last?.url == "https://cdn.example.com/files/nested/%C3%A9.txt")
    }

    @Test func hugeFileHashesInChunks() throws {
        let fixture = try ManifestDirectory()
        defer { fixture.remove() }
        let manifest = try ManifestBuilder(directory: fixture.root, version: "v").build()
        let big = try #require(manifest.files.first { $0.path == "nested/deeper/big.bin" })
        #expect(big.size == 3 * (1 << 20) + 17)
    }

    // MARK: - Command line

    @Test func manifestCommandWritesAFileAtomically() async throws {
        let fixture = try ManifestDirectory()
        defer { fixture.remove() }
        let output = fixture.scratch.appendingPathComponent("out.json").path
        let run = try await Haul.run([
            "manifest", fixture.root.path, "--format", "json", "--label", "label 1", "-o", output,
            "--base-url", "https://example.com/x/",
        ])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.isEmpty)
        let manifest = try Manifest.parse(data: try Data(contentsOf: URL(fileURLWithPath: output)), format: .json)
        #expect(manifest.version == "label 1")
        #expect(manifest.files.count == 4)
        #expect(manifest.files.first?.url == "https://example.com/x/a%20b.txt")

        let xml = try await Haul.run(["manifest", fixture.root.path])
        #expect(xml.status == 0)
        let parsed = try Manifest.parse(data: Data(xml.stdout.utf8))
        #expect(parsed.files.map(\.path) == manifest.files.map(\.path))
        #expect(parsed.files.first?.url == "a%20b.txt")
    }

    @Test(arguments: [
        ["manifest"],
        ["manifest", "/nonexistent/haul-manifest-dir"],
        ["manifest", "/tmp", "--base-url", "ftp://example.com/"],
        ["manifest", "/tmp", "--format", "yaml"],
    ])
    func manifestCommandUsageErrorsExitTwo(arguments: [String]) async throws {
        let run = try await Haul.run(arguments)
        #expect(run.status == 2)
        #expect(!run.stderr.isEmpty)
    }
}

extension Manifest {
    /// XML attribute escaping for building hostile test documents by hand.
    static func escapeForTest(_ value: String) -> String {
        value.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: "\u{1}", with: "&#1;")
    }
}

/// A temporary directory to build a manifest from:
///
///     a b.txt                 "hello world" (mode 0640, mtime 1_700_000_000)
///     nested/é.txt
///     nested/deeper/big.bin   3 MiB + 17 bytes
///     inside-link -> a b.txt  (listed: it stays inside)
///     escape -> ../outside.txt (skipped)
///     dirlink -> nested       (skipped: a directory)
///     big.bin.haul-partial, x.haul-meta, .haul-staging/s.txt (skipped)
struct ManifestDirectory {
    let scratch: URL
    let root: URL
    var contents: [String: Data] = [:]

    init() throws {
        let manager = FileManager.default
        scratch = manager.temporaryDirectory.appendingPathComponent("haul-manifest-\(UUID().uuidString)")
        root = scratch.appendingPathComponent("tree")
        try manager.createDirectory(at: root.appendingPathComponent("nested/deeper"), withIntermediateDirectories: true)
        try manager.createDirectory(at: root.appendingPathComponent(".haul-staging"), withIntermediateDirectories: true)
        func write(_ path: String, _ data: Data, listed: Bool = true) throws {
            try data.write(to: root.appendingPathComponent(path))
            if listed { contents[path] = data }
        }
        try write("a b.txt", Data("hello world".utf8))
        try manager.setAttributes(
            [.posixPermissions: 0o640, .modificationDate: Date(timeIntervalSince1970: 1_700_000_000)],
            ofItemAtPath: root.appendingPathComponent("a b.txt").path)
        try write("nested/é.txt", Data("accent".utf8))
        var big = Data(count: 3 * (1 << 20) + 17)
        for index in stride(from: 0, to: big.count, by: 4099) { big[index] = UInt8(truncatingIfNeeded: index / 4099) }
        try write("nested/deeper/big.bin", big)
        try write("big.bin.haul-partial", Data("partial".utf8), listed: false)
        try write("x.haul-meta", Data("meta".utf8), listed: false)
        try write(".haul-staging/s.txt", Data("staged".utf8), listed: false)
        try Data("secret".utf8).write(to: scratch.appendingPathComponent("outside.txt"))
        try manager.createSymbolicLink(atPath: root.appendingPathComponent("escape").path, withDestinationPath: "../outside.txt")
        try manager.createSymbolicLink(atPath: root.appendingPathComponent("dirlink").path, withDestinationPath: "nested")
        try manager.createSymbolicLink(atPath: root.appendingPathComponent("inside-link").path, withDestinationPath: "a b.txt")
        contents["inside-link"] = contents["a b.txt"]
    }

    func remove() {
        try? FileManager.default.removeItem(at: scratch)
    }
}

/// Large manifests: libxml2 refuses single inputs above 10 MB unless fed in pieces.
///
/// Serialized, and computed on a thread of its own (``onOwnThread(_:)``): unoptimized, each
/// case is tens of seconds of CPU, which on the concurrency pool would starve the other
/// tests running beside it.
@Suite("Large manifests", .serialized)
struct LargeManifestTests {
    @Test(arguments: [Manifest.Format.xml, .json])
    func aManifestOf100000EntriesRoundTrips(format: Manifest.Format) async throws {
        let (manifest, size, parsed) = try await onOwnThread {
            let files = (0..<100_000).map { index in
                Manifest.Entry(
                    path: "d\(index / 100)/file-\(index).txt", url: "d\(index / 100)/file-\(index).txt",
                    size: Int64(index), sha256: String(repeating: "ab", count: 32))
            }
            let manifest = Manifest(version: "big", files: files)
            let data = try manifest.serialized(as: format)
            return (manifest, data.count, try Manifest.parse(data: data))
        }
        #expect(size > 10_000_000)
        #expect(parsed == manifest)
    }
}
