import Foundation
import Haul
import HaulTestSupport
import Testing

/// What `haul` says, and the habits of wget, curl and aria2c it honours (issue 44): a bare
/// URL, `-c`, an unchanged file that says so, a summary of what moved, and `haul pause`'s
/// own exit status.
@Suite("haul (CLI): habits and honest summaries")
struct CLIHabitsTests {
    /// `haul URL` is `haul get URL` (it was "Unexpected argument"); `haul` alone still shows
    /// what it can do.
    @Test func aBareURLIsAGet() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("bare.bin", count: 20_000)
            let url = f.server.url("/files/bare.bin").absoluteString
            let run = try await Haul.run([url, "-d", f.directory.path, "--journal", journal])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(f.contents("bare.bin")) == sha256(bytes))
            #expect(run.stdout.contains("completed \(url)"), "\(run.stdout)")

            let alone = try await Haul.run([])
            #expect(alone.status == 0)
            #expect(alone.stdout.contains("OVERVIEW:"), "\(alone.stdout)")
            #expect(alone.stdout.contains("get (default)"), "\(alone.stdout)")
        }
    }

    /// `-c` and `--continue` (wget's and curl's) are accepted and change nothing: haul
    /// always continues a partial file. Before, both were "Unknown option".
    @Test(arguments: ["-c", "--continue"])
    func continueIsAcceptedAndChangesNothing(flag: String) async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("c.bin", count: 30_000)
            let run = try await Haul.run(
                ["get", flag, "-q", f.server.url("/files/c.bin").absoluteString, "-d", f.directory.path, "--journal", journal])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(f.contents("c.bin")) == sha256(bytes))
        }
    }

    /// A download repeated once it completed costs one conditional request; it says
    /// `unchanged`, the summary counts it so, and nothing is said to have moved. Before:
    /// `completed … (48.8 KiB)` and `1 completed, 0 failed, 48.8 KiB in 0.0 s`.
    @Test func anUnchangedFileSaysSo() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("same.bin", count: 50_000)
            let url = f.server.url("/files/same.bin").absoluteString
            let arguments = ["get", url, "-d", f.directory.path, "--journal", journal]
            let first = try await Haul.run(arguments)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(first.stdout.contains("1 completed, 0 failed: 48.8 KiB transferred in "), "\(first.stdout)")

            let again = try await Haul.run(arguments)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(f.server.requests(path: "/files/same.bin").count == 2)
            #expect(f.server.bytesServed(path: "/files/same.bin") == 50_000)
            let path = f.file("same.bin").path
            #expect(again.stdout.contains("unchanged \(url) -> \(path) (48.8 KiB)"), "\(again.stdout)")
            #expect(!again.stdout.contains("completed \(url)"), "\(again.stdout)")
            #expect(again.stdout.contains("0 completed, 1 unchanged, 0 failed: 0 B transferred in "), "\(again.stdout)")

            let json = try await Haul.run(arguments + ["--json"])
            #expect(json.status == 0, "\(json.stderr)")
            let objects = json.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            let completed = try #require(objects.first { $0["event"] as? String == "completed" })
            #expect(completed["unchanged"] as? Bool == true)
            #expect(completed["transferred"] as? Int == 0)
            let summary = try #require(objects.last)
            #expect(summary["event"] as? String == "summary")
            #expect(summary["completed"] as? Int == 0)
            #expect(summary["unchanged"] as? Int == 1)
            #expect(summary["transferred"] as? Int == 0)
            #expect(summary["reused"] as? Int == 0)
        }
    }
}
