import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import Haul

/// `haul sync` as a process: output, exit codes, and a sync killed mid-way.
@Suite("haul sync", .timeLimit(.minutes(4)))
struct SyncCLITests {
    static func arguments(_ f: SyncFixture, _ journal: String, _ extra: [String] = []) -> [String] {
        ["sync", f.manifestURL.absoluteString, f.directory.path, "--journal", journal] + extra
    }

    @Test func syncPrintsStagesAndASummaryAndExitsZeroWhenTheDirectoryMatches() async throws {
        try await SyncCLIFixture.with { f, journal in
            try f.publish(SyncTests.tree)

            let first = try await Haul.run(Self.arguments(f, journal))
            #expect(first.status == 0, "\(first.stderr)")
            let lines = first.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "[1/5] fetch-manifest")
            #expect(lines.contains("manifest v1: 4 files"))
            #expect(lines.contains("plan: 4 to download (170.0 KiB), 0 to update (0 B), 0 to delete (0 B), 0 unchanged (0 B)"))
            #expect(lines.contains("downloaded docs/b.txt (97.7 KiB)"))
            #expect(lines.contains("[5/5] commit"))
            #expect(lines.last?.hasPrefix("synced: 4 downloaded (170.0 KiB), 0 updated (0 B), 0 deleted (0 B), 0 unchanged (0 B); 170.0 KiB transferred in ") == true)

            let second = try await Haul.run(Self.arguments(f, journal))
            #expect(second.status == 0)
            #expect(second.stdout.contains("manifest v1: 4 files, not modified\n"))
            #expect(second.stdout.contains("synced: 0 downloaded (0 B), 0 updated (0 B), 0 deleted (0 B), 4 unchanged (170.0 KiB); 0 B transferred"))
        }
    }

    @Test func dryRunPrintsThePlanAndExitsOneWhileChangesArePending() async throws {
        try await SyncCLIFixture.with { f, journal in
            try f.publish(SyncTests.tree)

            let pending = try await Haul.run(Self.arguments(f, journal, ["--dry-run"]))
            #expect(pending.status == 1)
            #expect(pending.stdout.contains("download docs/deep/c.bin (68.4 KiB)\n"))
            #expect(pending.stdout.hasSuffix("dry run: 4 changes\n"))
            #expect(!FileManager.default.fileExists(atPath: f.directory.path))

            #expect(try await Haul.run(Self.arguments(f, journal)).status == 0)
            let clean = try await Haul.run(Self.arguments(f, journal, ["--dry-run"]))
            #expect(clean.status == 0)
            #expect(clean.stdout.hasSuffix("dry run: up to date\n"))
        }
    }

    @Test func jsonModeAndAFailedFileGiveExitOne() async throws {
        try await SyncCLIFixture.with { f, journal in
            try f.publish(SyncTests.tree, query: ["a.txt": "fail=404"])

            let run = try await Haul.run(Self.arguments(f, journal, ["--json"]))

            #expect(run.status == 1)
            let objects = run.stdout.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(objects.count == run.stdout.split(separator: "\n").count)
            #expect(objects.compactMap { $0["stage"] as? String } == ["fetch-manifest", "plan", "transfer", "verify"])
            let failed = try #require(objects.first { $0["event"] as? String == "failed" })
            #expect(failed["path"] as? String == "a.txt")
            #expect(failed["code"] as? String == "httpStatus")
            let summary = try #require(objects.last)
            #expect(summary["event"] as? String == "summary")
            #expect(summary["matches"] as? Bool == false)
            #expect(summary["downloaded"] as? Int == 3)
        }
    }

    @Test func aMissingManifestIsAClearErrorWithExitOne() async throws {
        try await SyncCLIFixture.with { f, journal in
            let run = try await Haul.run(Self.arguments(f, journal))
            #expect(run.status == 1)
            #expect(run.stderr.contains("haul: sync failed: no manifest at \(f.manifestURL.absoluteString) (HTTP 404 Not Found)"))
        }
    }

    /// Six files finish, two stall; the process is killed; the rerun fetches only the two.
    @Test(arguments: [false, true])
    func aKilledSyncFinishesOnRerunWithoutDownloadingCompletedFilesAgain(atomic: Bool) async throws {
        try await SyncCLIFixture.with { f, journal in
            var files: [String: [UInt8]] = [:]
            for index in 0..<8 {
                files["set/file\(index).bin"] = FaultServer.randomBytes(count: 300_000, seed: UInt64(index))
            }
            let stalled = ["set/file3.bin", "set/file6.bin"]
            try f.publish(files, query: Dictionary(uniqueKeysWithValues: stalled.map { ($0, "stall_after=100000&stall_times=1") }))
            let arguments = Self.arguments(f, journal, ["--json", "-j", "8"] + (atomic ? ["--atomic"] : []))

            // Killed once the six other files are done.
            let done = Locked(0)
            let first = try await Haul.run(arguments) { line in
                guard line.contains("\"event\":\"file\"") else { return nil }
                return done.withLock { count in
                    count += 1
                    return count == 6 ? SIGKILL : nil
                }
            }
            #expect(first.status == 128 + SIGKILL || first.status == SIGKILL)
            let target = atomic ? f.directory.deletingLastPathComponent().appendingPathComponent(".haul-staging-mirror") : f.directory
            // What the rerun may keep of each stalled partial: all of it when the killed run
            // recorded the boot it wrote it in (a kill loses nothing the kernel has), else
            // what it had checkpointed (before its first checkpoint, nothing: the bytes may
            // be from an earlier boot). A loaded machine may kill it before either.
            let rows = try DatabaseQueue(path: journal)
            let kept = try stalled.map { path in
                let partial = target.appendingPathComponent(path).path + ".haul-partial"
                let length = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
                let row = try rows.read { db in
                    try Row.fetchOne(db, sql: "SELECT bytesCommitted, bootID FROM job WHERE partialPath = ?", arguments: [partial])
                }
                let committed: Int = row?["bytesCommitted"] ?? 0
                let boot: String? = row?["bootID"]
                return boot == ProcessIdentity.bootID ? length : min(length, committed)
            }
            try rows.close()
            if atomic { #expect(f.tree().isEmpty) }

            let second = try await Haul.run(arguments)

            #expect(second.status == 0, "\(second.stderr)")
            for (path, bytes) in files { #expect(sha256(f.contents(path)) == sha256(bytes), "\(path)") }
            for path in files.keys where !stalled.contains(path) {
                #expect(f.server.requests(path: "/files/content/" + path).count == 1, "\(path) fetched again")
            }
            for (path, kept) in zip(stalled, kept) {
                let requests = f.server.requests(path: "/files/content/" + path)
                #expect(requests.count == 2)
                #expect(requests.last?.header("Range") == (kept > 0 ? "bytes=\(kept)-" : nil), "\(path)")
            }
            #expect(!f.tree().contains { $0.contains(".haul-") })
        }
    }
}

/// A sync fixture with a journal path of its own.
enum SyncCLIFixture {
    static func with(_ body: (SyncFixture, String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-journal-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await SyncFixture.with { f in try await body(f, directory.appendingPathComponent("journal.sqlite").path) }
    }
}
