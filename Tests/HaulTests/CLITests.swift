import Foundation
import Haul
import HaulTestSupport
import Testing

/// End-to-end tests of the built `haul` binary against the fault server.
@Suite("haul (CLI)")
struct CLITests {
    /// `--journal NAME` without a directory is a file in the current directory (it failed:
    /// "cannot create the journal's directory"; and a name of one character crashed the
    /// process, in Foundation's `deletingLastPathComponent`).
    @Test(arguments: ["j.sqlite", "j"])
    func aJournalNamedWithoutADirectoryIsInTheCurrentOne(name: String) async throws {
        try await CLIFixture.with { f, _ in
            let bytes = f.serve("here.bin", count: 1000)
            let run = try await HaulProcess(
                ["get", f.server.url("/files/here.bin").absoluteString, "-d", f.directory.path, "--journal", name],
                directory: f.directory.path
            ).wait()
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(f.contents("here.bin")) == sha256(bytes))
            #expect(FileManager.default.fileExists(atPath: f.file(name).path))
        }
    }

    @Test func downloadsAndReportsOneLinePerStateChange() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("cli.bin", count: 200_000)
            let run = try await Haul.run([
                "get", f.server.url("/files/cli.bin").absoluteString, "-d", f.directory.path, "--journal", journal,
            ])
            #expect(run.status == 0)
            #expect(sha256(f.contents("cli.bin")) == sha256(bytes))
            #expect(run.stdout.contains("started \(f.server.url("/files/cli.bin").absoluteString)"))
            #expect(run.stdout.contains("completed"))
            #expect(run.stdout.contains("1 completed, 0 failed"))
            #expect(run.stderr.isEmpty)
        }
    }

    /// A subcommand parses its arguments on its own (``HaulCommand.directSubcommand(of:)``,
    /// which skips the root's completion-script check), yet says everything as it would
    /// under the root: its usage, the help to read, and the root's own flags after its name.
    @Test(arguments: ["get", "list", "pause", "resume", "clean"])
    func aSubcommandsUsageErrorNamesItAsTheRootDoes(command: String) async throws {
        let run = try await Haul.run([command, "--no-such-option", "--journal", "/nonexistent/j"])
        #expect(run.status == 2)
        #expect(run.stderr.hasPrefix("Error: "), "\(run.stderr)")
        #expect(run.stderr.contains("\nUsage: haul \(command) "), "\(run.stderr)")
        #expect(run.stderr.contains("\n  See 'haul \(command) --help' for more information."), "\(run.stderr)")
    }

    @Test func theRootsFlagsStillWorkAfterASubcommand() async throws {
        let version = try await Haul.run(["get", "--version"])
        #expect(version.status == 0)
        #expect(version.stdout.split(separator: "\n") == ["0.1.0"])
        let help = try await Haul.run(["get", "http://127.0.0.1:1/a", "-h"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("USAGE: haul get [<options>] [<url> ...]"), "\(help.stdout)")
        let script = try await Haul.run(["get", "--generate-completion-script", "bash"])
        #expect(script.status == 0)
        #expect(script.stdout.contains("\n_haul_get() {"), "\(script.stdout.prefix(300))")
    }

    @Test func aRateLimitIsSpelledOutWhenItIsNotOne() async throws {
        let run = try await Haul.run(["get", "http://127.0.0.1:1/a", "--limit-rate", "fast", "--journal", "/nonexistent/j"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("'fast' is not a rate"))
        #expect(run.stderr.contains("500K, 2M, 1.5MiB"))
    }

    @Test func progressLinesCarryTheLimitInEffect() async throws {
        try await CLIFixture.with { f, journal in
            // About a second at 1 MiB/s, past the first quarter second's burst: progress
            // lines are printed while it runs
            f.serve("l.bin", count: 1_300_000)
            let url = f.server.url("/files/l.bin").absoluteString
            let run = try await Haul.run(
                ["get", url, "-d", f.directory.path, "--json", "--limit-rate", "1M", "--journal", journal])
            #expect(run.status == 0)
            let progress = try run.stdout.split(separator: "\n").compactMap { line -> [String: Any]? in
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                return object["event"] as? String == "progress" ? object : nil
            }
            #expect(!progress.isEmpty)
            #expect(progress.allSatisfy { $0["limit"] as? Int == 1 << 20 })
        }
    }

    @Test func aPerHostCapLowerThanXClampsItWithOneWarning() async throws {
        try await CLIFixture.with { f, journal in
            // Given a file large enough to split, whose responses trickle (so that splitting
            // pays at once) until the test has seen four
            let bytes = f.serve("x.bin", count: 20 << 20)
            let url = f.server.url("/files/x.bin?gate=split&gate_after=0&gate_rate=\(256 << 10)").absoluteString

            // When -x 8 is asked for with --per-host 4
            async let running = Haul.run(
                ["get", url, "-o", "x.bin", "-d", f.directory.path, "-q", "-x", "8", "--per-host", "4", "--journal", journal])
            await f.server.waitForRequests(count: 4, path: "/files/x.bin")
            f.server.release("split")
            let run = try await running

            // Then one line says so, and the file came over 4 connections
            #expect(run.status == 0, "\(run.stderr)")
            #expect(
                run.stderr.components(separatedBy: "\n").filter { $0.contains("is more than --per-host 4") }.count == 1,
                "\(run.stderr)")
            #expect(sha256(FileManager.default.contents(atPath: f.file("x.bin").path)) == sha256(bytes))
            // (the first response, joined by three ranged requests for the rest)
            let requests = f.server.requests(path: "/files/x.bin")
            #expect(requests.first?.header("Range") == nil)
            let ranged = requests.compactMap { $0.header("Range") }
            // the rest divided 4 ways, not 8: three adjacent parts up to the end
            let parts = ranged.prefix(3).compactMap { range -> [Int]? in
                let bounds = range.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
                return bounds.count == 2 ? bounds : nil
            }.sorted { $0[0] < $1[0] }
            #expect(parts.count == 3, "\(ranged)")
            #expect(parts.last?[1] == (20 << 20) - 1, "\(ranged)")
            #expect(zip(parts, parts.dropFirst()).allSatisfy { $0[1] + 1 == $1[0] }, "\(ranged)")
            #expect(f.server.statistics.maxInFlightRequests >= 4)
        }
    }

    @Test func jsonModePrintsOneEventObjectPerLine() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("j.bin", count: 100_000)
            let url = f.server.url("/files/j.bin").absoluteString
            let run = try await Haul.run(["get", url, "-d", f.directory.path, "--json", "--journal", journal])
            #expect(run.status == 0)
            let objects = try run.stdout.split(separator: "\n").map { line in
                try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            }
            let kinds = objects.compactMap { $0["event"] as? String }
            #expect(kinds.first == "queued")
            #expect(kinds.contains("started"))
            #expect(kinds.last == "summary")
            let completed = try #require(objects.first { $0["event"] as? String == "completed" })
            #expect(completed["id"] as? String == url)
            #expect(completed["bytes"] as? Int == 100_000)
            #expect(completed["path"] as? String == f.file("j.bin").path)
            #expect(objects.allSatisfy { $0["time"] is String })
        }
    }

    @Test func failuresExitNonZeroWithOneLinePerFailure() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("ok", count: 10)
            let missing = f.server.url("/status/404").absoluteString
            let run = try await Haul.run([
                "get", f.server.url("/files/ok").absoluteString, missing, "-d", f.directory.path, "--retries", "0",
                "--journal", journal,
            ])
            #expect(run.status == 1)
            let lines = run.stderr.split(separator: "\n")
            #expect(lines.count == 1)
            #expect(lines.first?.hasPrefix("haul: failed: \(missing): HTTP 404") == true)
            #expect(f.listing() == ["ok"])
        }
    }

    @Test(arguments: [
        ["get", "ftp://example.com/file"],
        ["get", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b", "-o", "one"],
        ["get", "http://127.0.0.1:1/a", "--checksum", "sha-256=xyz"],
        ["get", "http://127.0.0.1:1/a", "--header", "no colon"],
        ["get"],
        ["get", "http://127.0.0.1:1/a", "--quiet", "--json"],
        ["resume", "-j", "0"],
        ["get", "http://127.0.0.1:1/a", "--limit-rate", "fast"],
        ["get", "http://127.0.0.1:1/a", "--limit-rate", "0"],
        ["get", "http://127.0.0.1:1/a", "--max-overall-rate", "2X"],
        ["resume", "--max-host-rate", "1.5.2M"],
        ["pause"],
        ["cancel", "http://127.0.0.1:1/a", "--all"],
        ["retry"],
        ["retry", "--all"],
    ])
    func badInputIsAUsageError(arguments: [String]) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-usage-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let journal = directory.appendingPathComponent("journal.sqlite").path
        let run = try await Haul.run(arguments + ["--journal", journal])
        #expect(run.status == 2)
        #expect(!run.stderr.isEmpty)
        // Usage errors are found before the journal is opened.
        #expect(!FileManager.default.fileExists(atPath: journal))
    }

    /// What the chosen backend refuses of the options (``BackendChoice/refusal(of:)``) is a
    /// usage error that says why, found before anything is opened. The backend is chosen
    /// as the command runs, not while its arguments are parsed: the message still comes
    /// with the command's usage and help line, as a parse error's does.
    @Test(arguments: [
        (
            ["get", "--queue", "postgres://u@127.0.0.1:1/db", "-o", "s3://bucket/key", "http://127.0.0.1:1/a"],
            "Error: s3:// destinations are not for --queue: a shared queue's objects go where its workers put them (haul worker -d s3://bucket/prefix/).\n"
        ),
        (
            ["get", "--queue", "postgres://u@127.0.0.1:1/db", "--secret-header", "A: b", "http://127.0.0.1:1/a"],
            "Error: --secret-header with --queue: the shared queue stores headers in the clear, so it does not take credentials\n"
        ),
        (
            ["get", "--detach", "http://127.0.0.1:1/a"],
            "Error: --detach needs a running 'haul serve' for the journal.\n"
        ),
        (["pause", "--queue", "postgres://u@127.0.0.1:1/db"], "Error: give the IDs of the jobs\n"),
        (["cancel"], "Error: Give the IDs of the downloads, or --all.\n"),
        (["retry", "some-id", "--all-failed"], "Error: Give either IDs or --all-failed, not both.\n"),
        (
            ["list", "--queue", "postgres://u:secret@127.0.0.1:1/db"],
            "Error: the queue's password must not be given on the command line, where other users can see it: put it in PGPASSWORD or ~/.pgpass, or give the whole URL in HAUL_QUEUE_URL\n"
        ),
    ])
    func aBackendsRefusalIsAUsageErrorThatSaysWhy(arguments: [String], message: String) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-refusal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let journal = directory.appendingPathComponent("journal.sqlite").path
        let command = arguments[0]
        let run = try await Haul.run(arguments + ["--journal", journal])
        #expect(run.status == 2)
        #expect(run.stderr.hasPrefix(message + "Usage: haul \(command) "), "\(run.stderr)")
        #expect(run.stderr.hasSuffix("\n  See 'haul \(command) --help' for more information.\n"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: journal))
    }

    @Test func inputFileWithOptionLines() async throws {
        try await CLIFixture.with { f, journal in
            let a = f.serve("a", count: 1000, seed: 1)
            let b = f.serve("b", count: 2000, seed: 2)
            let digest = TransferTests.digest(b, .sha256)
            let list = """
                # a comment, then a blank line

                \(f.server.url("/files/a").absoluteString)
                  out=first.dat
                \(f.server.url("/files/b").absoluteString)
                \tchecksum=sha-256=\(digest)
                """
            let input = f.directory.appendingPathComponent("list.txt")
            try list.write(to: input, atomically: true, encoding: .utf8)
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run(["get", "-i", input.path, "-d", out.path, "--quiet", "--journal", journal])
            #expect(run.status == 0)
            #expect(run.stdout.isEmpty)
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("first.dat").path)) == sha256(Data(a)))
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("b").path)) == sha256(Data(b)))

            try (list + "\n  colour=blue\n").write(to: input, atomically: true, encoding: .utf8)
            let bad = try await Haul.run(["get", "-i", input.path, "-d", out.path, "--journal", journal])
            #expect(bad.status == 2)
            #expect(bad.stderr.contains("list.txt', line 7"))
        }
    }

    @Test func wrongChecksumFailsAndLeavesNoFile() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("w", count: 1000)
            let run = try await Haul.run([
                "get", f.server.url("/files/w").absoluteString, "-d", f.directory.path,
                "--checksum", "md5=" + String(repeating: "0", count: 32), "--journal", journal,
            ])
            #expect(run.status == 1)
            #expect(run.stderr.contains("md5 check failed"))
            #expect(f.listing().isEmpty)
        }
    }

    @Test func interruptKeepsThePartialAndTheSameCommandResumes() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("big", count: 2_000_000)
            let url = f.server.url("/files/big?stall_after=500000&stall_times=1").absoluteString
            let arguments = ["get", url, "-d", f.directory.path, "--json", "--journal", journal]
            // Interrupt once bytes are on disk.
            let first = try await Haul.run(arguments) { line in
                line.contains("\"event\":\"progress\"") ? SIGINT : nil
            }
            #expect(first.status == 130)
            #expect(first.stderr.contains("interrupted"))
            let partial = f.file("big.haul-partial").path
            let kept = try #require(try FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int)
            #expect(kept > 0)
            #expect(!FileManager.default.fileExists(atPath: f.file("big").path))

            let second = try await Haul.run(arguments)
            #expect(second.status == 0)
            #expect(sha256(f.contents("big")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/big").last?.header("Range") == "bytes=\(kept)-")
            #expect(f.listing() == ["big"])
        }
    }

    // MARK: - The journal

    @Test func listShowsWhatGetDownloaded() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("l.bin", count: 150_000)
            let url = f.server.url("/files/l.bin").absoluteString
            let run = try await Haul.run(["get", url, "-d", f.directory.path, "--quiet", "--journal", journal])
            #expect(run.status == 0)

            let jobs = try await Haul.jobs(journal, all: true)
            #expect(jobs.count == 1)
            let job = try #require(jobs.first)
            #expect(job["id"] as? String == url)
            #expect(job["url"] as? String == url)
            #expect(job["state"] as? String == "completed")
            #expect(job["bytes"] as? Int == 150_000)
            #expect(job["total"] as? Int == 150_000)
            #expect(job["destination"] as? String == f.file("l.bin").path)
            #expect(job["name"] as? String == "l.bin")
            #expect(job["error"] is NSNull)
            #expect((job["finishedAt"] as? String)?.hasSuffix("Z") == true)

            // Finished jobs only show with --all.
            #expect(try await Haul.jobs(journal).isEmpty)
            let table = try await Haul.run(["list", "--all", "--journal", journal])
            #expect(table.status == 0)
            let lines = table.stdout.split(separator: "\n")
            #expect(lines.count == 2)
            #expect(lines.first?.hasPrefix("ID") == true)
            #expect(lines.first?.contains("STATE") == true)
            // Not on a terminal: the full URL, never shortened.
            #expect(lines.last?.hasPrefix(url + " ") == true)
            #expect(lines.last?.contains("completed") == true)
            #expect(lines.last?.contains("146.5 KiB / 146.5 KiB 100%") == true)
        }
    }

    /// A `haul get` killed with SIGKILL leaves its row `running`, with no more bytes than
    /// its last checkpoint (none, for a small file), while its partial file holds what was
    /// written: `haul list` shows what is true, a download paused (its process is dead)
    /// with the bytes on disk.
    @Test(.timeLimit(.minutes(4)))
    func listShowsAKilledDownloadPausedWithTheBytesOnDisk() async throws {
        try await CLIFixture.with { f, journal in
            // Given: a download killed while its server stalls after 300,000 bytes
            f.serve("k.bin", count: 2_000_000)
            let url = f.server.url("/files/k.bin?stall_after=300000").absoluteString
            let killed = try await Haul.run(["get", url, "-d", f.directory.path, "--json", "--journal", journal]) { line in
                guard line.contains("\"event\":\"progress\""),
                    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let bytes = object["bytes"] as? Int
                else { return nil }
                return bytes >= 300_000 ? SIGKILL : nil
            }
            #expect(killed.status == SIGKILL)
            let attributes = try FileManager.default.attributesOfItem(atPath: f.file("k.bin.haul-partial").path)
            let onDisk = try #require(attributes[.size] as? Int)
            #expect(onDisk == 300_000)

            // When
            let jobs = try await Haul.jobs(journal)
            let table = try await Haul.run(["list", "--journal", journal])

            // Then
            let job = try #require(jobs.first)
            #expect(jobs.count == 1)
            #expect(job["state"] as? String == "paused")
            #expect(job["bytes"] as? Int == onDisk)
            #expect(job["speed"] as? Int == 0)
            #expect(table.status == 0)
            let row = try #require(table.stdout.split(separator: "\n").last.map(String.init))
            #expect(row.hasPrefix(url + " "))
            #expect(row.contains(" paused "), "\(row)")
            #expect(!row.contains("running"), "\(row)")
            #expect(row.contains("293.0 KiB"), "\(row)")
        }
    }

    @Test(.timeLimit(.minutes(4)))
    func pauseFromAnotherProcessThenResume() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("slow", count: 2_000_000)
            let url = f.server.url("/files/slow?stall_after=300000&stall_times=1").absoluteString
            // --timeout 600: the stall lasts until the pause, however long `haul pause` waits
            // for its turn on a loaded machine (a 60 s idle timeout would retry and complete).
            let running = try HaulProcess(
                ["get", url, "-d", f.directory.path, "--json", "--timeout", "600", "--journal", journal])
            // Every byte before the stall has arrived.
            let progress = await running.line { $0.contains("\"event\":\"progress\"") && $0.contains("\"bytes\":300000") }
            #expect(progress != nil)

            let pause = try await Haul.run(["pause", url, "--journal", journal])
            #expect(pause.status == 0)
            #expect(pause.stdout == "asked the running haul to pause \(url)\n")
            // The running haul pauses the download, then, with nothing else to do, ends.
            let paused = await running.line { $0.contains("\"event\":\"paused\"") }
            #expect(paused?.contains(url) == true)
            // A pause is not a failure: its own exit status (it was 1, as for a failure).
            let first = await running.wait()
            #expect(first.status == 3)
            #expect(first.stderr.contains("1 download paused"))
            #expect(!first.stderr.contains("failed"))
            let summary = first.stdout.split(separator: "\n").last ?? ""
            #expect(summary.contains("\"event\":\"summary\""))
            #expect(summary.contains("\"paused\":1"))
            // What moved before the pause is counted (it said 0 B).
            #expect(summary.contains("\"transferred\":300000"), "\(summary)")

            let jobs = try await Haul.jobs(journal)
            #expect(jobs.count == 1)
            #expect(jobs.first?["state"] as? String == "paused")
            #expect(FileManager.default.fileExists(atPath: f.file("slow.haul-partial").path))
            #expect(!FileManager.default.fileExists(atPath: f.file("slow").path))

            let pauseAgain = try await Haul.run(["pause", url, "--journal", journal])
            #expect(pauseAgain.stdout == "\(url) is already paused\n")

            let resumed = try await Haul.run(["resume", "--journal", journal])
            #expect(resumed.status == 0)
            #expect(resumed.stdout.contains("completed \(url)"))
            // The resume moved the rest and reused the partial: the speed is of what moved.
            #expect(resumed.stdout.contains("1 completed, 0 failed: 1.6 MiB transferred in "), "\(resumed.stdout)")
            #expect(resumed.stdout.contains(", 293.0 KiB reused"), "\(resumed.stdout)")
            #expect(sha256(f.contents("slow")) == sha256(bytes))
            #expect(f.listing() == ["slow"])
            let range = f.server.requests(path: "/files/slow").last?.header("Range")
            #expect(range?.hasPrefix("bytes=") == true && range != "bytes=0-")
            let done = try #require(try await Haul.jobs(journal, all: true).first)
            #expect(done["state"] as? String == "completed")
            // The journal keeps what the completing run moved: the rest, not the partial.
            #expect(done["transferred"] as? Int == bytes.count - 300_000, "\(done)")
            #expect(done["unchanged"] as? Bool == false)

            let nothing = try await Haul.run(["resume", "--journal", journal])
            #expect(nothing.status == 0)
            #expect(nothing.stdout == "nothing to resume\n")
        }
    }

    @Test func cancelDeletesThePartialOfAPausedDownload() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("c.bin", count: 1_000_000)
            let url = f.server.url("/files/c.bin?stall_after=200000&stall_times=1").absoluteString
            let first = try await Haul.run(["get", url, "-d", f.directory.path, "--json", "--journal", journal]) {
                line in line.contains("\"event\":\"progress\"") ? SIGINT : nil
            }
            #expect(first.status == 130)
            #expect(FileManager.default.fileExists(atPath: f.file("c.bin.haul-partial").path))
            #expect(try await Haul.jobs(journal).first?["state"] as? String == "paused")

            let cancel = try await Haul.run(["cancel", url, "--journal", journal])
            #expect(cancel.status == 0)
            #expect(cancel.stdout == "cancelled \(url)\n")
            #expect(f.listing().isEmpty)
            #expect(try await Haul.jobs(journal).isEmpty)
            #expect(try await Haul.jobs(journal, all: true).first?["state"] as? String == "cancelled")

            let again = try await Haul.run(["cancel", url, "--journal", journal])
            #expect(again.status == 0)
            #expect(again.stdout == "\(url) is already cancelled\n")

            let missing = f.server.url("/files/none").absoluteString
            let unknown = try await Haul.run(["cancel", missing, url, "--journal", journal])
            #expect(unknown.status == 1)
            #expect(unknown.stderr == "haul: no job \(missing)\n")
            #expect(unknown.stdout == "\(url) is already cancelled\n")

            let all = try await Haul.run(["cancel", "--all", "--journal", journal])
            #expect(all.status == 0)
            #expect(all.stdout == "nothing to cancel\n")
        }
    }

    @Test func retryQueuesAFailedDownloadForResume() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("r.bin", count: 50_000)
            let url = f.server.url("/files/r.bin?fail=500&fail_times=1").absoluteString
            let first = try await Haul.run([
                "get", url, "-d", f.directory.path, "--retries", "0", "--journal", journal,
            ])
            #expect(first.status == 1)
            #expect(first.stderr.hasPrefix("haul: failed: \(url): HTTP 500"))
            let failed = try #require(try await Haul.jobs(journal).first)
            #expect(failed["state"] as? String == "failed")
            #expect(failed["errorCode"] as? String == "httpStatus")

            let retry = try await Haul.run(["retry", "--all-failed", "--journal", journal])
            #expect(retry.status == 0)
            #expect(retry.stdout == "queued \(url)\nrun 'haul resume' to download it\n")
            #expect(try await Haul.jobs(journal).first?["state"] as? String == "queued")

            let resumed = try await Haul.run(["resume", "--journal", journal, "--json"])
            #expect(resumed.status == 0)
            #expect(sha256(f.contents("r.bin")) == sha256(bytes))

            let none = try await Haul.run(["retry", "--all-failed", "--journal", journal])
            #expect(none.stdout == "no failed jobs\n")
            let done = try await Haul.run(["retry", url, "--journal", journal])
            #expect(done.stdout == "\(url) is already completed\n")
        }
    }

    @Test func cleanRemovesFinishedJobsAndOrphanedPartials() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("k.bin", count: 10_000)
            let url = f.server.url("/files/k.bin").absoluteString
            #expect(try await Haul.run(["get", url, "-d", f.directory.path, "--journal", journal]).status == 0)
            try Data(repeating: 7, count: 100).write(to: f.file("stray.iso.haul-partial"))
            try Data("{}".utf8).write(to: f.file("stray.iso.haul-meta"))

            let clean = try await Haul.run(["clean", "--journal", journal])
            #expect(clean.status == 0)
            #expect(clean.stdout == "removed 1 finished job and 1 orphaned partial file\n")
            #expect(f.listing() == ["k.bin"])
            #expect(sha256(f.contents("k.bin")) == sha256(bytes))
            #expect(try await Haul.jobs(journal, all: true).isEmpty)

            let again = try await Haul.run(["clean", "--journal", journal])
            #expect(again.stdout == "removed 0 finished jobs and 0 orphaned partial files\n")
        }
    }

    @Test(.timeLimit(.minutes(3)))
    func longInputFileIsQueuedAWindowAtATime() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("m", count: 300)
            let count = 2_000
            var list = "# many copies of one file\n"
            for index in 0..<count {
                list += f.server.url("/files/m?n=\(index)").absoluteString + "\n  out=m-\(index)\n"
            }
            let input = f.directory.appendingPathComponent("many.txt")
            try list.write(to: input, atomically: true, encoding: .utf8)
            let out = f.directory.appendingPathComponent("out")
            let run = try await Haul.run([
                "get", "-i", input.path, "-d", out.path, "-j", "16", "--per-host", "16", "--journal", journal,
            ])
            #expect(run.status == 0)
            #expect(run.stderr.isEmpty)
            #expect(run.stdout.contains("\(count) completed, 0 failed"))
            let names = try FileManager.default.contentsOfDirectory(atPath: out.path)
            #expect(names.count == count)
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("m-1999").path)) == sha256(Data(bytes)))
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(jobs.count == count)
            #expect(jobs.allSatisfy { $0["state"] as? String == "completed" })
        }
    }

    @Test func urlsThatWouldShareAFileAreRejectedAsDuplicates() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("d", count: 1000)
            let one = f.server.url("/files/d?n=1").absoluteString
            let two = f.server.url("/files/d?n=2").absoluteString
            // From standard input; the same URL twice is one download.
            let list = "\(one)\n\(two)\n\(one)\n"
            let run = try await Haul.run(
                ["get", "-i", "-", "-d", f.directory.path, "--json", "--journal", journal], input: Data(list.utf8))
            #expect(run.status == 1)
            #expect(run.stderr.hasPrefix("haul: failed: \(two): another URL in the list would be saved to the same file (d)"))
            #expect(run.stderr.split(separator: "\n").count == 1)
            #expect(run.stdout.contains("\"code\":\"duplicate\""))
            #expect(sha256(f.contents("d")) == sha256(bytes))
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(jobs.map { $0["id"] as? String } == [one])
        }
    }

    /// A header value must stay on one line, whatever ends it: "\r\n" is one Character in
    /// Swift, equal to neither "\r" nor "\n", and once slipped through a check written so.
    @Test(arguments: ["a\r\nInjected: 1", "a\nInjected: 1", "a\rInjected: 1"])
    func headerValuesWithLineBreaksAreRefused(value: String) async throws {
        try await CLIFixture.with { f, journal in
            let run = try await Haul.run([
                "get", f.server.url("/files/x").absoluteString, "-d", f.directory.path, "--journal", journal,
                "--header", "X-Test: \(value)",
            ])
            #expect(run.status != 0)
            #expect(run.stderr.contains("must be on one line"), "\(run.stderr)")
            #expect(f.server.requests(path: "/files/x").isEmpty)
        }
    }
}

/// A fault-server fixture and a journal path of its own, removed afterwards, so that
/// tests never touch the user's journal.
enum CLIFixture {
    static func with(_ body: (Fixture, String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-journal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let journal = directory.appendingPathComponent("journal.sqlite").path
        try await Fixture.with { f in try await body(f, journal) }
    }
}

/// Runs the `haul` executable built next to the test bundle.
enum Haul {
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("haul")
    }

    /// Runs `haul` with `arguments` to the end, with `input` on standard input. `signal`
    /// sees each stdout line and may return a signal to send to the process (once).
    static func run(
        _ arguments: [String], input: Data? = nil, environment: [String: String]? = nil,
        signal: (@Sendable (String) -> Int32?)? = nil
    ) async throws -> Run {
        try await commandSlots.run {
            try await HaulProcess(arguments, input: input, environment: environment, signal: signal).wait()
        }
    }

    /// At most four short-lived `haul` commands at once across the whole test run (services
    /// and workers started with ``HaulProcess`` are not counted). Every suite runs in
    /// parallel, and an unoptimized `haul` spends about 0.3 s of CPU starting; dozens at
    /// once on two cores starve the tests that run in this process (their transfers' idle
    /// timeouts and their time limits run out while they wait for a core).
    static let commandSlots = ProcessSlots(4)

    /// The test process's environment without proxy variables, so that a proxy set where
    /// the tests run does not carry their requests to 127.0.0.1 away: what `haul` runs
    /// with unless a test gives its own (starting from this).
    static var environment: [String: String] {
        let proxyNames: Set = ["http_proxy", "https_proxy", "all_proxy", "no_proxy", "netrc"]
        return ProcessInfo.processInfo.environment.filter { !proxyNames.contains($0.key.lowercased()) }
    }

    /// The jobs `haul list --json` shows (with `--all`: every job).
    static func jobs(_ journal: String, all: Bool = false) async throws -> [[String: Any]] {
        let run = try await run(["list", "--json", "--journal", journal] + (all ? ["--all"] : []))
        #expect(run.status == 0)
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [[String: Any]])
    }
}

/// A running `haul` process whose output lines can be awaited.
final class HaulProcess: @unchecked Sendable {
    private let process: ChildProcess
    // Kept alive (their read ends open) until ``wait()`` has read them to the end.
    private let stdout = ExecClosedPipe()
    private let stderr = ExecClosedPipe()
    private let output: OutputCollector
    private let errors = OutputCollector(signal: nil)
    private let stdoutDone: AsyncStream<Void>
    private let stderrDone: AsyncStream<Void>

    /// Starts `haul` with `arguments`; see ``Haul/run(_:input:signal:)``.
    init(
        _ arguments: [String], input: Data? = nil, environment: [String: String]? = nil,
        signal: (@Sendable (String) -> Int32?)? = nil, executable: URL = Haul.executable, directory: String? = nil
    ) throws {
        let stdin = input.map { _ in ExecClosedPipe() }
        process = try ChildProcess(
            executable: executable.path, arguments: arguments, environment: environment ?? Haul.environment,
            standardInput: stdin.map { .descriptor($0.fileHandleForReading.fileDescriptor) } ?? .null,
            standardOutput: .descriptor(stdout.fileHandleForWriting.fileDescriptor),
            standardError: .descriptor(stderr.fileHandleForWriting.fileDescriptor), directory: directory)
        output = OutputCollector(signal: signal)
        let process = self.process
        let output = self.output
        let errors = self.errors
        // The child has its ends now; with the parent's closed, its output ends when it does.
        try? stdout.fileHandleForWriting.close()
        try? stderr.fileHandleForWriting.close()
        try? stdin?.fileHandleForReading.close()
        // Blocking reads on threads of their own rather than `readabilityHandler`: on Linux
        // a dispatch read source can outlive its descriptor and crash libdispatch's event
        // loop when the number is reused.
        stdoutDone = Self.pump(stdout.fileHandleForReading.fileDescriptor, end: output.end) { data in
            if let signal = output.append(data) { process.signal(signal) }
        }
        stderrDone = Self.pump(stderr.fileHandleForReading.fileDescriptor, end: errors.end) { data in
            _ = errors.append(data)
        }
        if let input, let writer = stdin?.fileHandleForWriting {
            DispatchQueue.global().async {
                writer.write(input)
                try? writer.close()
            }
        }
    }

    /// Reads `descriptor` to its end on a thread of its own, then calls `end`; the stream
    /// finishes after that.
    private static func pump(
        _ descriptor: Int32, end: @escaping @Sendable () -> Void, _ deliver: @escaping @Sendable (Data) -> Void
    ) -> AsyncStream<Void> {
        let (done, finished) = AsyncStream.makeStream(of: Void.self)
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                deliver(Data(buffer[..<count]))
            }
            end()
            finished.finish()
        }
        thread.start()
        return done
    }

    /// The process's ID.
    var pid: Int32 { process.pid }

    /// Whether the process has not ended yet.
    var isRunning: Bool { !process.hasExited }

    /// Sends `signal` to the process.
    func send(_ signal: Int32) { process.signal(signal) }

    /// The first stdout line that `matches`, waiting for it; `nil` if the process ends first.
    func line(where matches: @escaping @Sendable (String) -> Bool) async -> String? {
        await output.firstLine(where: matches)
    }

    /// The first stderr line that `matches`, waiting for it; `nil` if the process ends first.
    func errorLine(where matches: @escaping @Sendable (String) -> Bool) async -> String? {
        await errors.firstLine(where: matches)
    }

    /// Everything the process printed on stderr so far.
    var errorText: String { errors.text }

    /// Waits for the process to end; returns its status and everything it printed.
    func wait() async -> Haul.Run {
        let status = await process.wait().code
        for await _ in stdoutDone {}
        for await _ in stderrDone {}
        return Haul.Run(status: status, stdout: output.text, stderr: errors.text)
    }
}

/// Collects a process's output; thread-safe because the reading threads append to it.
final class OutputCollector: @unchecked Sendable {
    private struct Waiter {
        var matches: @Sendable (String) -> Bool
        var continuation: CheckedContinuation<String?, Never>
    }

    private let lock = NSLock()
    private var data = Data()
    private var scanned = 0
    private var lines: [String] = []
    private var waiters: [Waiter] = []
    private var ended = false
    private var signalled = false
    private let signal: (@Sendable (String) -> Int32?)?

    init(signal: (@Sendable (String) -> Int32?)?) { self.signal = signal }

    /// Appends output; returns a signal to send when a complete line asks for one.
    func append(_ chunk: Data) -> Int32? {
        lock.lock()
        data.append(chunk)
        var fresh: [String] = []
        while let newline = data[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
            fresh.append(String(decoding: data[scanned..<newline], as: UTF8.self))
            scanned = newline + 1
        }
        lines += fresh
        var send: Int32?
        if let signal, !signalled {
            for line in fresh {
                if let number = signal(line) {
                    signalled = true
                    send = number
                    break
                }
            }
        }
        var ready: [(CheckedContinuation<String?, Never>, String)] = []
        waiters.removeAll { waiter in
            guard let line = fresh.first(where: waiter.matches) else { return false }
            ready.append((waiter.continuation, line))
            return true
        }
        lock.unlock()
        for (continuation, line) in ready { continuation.resume(returning: line) }
        return send
    }

    /// The first complete line that `matches`, waiting for it; `nil` once output ended.
    func firstLine(where matches: @escaping @Sendable (String) -> Bool) async -> String? {
        await withCheckedContinuation { continuation in
            lock.lock()
            if let line = lines.first(where: matches) {
                lock.unlock()
                continuation.resume(returning: line)
            } else if ended {
                lock.unlock()
                continuation.resume(returning: nil)
            } else {
                waiters.append(Waiter(matches: matches, continuation: continuation))
                lock.unlock()
            }
        }
    }

    /// Marks the output complete: waiting callers get `nil`.
    func end() {
        lock.lock()
        ended = true
        let waiting = waiters
        waiters = []
        lock.unlock()
        for waiter in waiting { waiter.continuation.resume(returning: nil) }
    }

    var text: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A counting semaphore for child processes that waits without holding a thread.
actor ProcessSlots {
    private var free: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(_ count: Int) { free = count }

    /// Runs `body` once a slot is free, and frees it after.
    nonisolated func run<T: Sendable>(_ body: @Sendable () async throws -> T) async throws -> T {
        await acquire()
        do {
            let value = try await body()
            await release()
            return value
        } catch {
            await release()
            throw error
        }
    }

    private func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiters.append($0) }
    }

    private func release() {
        if waiters.isEmpty {
            free += 1
        } else {
            waiters.removeFirst().resume()
        }
    }
}
