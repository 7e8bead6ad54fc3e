import Crypto
import Foundation
import HaulTestSupport
import Testing

/// A Metalink 4 document for tests: each file with its size, whole-file SHA-256, piece
/// SHA-256s and URLs (in order of priority).
enum Meta4 {
    struct File {
        var name: String
        var bytes: [UInt8]
        var urls: [String]
        var pieceLength = 256 << 10
    }

    static func hex(_ bytes: some DataProtocol) -> String {
        SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    }

    static func document(_ files: [File]) -> String {
        var xml = #"<?xml version="1.0" encoding="UTF-8"?>"# + "\n"
        xml += #"<metalink xmlns="urn:ietf:params:xml:ns:metalink">"# + "\n"
        for file in files {
            xml += #"  <file name="\#(file.name)">"# + "\n"
            xml += "    <size>\(file.bytes.count)</size>\n"
            xml += #"    <hash type="sha-256">\#(hex(file.bytes))</hash>"# + "\n"
            xml += #"    <pieces length="\#(file.pieceLength)" type="sha-256">"#
            for start in stride(from: 0, to: file.bytes.count, by: file.pieceLength) {
                xml += "<hash>\(hex(file.bytes[start..<min(file.bytes.count, start + file.pieceLength)]))</hash>"
            }
            xml += "</pieces>\n"
            for (index, url) in file.urls.enumerated() {
                let escaped = url.replacingOccurrences(of: "&", with: "&amp;")
                xml += #"    <url priority="\#(index + 1)">\#(escaped)</url>"# + "\n"
            }
            xml += "  </file>\n"
        }
        return xml + "</metalink>\n"
    }
}

/// `haul get FILE.meta4` and `--metalink URL` against the fault server, and beside aria2c.
@Suite("Metalink (CLI)", .timeLimit(.minutes(4)))
struct MetalinkCLITests {
    @Test func everyFileOfAMetalinkIsFetchedIntoItsFoldersWithAMirrorCorruptingAByte() async throws {
        try await CLIFixture.with { f, journal in
            // Given two files, the first with a mirror that flips one byte of it
            let big = f.serve("big", count: 3 << 20, seed: 1)
            f.server.setFile("big-copy", big)
            let small = f.serve("small", count: 100_000, seed: 2)
            let meta4 = f.directory.appendingPathComponent("set.meta4")
            try Meta4.document([
                .init(
                    name: "dist/big.bin", bytes: big,
                    urls: [
                        f.server.url("/files/big-copy?corrupt_at=12345,1585000&rate=\(8 << 20)").absoluteString,
                        f.server.url("/files/big?rate=\(8 << 20)").absoluteString,
                    ]),
                .init(name: "small.bin", bytes: small, urls: [f.server.url("/files/small").absoluteString]),
            ]).write(to: meta4, atomically: true, encoding: .utf8)
            let out = f.directory.appendingPathComponent("out")

            // When haul gets the Metalink file
            let run = try await Haul.run(["get", meta4.path, "-d", out.path, "-x", "2", "--json", "--journal", journal])

            // Then both files are whole, in their folders, verified
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(FileManager.default.contents(atPath: out.path + "/dist/big.bin")) == sha256(big))
            #expect(sha256(FileManager.default.contents(atPath: out.path + "/small.bin")) == sha256(small))
            let events = run.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect((events.last?["completed"] as? Int) == 2)
            // And the bad piece cost a piece, not the file: the one range asked again is the
            // piece's, from the other mirror (the corrupting one serves a bad byte near the
            // start of each of the two connections' first ranges, whichever it gets)
            let bad = events.filter { $0["event"] as? String == "retrying" && $0["code"] as? String == "checksumMismatch" }
            #expect(bad.count == 1, "\(bad)")
            #expect(PieceTests.askedAgain(f.server.requests(path: "/files/big"), pieces: [0, 1_572_864], length: 256 << 10) >= 256 << 10)
        }
    }

    @Test(arguments: ["../escape.bin", "/etc/escape.bin", "a/../../escape.bin"])
    func aNameOutsideTheDirectoryIsRefusedAndNothingIsFetched(name: String) async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("x", count: 1000)
            let meta4 = f.directory.appendingPathComponent("bad.meta4")
            try Meta4.document([.init(name: name, bytes: bytes, urls: [f.server.url("/files/x").absoluteString])])
                .write(to: meta4, atomically: true, encoding: .utf8)
            let run = try await Haul.run(["get", meta4.path, "-d", f.directory.appendingPathComponent("out").path, "--journal", journal])
            #expect(run.status == 2)
            #expect(run.stderr.contains("invalid Metalink"))
            #expect(f.server.requests(path: "/files/x").isEmpty)
            #expect(!FileManager.default.fileExists(atPath: f.directory.deletingLastPathComponent().appendingPathComponent("escape.bin").path))
        }
    }

    @Test func aMetalinkOnAServerIsFetchedThenItsFiles() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("one", count: 50_000)
            let document = Meta4.document([.init(name: "one.bin", bytes: bytes, urls: [f.server.url("/files/one").absoluteString])])
            f.server.setFile("list.meta4", Array(document.utf8))
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run([
                "get", "--metalink", f.server.url("/files/list.meta4").absoluteString, "-d", out.path, "--journal", journal,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(FileManager.default.contents(atPath: out.path + "/one.bin")) == sha256(bytes))
        }
    }

    @Test func theSameMetalinkGivesAria2cAndHaulTheSameFiles() async throws {
        let aria2c = "/usr/bin/aria2c"
        guard FileManager.default.isExecutableFile(atPath: aria2c) else {
            print("skipped: the differential test needs aria2c (Debian's aria2 package; .ci/run installs it)")
            return
        }
        try await CLIFixture.with { f, journal in
            // Given a Metalink of three files, two with a second mirror (one of them dead)
            let a = f.serve("a", count: 2 << 20, seed: 3)
            f.server.setFile("a-copy", a)
            let b = f.serve("b", count: 70_000, seed: 4)
            let c = f.serve("c", count: 1, seed: 5)
            let meta4 = f.directory.appendingPathComponent("set.meta4")
            try Meta4.document([
                .init(
                    name: "x/a.bin", bytes: a,
                    urls: [f.server.url("/files/a").absoluteString, f.server.url("/files/a-copy").absoluteString]),
                .init(name: "b.bin", bytes: b, urls: ["http://127.0.0.1:1/b", f.server.url("/files/b").absoluteString]),
                .init(name: "x/y/c.bin", bytes: c, urls: [f.server.url("/files/c").absoluteString], pieceLength: 1024),
            ]).write(to: meta4, atomically: true, encoding: .utf8)
            let byAria2 = f.directory.appendingPathComponent("aria2")
            let byHaul = f.directory.appendingPathComponent("haul")

            // When each is given it
            let aria2 = try await HaulProcess(
                ["-M", meta4.path, "-d", byAria2.path, "--max-tries=2", "--retry-wait=0", "--console-log-level=warn"],
                executable: URL(fileURLWithPath: aria2c)
            ).wait()
            let haul = try await Haul.run(["get", meta4.path, "-d", byHaul.path, "-q", "--journal", journal])

            // Then where aria2c succeeds, Haul does too, with the same files
            try #require(aria2.status == 0, "aria2c: \(aria2.stdout) \(aria2.stderr)")
            #expect(haul.status == 0, "\(haul.stderr)")
            for name in ["x/a.bin", "b.bin", "x/y/c.bin"] {
                let expected = FileManager.default.contents(atPath: byAria2.path + "/" + name)
                #expect(expected != nil, "\(name)")
                #expect(sha256(FileManager.default.contents(atPath: byHaul.path + "/" + name)) == sha256(expected), "\(name)")
            }
        }
    }
}
