import Foundation
import HaulTestSupport
import Testing

@testable import Haul

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

            // Options first, as wget and curl take them.
            let options = try await Haul.run(["-q", "--force", "-d", f.directory.path, "--journal", journal, url])
            #expect(options.status == 0, "\(options.stderr)")
            #expect(options.stdout.isEmpty)

            let alone = try await Haul.run([])
            #expect(alone.status == 0)
            #expect(alone.stdout.contains("OVERVIEW:"), "\(alone.stdout)")
            #expect(alone.stdout.contains("haul takes a bare URL"), "\(alone.stdout)")
            let version = try await Haul.run(["--version"])
            #expect(version.status == 0 && !version.stdout.isEmpty)
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

            // The journal says so too: nothing moved, unchanged.
            let row = try #require(try await Haul.jobs(journal, all: true).first)
            #expect(row["unchanged"] as? Bool == true && row["transferred"] as? Int == 0, "\(row)")

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

    /// A failure is said once, each fact once: the line names the download, the message
    /// says what and what to do, without the URL again; where standard output and standard
    /// error are one file (a terminal, `2>&1`) the end does not repeat it. Before:
    /// `failed URL: HTTP 404 Not Found from URL`, then `haul: failed: URL: HTTP 404 Not Found
    /// from URL`.
    @Test func aFailureIsSaidOnce() async throws {
        try await CLIFixture.with { f, journal in
            let url = f.server.url("/files/missing.bin").absoluteString
            let arguments = ["get", url, "-d", f.directory.path, "--journal", journal]
            // Standard output and standard error into one pipe, as on a terminal.
            let together = try await HaulProcess(
                ["-c", #"exec "$0" "$@" 2>&1"#, Haul.executable.path] + arguments,
                executable: URL(fileURLWithPath: "/bin/sh")
            ).wait()
            #expect(together.status == 1)
            let lines = together.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains("failed \(url): HTTP 404 Not Found: the server has no file at this URL"), "\(lines)")
            #expect(lines.filter { $0.contains("404") }.count == 1, "\(lines)")

            // Apart (a script's redirections, or --quiet): the end's line is the only one
            // on standard error, in the same words.
            let quiet = try await Haul.run(arguments + ["-q"])
            #expect(quiet.status == 1)
            #expect(quiet.stderr == "haul: failed: \(url): HTTP 404 Not Found: the server has no file at this URL\n")

            // A digest that does not match: each digest named once, and what became of the file.
            f.serve("wrong.bin", count: 1_000)
            let expected = String(repeating: "0", count: 64)
            let mismatch = try await Haul.run(
                ["get", "-q", f.server.url("/files/wrong.bin").absoluteString, "--checksum", "sha-256=\(expected)", "-d",
                 f.directory.path, "--journal", journal])
            #expect(mismatch.status == 1)
            #expect(mismatch.stderr.components(separatedBy: expected).count == 2, "\(mismatch.stderr)")
            #expect(mismatch.stderr.components(separatedBy: "/files/wrong.bin").count == 2, "\(mismatch.stderr)")
            #expect(mismatch.stderr.contains("sha-256 check failed: the content's digest is "), "\(mismatch.stderr)")
            #expect(mismatch.stderr.contains("nothing was kept"), "\(mismatch.stderr)")
            #expect(!FileManager.default.fileExists(atPath: f.file("wrong.bin").path))
        }
    }

    /// `-o` takes a path, as curl's and wget's do: below `-d` (folders made), or absolute;
    /// a relative one never leaves `-d`. Before: "give a file name, not a path".
    @Test func outputTakesAPath() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("p.bin", count: 10_000)
            let url = f.server.url("/files/p.bin").absoluteString
            let below = try await Haul.run(["get", "-q", url, "-d", f.directory.path, "-o", "sub/dir/x.bin", "--journal", journal])
            #expect(below.status == 0, "\(below.stderr)")
            #expect(sha256(f.contents("sub/dir/x.bin")) == sha256(bytes))

            let absolute = f.directory.appendingPathComponent("elsewhere/y.bin").path
            let other = try await Haul.run(["get", "-q", "--force", url, "-o", absolute, "--journal", journal])
            #expect(other.status == 0, "\(other.stderr)")
            #expect(sha256(f.contents("elsewhere/y.bin")) == sha256(bytes))

            for (path, problem) in [("../z.bin", "a '..' component"), ("a//b", "an empty component"), ("a/", "an empty component")] {
                let refused = try await Haul.run(["get", "-q", url, "-d", f.directory.path, "-o", path, "--journal", journal])
                #expect(refused.status == 2, "\(path)")
                #expect(refused.stderr.contains("-o '\(path)': path has \(problem)"), "\(refused.stderr)")
            }
            #expect(!FileManager.default.fileExists(atPath: f.directory.deletingLastPathComponent().appendingPathComponent("z.bin").path))
        }
    }

    /// A download is its URL and its destination: the same URL into two directories is two
    /// journal rows, each listed with its file and each repeated for one conditional
    /// request; the URL stays the first one's ID, the second's is `URL -> PATH`, and a URL
    /// that names several downloads says which. Before: one row, and a repeat into the
    /// first directory fetched the whole file again.
    @Test func aDownloadIsItsURLAndItsDestination() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("twice.bin", count: 100_000)
            let url = f.server.url("/files/twice.bin").absoluteString
            let one = f.directory.appendingPathComponent("d1").path
            let two = f.directory.appendingPathComponent("d2").path
            for directory in [one, two] {
                let run = try await Haul.run(["get", "-q", url, "-d", directory, "--journal", journal])
                #expect(run.status == 0, "\(run.stderr)")
            }
            #expect(sha256(f.contents("d1/twice.bin")) == sha256(bytes))
            #expect(sha256(f.contents("d2/twice.bin")) == sha256(bytes))
            let second = "\(url) -> \(two)/"
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(Set(jobs.compactMap { $0["id"] as? String }) == [url, second])
            #expect(Set(jobs.compactMap { $0["destination"] as? String }) == [one + "/twice.bin", two + "/twice.bin"])

            for directory in [one, two] {
                let again = try await Haul.run(["get", url, "-d", directory, "--journal", journal])
                #expect(again.status == 0, "\(again.stderr)")
                #expect(again.stdout.contains("unchanged \(url) -> \(directory)/twice.bin (97.7 KiB)"), "\(again.stdout)")
            }
            #expect(f.server.requests(path: "/files/twice.bin").count == 4)
            #expect(f.server.bytesServed(path: "/files/twice.bin") == 200_000, "each repeat was one 304")
            #expect(try await Haul.jobs(journal, all: true).count == 2)

            let list = try await Haul.run(["list", "--all", "--journal", journal])
            #expect(list.stdout.contains("\(one)/twice.bin") && list.stdout.contains("\(two)/twice.bin"), "\(list.stdout)")

            // Handles: the URL is the first's ID; the second answers to its own.
            let byURL = try await Haul.run(["pause", url, "--journal", journal])
            #expect(byURL.stdout.contains("\(url) is already completed"), "\(byURL.stdout)")
            #expect(byURL.stderr.contains("\(url) is also the URL of '\(second)'; give that ID to act on it"), "\(byURL.stderr)")
            let byID = try await Haul.run(["pause", second, "--journal", journal])
            #expect(byID.stdout.contains("\(second) is already completed"), "\(byID.stdout)")
        }
    }

    /// A URL that names several downloads and none by its ID is refused, naming them.
    @Test func aURLThatNamesSeveralDownloadsSaysWhich() async throws {
        try await CLIFixture.with { f, journal in
            let url = f.server.url("/files/many.bin")
            let store = JournalStore(journal: try Journal(path: journal), logger: StoreConformance.logger)
            let ids = ["\(url.absoluteString) -> /a/", "\(url.absoluteString) -> /b/"]
            for id in ids {
                let request = DownloadRequest(url: url, destination: .directory(f.directory, name: nil), id: DownloadID(id))
                _ = try await store.submit([try JobRecord.make(for: request)], forcing: [], claimingUpTo: 0)
            }
            await store.close()
            let run = try await Haul.run(["pause", url.absoluteString, "--journal", journal])
            #expect(run.status == 1)
            #expect(
                run.stderr.contains("names 2 downloads (one per destination): '\(ids[0])', '\(ids[1])'; give one of these IDs"),
                "\(run.stderr)")
            let one = try await Haul.run(["pause", ids[0], "--journal", journal])
            #expect(one.status == 0, "\(one.stderr)")
        }
    }

    /// `haul list` says where each file goes: below the current directory as a relative
    /// path, elsewhere in full. Before, a NAME column could show `a.bin` twice for two
    /// directories.
    @Test func theListSaysWhereEachFileGoes() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("a.bin", count: 5_000)
            f.serve("b.bin", count: 5_000)
            let here = f.directory.appendingPathComponent("here").path
            let elsewhere = f.directory.appendingPathComponent("elsewhere").path
            for (name, directory) in [("a.bin", here + "/downloads"), ("b.bin", elsewhere)] {
                let run = try await Haul.run(
                    ["get", "-q", f.server.url("/files/\(name)").absoluteString, "-d", directory, "--journal", journal])
                #expect(run.status == 0, "\(run.stderr)")
            }
            try FileManager.default.createDirectory(atPath: here, withIntermediateDirectories: true)
            let list = try await HaulProcess(["list", "--all", "--journal", journal], directory: here).wait()
            #expect(list.status == 0, "\(list.stderr)")
            let lines = list.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first?.contains(" FILE") == true, "\(lines)")
            #expect(lines.contains { $0.contains("/files/a.bin") && $0.contains("  downloads/a.bin") }, "\(lines)")
            #expect(lines.contains { $0.contains("/files/b.bin") && $0.contains("  \(elsewhere)/b.bin") }, "\(lines)")
            // --json has the whole path.
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(Set(jobs.compactMap { $0["destination"] as? String }) == [here + "/downloads/a.bin", elsewhere + "/b.bin"])
        }
    }
}
