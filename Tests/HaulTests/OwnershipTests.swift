import Foundation
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import Haul

/// Who runs a job: liveness from the kernel (a lock the owner holds), following a job
/// another process runs, and taking over the job of one that died.
@Suite("Ownership and following", .timeLimit(.minutes(3)))
struct OwnershipTests {
    // MARK: - A second `haul get` of a running download

    @Test func aSecondGetFollowsTheRunningOneAndExitsZeroOnlyWithTheFile() async throws {
        try await CLIFixture.with { f, journal in
            // Given a haul downloading a file, held at the server
            let bytes = f.serve("shared", count: 300_000)
            let url = f.server.url("/files/shared?gate=g").absoluteString
            let first = try HaulProcess(["get", url, "-d", f.directory.path, "--json", "--journal", journal])
            await f.server.waitForGateWaiters("g", count: 1)

            // When a second haul is asked for the same download
            let second = try HaulProcess(["get", url, "-d", f.directory.path, "--json", "--journal", journal])
            let attached = try #require(await second.line { $0.contains("\"event\":\"attached\"") })

            // Then it follows the first one, named by its PID, rather than exiting at once
            #expect(attached.contains("\"pid\":\(first.pid)"))
            f.server.release("g")
            let firstRun = await first.wait()
            let secondRun = await second.wait()
            #expect(firstRun.status == 0, "\(firstRun.stderr)")
            #expect(secondRun.status == 0, "\(secondRun.stderr)")
            #expect(sha256(f.contents("shared")) == sha256(bytes))
            let completed = try #require(secondRun.stdout.split(separator: "\n").first { $0.contains("\"completed\"") })
            #expect(completed.contains("\"transferred\":0"))
            #expect(secondRun.stdout.contains("\"completed\":1"))
            // One transfer only
            #expect(f.server.requests(path: "/files/shared").count == 1)
        }
    }

    @Test func noWaitExitsOneNamingTheProcess() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("busy", count: 1000)
            let url = f.server.url("/files/busy?gate=g").absoluteString
            let first = try HaulProcess(["get", url, "-d", f.directory.path, "--quiet", "--journal", journal])
            await f.server.waitForGateWaiters("g", count: 1)

            let second = try await Haul.run(["get", url, "-d", f.directory.path, "--no-wait", "--journal", journal])
            #expect(second.status == 1)
            #expect(second.stderr.contains("haul process \(first.pid)"), "\(second.stderr)")
            #expect(second.stdout.contains("1 run by another process"), "\(second.stdout)")

            f.server.release("g")
            #expect(await first.wait().status == 0)
        }
    }

    @Test func ctrlCDetachesAndLeavesTheOwnerRunning() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("detach", count: 50_000)
            let url = f.server.url("/files/detach?gate=g").absoluteString
            let first = try HaulProcess(["get", url, "-d", f.directory.path, "--quiet", "--journal", journal])
            await f.server.waitForGateWaiters("g", count: 1)
            let second = try HaulProcess(["get", url, "-d", f.directory.path, "--journal", journal])
            #expect(await second.line { $0.hasPrefix("attached ") } != nil)

            second.send(SIGINT)
            #expect(await second.wait().status == 130)

            // The owner never noticed: it finishes the file.
            f.server.release("g")
            let firstRun = await first.wait()
            #expect(firstRun.status == 0, "\(firstRun.stderr)")
            #expect(sha256(f.contents("detach")) == sha256(bytes))
        }
    }

    @Test func theFollowerExitsPausedWhenTheOwnerPausesIt() async throws {
        try await CLIFixture.with { f, journal in
            f.serve("paused", count: 50_000)
            let url = f.server.url("/files/paused?gate=g").absoluteString
            let first = try HaulProcess(["get", url, "-d", f.directory.path, "--quiet", "--journal", journal])
            await f.server.waitForGateWaiters("g", count: 1)
            let second = try HaulProcess(["get", url, "-d", f.directory.path, "--journal", journal])
            #expect(await second.line { $0.hasPrefix("attached ") } != nil)

            #expect(try await Haul.run(["pause", url, "--journal", journal]).status == 0)
            #expect(await first.wait().status == 3)
            let secondRun = await second.wait()
            #expect(secondRun.status == 3)
            #expect(secondRun.stdout.contains("paused \(url)"), "\(secondRun.stdout)")
            #expect(!FileManager.default.fileExists(atPath: f.file("paused").path))
        }
    }

    // MARK: - Dead owners

    /// A `haul` killed under a parent that never reaps it stays a zombie, and `kill(pid, 0)`
    /// still succeeds on a zombie; its lock, though, died with it.
    @Test func aZombieOwnersDownloadIsTakenOverAtOnce() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("zombie", count: 200_000)
            let url = f.server.url("/files/zombie?gate=g").absoluteString
            // Given a haul whose parent (tail, after sh execs it) never reaps its children
            let output = ExecClosedPipe()
            let parent = try ChildProcess(
                executable: "/bin/sh",
                arguments: [
                    "-c", "\"$0\" \"$@\" & echo $!; exec tail -f /dev/null", Haul.executable.path, "get", url, "-d",
                    f.directory.path, "--quiet", "--journal", journal,
                ],
                environment: Haul.environment, standardOutput: .descriptor(output.fileHandleForWriting.fileDescriptor))
            try output.fileHandleForWriting.close()
            defer { parent.signal(SIGKILL) }
            await f.server.waitForGateWaiters("g", count: 1)
            // (The shell printed the PID before the download could reach the server.)
            let text = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
            let pid = try #require(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))

            // When it is killed mid-download, and the same command runs again
            kill(pid, SIGKILL)
            f.server.release("g")
            let again = try await Haul.run(["get", url, "-d", f.directory.path, "--journal", journal])

            // Then the second run takes the download over and exits 0 with the file
            #expect(again.status == 0, "\(again.stderr)")
            #expect(sha256(f.contents("zombie")) == sha256(bytes))
            // (and the first one was indeed a zombie all along)
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            #expect(stat.contains(") Z "), "expected a zombie: \(stat)")
            parent.signal(SIGKILL)
            _ = await parent.wait()
        }
    }

    /// A row owned by a number that is a live PID (here 1, which always exists): what an old
    /// journal, a reused PID or another PID namespace leaves. It names no live owner.
    @Test func aLivePIDInTheJournalHoldsNothing() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("reused", count: 100_000)
            let url = f.server.url("/files/reused").absoluteString
            // Given a journal whose row for the URL says "running, owned by 1"
            let first = try await Haul.run(["get", url, "-d", f.directory.path, "--quiet", "--journal", journal])
            #expect(first.status == 0)
            try FileManager.default.removeItem(at: f.file("reused"))
            let database = try DatabaseQueue(path: journal)
            try await database.write { db in
                try db.execute(sql: "UPDATE job SET state = 'running', owner = 1, session = 1, filePath = NULL")
            }
            try database.close()

            // When the download is asked for again
            let again = try await Haul.run(["get", url, "-d", f.directory.path, "--journal", journal])

            // Then it is taken over, not left to "process 1"
            #expect(again.status == 0, "\(again.stderr)")
            #expect(sha256(f.contents("reused")) == sha256(bytes))
            #expect(again.stdout.contains("1 completed"))
        }
    }

    /// Two PID namespaces sharing one journal: the haul inside is PID 1 there; outside, PID
    /// 1 is init. The lock says who is alive, in both directions.
    @Test func anotherPIDNamespaceSharesTheJournal() async throws {
        let probe = try? ChildProcess(executable: "/usr/bin/unshare", arguments: ["--pid", "--fork", "--kill-child", "true"])
        let runs = await probe?.wait().succeeded ?? false
        guard runs else {
            print("skipped anotherPIDNamespaceSharesTheJournal: unshare --pid cannot run here (needs root or user namespaces)")
            return
        }
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("ns", count: 200_000)
            let url = f.server.url("/files/ns?gate=g").absoluteString
            // Given a haul in a PID namespace of its own, downloading
            let inside = try HaulProcess(
                ["--pid", "--fork", "--kill-child", Haul.executable.path, "get", url, "-d", f.directory.path, "--quiet",
                 "--journal", journal],
                executable: URL(fileURLWithPath: "/usr/bin/unshare"))
            await f.server.waitForGateWaiters("g", count: 1)

            // When a haul outside asks for the same download, it follows the one inside
            let outside = try HaulProcess(["get", url, "-d", f.directory.path, "--json", "--journal", journal])
            let attached = try #require(await outside.line { $0.contains("\"event\":\"attached\"") })
            #expect(attached.contains("\"pid\":1,"), "\(attached)")

            // and when the one inside dies, it takes the download over and finishes it
            inside.send(SIGKILL)
            _ = await inside.wait()
            f.server.release("g")
            let run = await outside.wait()
            #expect(run.status == 0, "\(run.stderr)")
            #expect(sha256(f.contents("ns")) == sha256(bytes))
        }
    }

    // MARK: - The library

    @Test func aDownloadAnotherJournalInstanceRunsIsFollowedNotRepeated() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("lib", count: 100_000)
            let journalPath = try #require(f.journal?.writer.path)
            // Given a download running in one manager (one journal instance: one owner)
            let running = try await f.manager.download(f.request("/files/lib?gate=g", to: "lib"))
            await f.server.waitForGateWaiters("g", count: 1)

            // When a manager on another instance of the journal asks for it, and for it
            // again through enqueue
            let other = DownloadManager(configuration: f.configuration, journal: try Journal(path: journalPath), eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
            let events = other.events
            let follower = try await other.download(f.request("/files/lib?gate=g", to: "lib"))
            var attached: JournalOwner?
            for await event in events {
                if case .attached(let owner) = event.event {
                    attached = owner
                    break
                }
            }
            #expect(attached?.pid == getpid())

            // Then it gets the verified file when the first one completes, with no transfer
            f.server.release("g")
            _ = try await running.result
            let result = try await follower.result
            #expect(result.fileURL == f.file("lib"))
            #expect(result.bytesTransferred == 0)
            #expect(sha256(f.contents("lib")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/lib").count == 1)
            await other.shutdown()
        }
    }

    // MARK: - Nothing fetched twice

    @Test func aCompletedDownloadIsRevalidatedNotFetchedAgain() async throws {
        try await CLIFixture.with { f, journal in
            let bytes = f.serve("same", count: 150_000, etag: .custom("v1"))
            let url = f.server.url("/files/same").absoluteString
            let arguments = ["get", url, "-d", f.directory.path, "--json", "--journal", journal]
            #expect(try await Haul.run(arguments).status == 0)
            let saved = try FileManager.default.attributesOfItem(atPath: f.file("same").path)

            // Again, unchanged: one conditional request, answered 304; nothing transferred
            let again = try await Haul.run(arguments)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(again.stdout.contains("\"transferred\":0"), "\(again.stdout)")
            let requests = f.server.requests(path: "/files/same")
            #expect(requests.count == 2)
            #expect(requests.last?.header("If-None-Match") == "\"v1\"")
            #expect(f.server.bytesServed(path: "/files/same") == 150_000)
            let kept = try FileManager.default.attributesOfItem(atPath: f.file("same").path)
            #expect(kept[.modificationDate] as? Date == saved[.modificationDate] as? Date)
            #expect(sha256(f.contents("same")) == sha256(bytes))

            // Changed on the server: downloaded, replacing the file
            let changed = f.serve("same", count: 120_000, seed: 9, etag: .custom("v2"))
            let third = try await Haul.run(arguments)
            #expect(third.status == 0)
            #expect(third.stdout.contains("\"transferred\":120000"))
            #expect(sha256(f.contents("same")) == sha256(changed))

            // --force: no conditional request
            let forced = try await Haul.run(arguments + ["--force"])
            #expect(forced.status == 0)
            #expect(f.server.requests(path: "/files/same").last?.header("If-None-Match") == nil)
            #expect(forced.stdout.contains("\"transferred\":120000"))

            // Changed locally: downloaded again, no conditional request
            try Data("local edit".utf8).write(to: f.file("same"))
            let edited = try await Haul.run(arguments)
            #expect(edited.status == 0)
            #expect(f.server.requests(path: "/files/same").last?.header("If-None-Match") == nil)
            #expect(sha256(f.contents("same")) == sha256(changed))
            #expect(f.listing() == ["same"])
        }
    }
}
