import Foundation
import HaulTestSupport
import Testing

/// `haul get` with several addresses for one file: `--mirror`, and tab-separated URLs in
/// an input file (aria2's form).
@Suite("Mirrors (CLI)", .timeLimit(.minutes(4)))
struct MirrorCLITests {
    @Test func aMirrorTakesOverFromADeadURLAndTheEventSaysWhy() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("m.bin", count: 300_000)
            let dead = "http://127.0.0.1:1/files/m.bin"
            let run = try await Haul.run([
                "get", dead, "--mirror", f.server.url("/files/m.bin").absoluteString, "-d", f.directory.path,
                "--json", "--journal", journal,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(f.contents("m.bin")) == sha256(bytes))
            let events = run.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let dropped = events.filter { $0["event"] as? String == "sourceDropped" }
            #expect(dropped.count == 1)
            #expect(dropped.first?["source"] as? String == dead)
            #expect(dropped.first?["code"] as? String == "network")
        }
    }

    @Test func tabSeparatedURLsInAnInputFileAreOneDownload() async throws {
        try await CLIFixture.with { f, journal in
            let a = f.serve("a.bin", count: 50_000, seed: 1)
            let b = f.serve("b.bin", count: 60_000, seed: 2)
            let list = f.directory.appendingPathComponent("list.txt")
            try """
            \(f.server.url("/files/missing-a").absoluteString)\t\(f.server.url("/files/a.bin").absoluteString)
              out=a.bin
            \(f.server.url("/files/b.bin").absoluteString)\t\t\(f.server.url("/files/b-copy").absoluteString)

            """.write(to: list, atomically: true, encoding: .utf8)
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run(["get", "-i", list.path, "-d", out.path, "--journal", journal])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("a.bin").path)) == sha256(a))
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("b.bin").path)) == sha256(b))
            #expect(run.stdout.contains("2 completed, 0 failed"))
            #expect(run.stdout.contains("source dropped \(f.server.url("/files/missing-a").absoluteString)"))
            // b's mirror was never needed
            #expect(f.server.requests(path: "/files/b-copy").isEmpty)
        }
    }

    @Test func mirrorIsForASingleURLAndMustBeHTTP() async throws {
        let several = try await Haul.run([
            "get", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b", "--mirror", "http://127.0.0.1:1/c", "--journal",
            "/nonexistent/j",
        ])
        #expect(several.status == 2)
        #expect(several.stderr.contains("--mirror can only be used with a single URL"))
        let ftp = try await Haul.run(["get", "http://127.0.0.1:1/a", "--mirror", "ftp://x/a", "--journal", "/nonexistent/j"])
        #expect(ftp.status == 2)
        #expect(ftp.stderr.contains("'ftp://x/a' is not an http or https URL"))
    }
}
