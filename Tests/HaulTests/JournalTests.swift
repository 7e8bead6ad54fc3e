import Foundation
import Logging
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import Haul

@Suite("Journal and recovery")
struct JournalTests {
    @Test func recordsEachDownloadDurably() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("a", count: 300_000)
            let url = f.server.url("/files/a")
            let result = try await f.manager.download(f.request("/files/a")).result
            await f.manager.shutdown()
            let job = try #require(try f.journal!.job(DownloadID(url.absoluteString)))
            #expect(job.state == .completed)
            #expect(job.bytes == 300_000)
            #expect(job.destination == f.file("a").path)
            #expect(job.finishedAt != nil)
            #expect(result.byteCount == Int64(bytes.count))
        }
    }

    /// What moved, in the library as on the command line: a download resumed from a
    /// partial counts only what it fetched, a repeat answered `304` is unchanged, and the
    /// manager's progress and the journal's rows say both.
    @Test func whatMovedIsCountedAndJournaled() async throws {
        try await Fixture.with(journal: true) { f in
            f.serve("a", count: 300_000)
            let first = try await f.manager.download(f.request("/files/a")).result
            let again = try await f.manager.download(f.request("/files/a")).result
            #expect(!first.isUnchanged && first.bytesTransferred == 300_000)
            #expect(again.isUnchanged && again.bytesTransferred == 0)
            let progress = await f.manager.progress
            #expect(progress.completed == 2 && progress.unchanged == 1)
            #expect(progress.transferredBytes == 300_000 && progress.completedBytes == 600_000)
            await f.manager.flushJournal()
            let job = try #require(try f.journal!.job(first.id))
            #expect(job.isUnchanged && job.bytesTransferred == 0)
        }
    }

    @Test func aRowDecodedByPositionEqualsItDecodedByName() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-row-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let journal = try Journal(path: directory.appendingPathComponent("journal.sqlite").path)
        let (byName, byPosition, columns) = try journal.write { db in
            // Every column holds a value of its own, so a column read from the wrong place shows.
            try db.execute(
                sql: """
                    INSERT INTO job (id, url, finalURL, destinationKind, destinationPath, destinationName, partialPath,
                        state, priority, attempts, bytesCommitted, totalBytes, validator, expectedSize, checksum, headers,
                        lastError, createdAt, updatedAt, finishedAt, owner, session, bootID, command, errorCode,
                        bytesPerSecond, filePath, fileSize, fileModified, fileValidator, credentials, maxBytesPerSecond)
                    VALUES ('i', 'u', 'f', 'directory', '/d', 'n', '/d/n.haul-partial', 'paused', 2, 3, 4, 5, 'v', 6,
                        'c', 'h', 'e', '2026-01-01 00:00:01.000', '2026-01-01 00:00:02.000', '2026-01-01 00:00:03.000',
                        7, 8, 'b', 'resume', 'ec', 9.5, '/d/n', 10, 11, 'fv', 'cr', 12)
                    """)
            let byName = try #require(try JobRecord.fetchOne(db, sql: "SELECT * FROM job"))
            let row = try #require(try Row.fetchOne(db, sql: "SELECT \(JobRecord.selection) FROM job"))
            let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(job)").map { $0["name"] as String }
            return (byName, try JobRecord(selected: row), columns)
        }
        #expect(byPosition == byName)
        #expect(byName.maxBytesPerSecond == 12 && byName.fileValidator == "fv" && byName.bootID == "b")
        // A column added to the table must be added to the selection too.
        let selected = JobRecord.selection.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        #expect(selected.sorted() == columns.sorted())
        #expect(selected.count == JobRecord.selectionCount)
    }

    @Test func pauseRecordsOnlyWhatIsOnDisk() async throws {
        try await Fixture.with(journal: true) { f in
            f.serve("p", count: 1 << 20)
            let handle = try await f.manager.download(f.request("/files/p?stall_after=400000&stall_times=1"))
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await f.manager.pauseAll()
            let job = try #require(try f.journal!.job(handle.id))
            let length = try #require(try FileManager.default.attributesOfItem(atPath: f.file("p.haul-partial").path)[.size] as? Int)
            #expect(job.state == .paused)
            #expect(job.bytes == Int64(length))
            #expect(length > 0)
        }
    }

    /// After a reboot only fsynced bytes count; after a process crash the file's length does.
    @Test(arguments: [true, false])
    func restartTrustsThePartialOnlyWithinTheSameBoot(sameBoot: Bool) async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("r", count: 1 << 20)
            let handle = try await f.manager.download(f.request("/files/r?stall_after=600000&stall_times=1"))
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await f.manager.pauseAll()
            await f.manager.shutdown()
            let partial = f.file("r.haul-partial").path
            let length = try #require(try FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int)
            try #require(length > 10)

            // Pretend the journal's last checkpoint covered only 10 bytes, in this boot or another.
            try await f.journal!.writer.write { db in
                try db.execute(
                    sql: "UPDATE job SET bytesCommitted = 10, bootID = ? WHERE id = ?",
                    arguments: [sameBoot ? ProcessIdentity.bootID : "another-boot", handle.id.rawValue])
            }
            let restarted = f.makeManager()
            #expect(try await restarted.resumeUnfinished() == 1)
            await restarted.waitUntilIdle()
            await restarted.shutdown()

            #expect(sha256(f.contents("r")) == sha256(bytes))
            let resumedAt = sameBoot ? length : 10
            #expect(f.server.requests(path: "/files/r").last?.header("Range") == "bytes=\(resumedAt)-")
            #expect(try f.journal!.job(handle.id)?.state == .completed)
        }
    }

    @Test func admitsQueuedJobsAWindowAtATime() async throws {
        let window = 24
        try await Fixture.with(journal: true, {
            $0.admissionWindow = window
            $0.maxConcurrentDownloads = 8
        }) { f in
            let bytes = f.serve("w", count: 2_000)
            let count = 1_000
            let events = f.manager.events
            let requests = (0..<count).map { f.request("/files/w?n=\($0)", to: "w\($0)") }
            let watcher = Task { () -> Int in
                var largest = 0
                for await event in events {
                    guard case .completed = event.event else { continue }
                    let progress = await f.manager.progress
                    largest = max(largest, progress.queued + progress.running)
                }
                return largest
            }
            try await f.manager.enqueue(requests)
            await f.manager.waitUntilIdle()
            await f.manager.shutdown()
            let largest = await watcher.value
            #expect(largest <= window + 8)
            #expect(try f.journal!.jobs(in: [.completed]).count == count)
            #expect(sha256(f.contents("w999")) == sha256(bytes))
            #expect(f.server.statistics.maxInFlightRequests <= 8)
        }
    }

    @Test func obeysCommandsLeftInTheJournal() async throws {
        try await Fixture.with(journal: true, { $0.journalPollInterval = .milliseconds(20) }) { f in
            f.serve("c", count: 1 << 20)
            let handle = try await f.manager.download(f.request("/files/c?stall_after=300000&stall_times=1"))
            let events = handle.events
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            // What `haul pause ID` in another process leaves for the owner.
            try await f.journal!.writer.write { db in
                try db.execute(sql: "UPDATE job SET command = 'pause' WHERE id = ?", arguments: [handle.id.rawValue])
            }
            await firstEvent(events) { event -> Bool? in
                if case .paused = event { return true }
                return nil
            }
            try await f.journal!.writer.write { db in
                try db.execute(sql: "UPDATE job SET command = 'resume' WHERE id = ?", arguments: [handle.id.rawValue])
            }
            _ = try await handle.result
            #expect(f.server.requests(path: "/files/c").last?.header("Range") != nil)
        }
    }

    @Test func waitsForTheNetworkAndResumesOnItsOwn() async throws {
        // A loopback address of its own: while this server is down, a server another test
        // starts on 127.0.0.1 may be given its port, and the retry would reach that one.
        try await Fixture.with(serverHost: "127.0.0.2", {
            $0.networkProbeDelay = .milliseconds(20)
            $0.maxNetworkProbeDelay = .milliseconds(100)
            // The retry right after the server goes away may be handed the connection it just
            // closed, before the client's pool has noticed (a write to a closed socket: a
            // reset, which is not a sign of the network); the next one finds nobody
            // listening and checks the network. Three leave room for that.
            $0.retry.maxRetries = 3
            // The stall must outlast any slowness of the machine: the server going away
            // ends it, not a timeout.
            $0.idleTimeout = .seconds(120)
        }) { f in
            // The response stalls after 1 MB, so the server is gone before the end however
            // slow the machine; the revived server's resume (0.5 MB) stays under the stall.
            let bytes = FaultServer.randomBytes(count: 1_500_000, seed: 9)
            f.server.setFile("n", bytes, etag: .custom("stable"), lastModified: .none)
            let port = f.server.port
            let handle = try await f.manager.download(f.request("/files/n?stall_after=1000000&stall_times=1"))
            let events = handle.events
            // The server goes away only once all it sends before the stall has arrived: taken
            // down earlier, the revived server's resume would run into its own stall and wait
            // out the idle timeout.
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes >= 1_000_000 { return true }
                return nil
            }
            // The server goes away mid-download...
            try await f.server.shutdown()
            var seen: [String] = []
            let lost = await firstEvent(events) { event -> String? in
                seen.append("\(event)")
                if case .networkLost(let host) = event { return host }
                return nil
            }
            #expect(lost == "127.0.0.2", "events after the server went away: \(seen)")
            #expect(await f.manager.progress.waiting == 1)

            // ...and comes back on the same port.
            let revived = try await FaultServer.start(host: "127.0.0.2", port: port)
            revived.setFile("n", bytes, etag: .custom("stable"), lastModified: .none)
            let restored = await firstEvent(events) { event -> String? in
                if case .networkRestored(let host) = event { return host }
                return nil
            }
            #expect(restored == "127.0.0.2")
            let result = try await handle.result
            #expect(sha256(f.contents("n")) == sha256(bytes))
            #expect(revived.requests(path: "/files/n").first?.header("Range") != nil)
            #expect(result.bytesTransferred < Int64(bytes.count) + 200_000)
            try await revived.shutdown()
        }
    }

    @Test(.enabled(if: SmallFilesystem.isSupported, "cannot mount a tmpfs here (needs root)"))
    func fullDiskFailsUpFrontWhenTheSizeIsKnown() async throws {
        let small = try SmallFilesystem(bytes: 1 << 20)
        defer { small.unmount() }
        try await Fixture.with(journal: true) { f in
            f.serve("big", count: 4 << 20)
            let handle = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/big"), destination: .directory(small.mountPoint)))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .diskFull)
            #expect(!FileManager.default.fileExists(atPath: small.mountPoint.appendingPathComponent("big").path))
            await f.manager.shutdown()
            #expect(try f.journal!.job(handle.id)?.state == .paused)
        }
    }

    @Test(.enabled(if: SmallFilesystem.isSupported, "cannot mount a tmpfs here (needs root)"))
    func fullDiskPausesKeepsThePartialAndResumesOnceFreed() async throws {
        let small = try SmallFilesystem(bytes: 1 << 20)
        defer { small.unmount() }
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("grow", count: 3 << 20)
            // Chunked: no size up front, so the disk fills mid-transfer.
            let handle = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/grow?chunked=1"), destination: .directory(small.mountPoint)))
            let error = try #require(await failure(of: handle))
            #expect(error.code == .diskFull)
            #expect(error.message.contains("no space left"))
            let partial = small.mountPoint.appendingPathComponent("grow.haul-partial").path
            let kept = try #require(try FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int)
            #expect(kept > 0)
            #expect(!FileManager.default.fileExists(atPath: small.mountPoint.appendingPathComponent("grow").path))
            await f.manager.shutdown()
            #expect(try f.journal!.job(handle.id)?.state == .paused)

            // Space is freed; `haul resume` continues from the partial.
            #expect(small.resize(to: 16 << 20))
            let restarted = f.makeManager()
            #expect(try await restarted.resumeUnfinished() == 1)
            await restarted.waitUntilIdle()
            await restarted.shutdown()
            #expect(sha256(FileManager.default.contents(atPath: small.mountPoint.appendingPathComponent("grow").path)) == sha256(Data(bytes)))
            #expect(f.server.requests(path: "/files/grow").last?.header("Range") == "bytes=\(kept)-")
        }
    }

    @Test func aBatchSkipsStartsAndCheckpointsOfJobsItCompletes() {
        let batch: [JournalWriter.Operation] = [
            .started(id: "a", owner: 1),
            .checkpoint(id: "a", bytes: 10, total: 20, validator: nil, bytesPerSecond: 0, bootID: nil),
            .started(id: "b", owner: 1),
            .completed(id: "a", bytes: 20, transferred: 20, unchanged: false, finalURL: "http://x/a", path: nil, file: nil),
            .started(id: "a", owner: 1),
        ]
        let kept = JournalWriter.coalesced(batch).map { operation -> String in
            switch operation {
            case .started(let id, _): "started \(id)"
            case .checkpoint(let id, _, _, _, _, _): "checkpoint \(id)"
            case .completed(let id, _, _, _, _, _, _): "completed \(id)"
            default: "other"
            }
        }
        // b never completes here, and a starts again after its completion: both kept.
        #expect(kept == ["started b", "completed a", "started a"])
    }

    /// When the journal writer waits for more operations before a write. A wakeup whose
    /// operation already went out with an earlier batch (a flush took it) finds nothing
    /// pending: it must not wait, or `close()` waits for the whole pause (20 ms at the end of
    /// every `haul` command).
    @Test func theWriterPausesOnlyWithSomethingToGatherAndNobodyWaiting() throws {
        let attempt = JournalWriter.Operation.attempt(id: "a", 1)
        let claim = JournalWriter.Operation.claim(
            try RedirectPolicyTests.record(for: RedirectPolicyTests.request()), owner: 1, force: false,
            reply: { _ in })
        #expect(JournalWriter.pauses(pending: [], flushing: false) == false)
        #expect(JournalWriter.pauses(pending: [attempt], flushing: false) == true)
        #expect(JournalWriter.pauses(pending: [attempt], flushing: true) == false)
        #expect(JournalWriter.pauses(pending: [attempt, claim], flushing: false) == false)
        let full = Array(repeating: attempt, count: JournalWriter.batchTarget)
        #expect(JournalWriter.pauses(pending: full, flushing: false) == false)
    }

    /// With an hour's pause, closing after a flush still returns (within the time limit).
    @Test(.timeLimit(.minutes(4)))
    func closingAfterAFlushDoesNotWaitForAPause() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-w-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let journal = try Journal(path: path)
        let writer = JournalWriter(journal: journal, logger: Logger(label: "test"), gatherDelay: .seconds(3600))
        writer.submit(.attempt(id: "a", 1))
        writer.submit(.attempt(id: "a", 2))
        await writer.flush()
        await writer.close()
    }

    @Test func aNewJournalHasTheSchemaTheMigrationsBuildOneByOne() throws {
        // Given the schema GRDB's migrator builds, a transaction per migration
        let stepwise = try DatabaseQueue()
        try Journal.migrator.migrate(stepwise)
        // When a new journal is made, every migration in one transaction
        let made = try Journal(writer: DatabaseQueue())
        // Then the two have the same tables, indexes and columns, and the same record of
        // the migrations applied, so that the migrator finds nothing left to run
        func schema(_ reader: any DatabaseReader) throws -> [String] {
            try reader.read { db in
                try String.fetchAll(
                    db, sql: "SELECT type || ' ' || name || ': ' || coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
            }
        }
        #expect(try schema(made.writer) == schema(stepwise))
        #expect(try schema(made.writer).count >= 10)
        let applied = try made.writer.read { try Journal.migrator.appliedIdentifiers($0) }
        #expect(applied == Set(Journal.migrations.map(\.identifier)))
        #expect(try made.writer.read { try Journal.migrator.hasCompletedMigrations($0) })
    }

    /// A journal is current, and opened without a pass of the migrator, only when it records
    /// every migration of this release; one a newer release migrated further is current too.
    @Test func aJournalIsCurrentOnlyWithEveryMigrationRecorded() throws {
        let made = try Journal(writer: DatabaseQueue())
        #expect(try made.writer.read(Journal.isCurrent))
        // A newer release's migration recorded as well: still current (the migrator would
        // leave it alone too)
        try made.writer.write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99: from the future')")
        }
        #expect(try made.writer.read(Journal.isCurrent))
        // The last migration not recorded, or no record at all: not current
        let last = try #require(Journal.migrations.last?.identifier)
        try made.writer.write { db in
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [last])
        }
        #expect(try made.writer.read(Journal.isCurrent) == false)
        #expect(try DatabaseQueue().read(Journal.isCurrent) == false)
    }

    @Test func firstSchemaVersionOpensAndUpgrades() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("haul-v1-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        // Given a journal written by the first schema version
        do {
            let queue = try DatabaseQueue(path: path)
            try Journal.migrator.migrate(queue, upTo: "v1: jobs")
            try queue.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO job (id, url, destinationKind, destinationPath, partialPath, state, priority,
                            attempts, bytesCommitted, totalBytes, createdAt, updatedAt)
                        VALUES ('old', 'http://example.com/old.iso', 'directory', '/tmp', '/tmp/old.iso.haul-partial',
                            'paused', 2, 1, 4096, 8192, '2026-01-01 00:00:00.000', '2026-01-01 00:00:00.000')
                        """)
            }
            #expect(try queue.read { try Journal.migrator.appliedIdentifiers($0) } == ["v1: jobs"])
        }
        // When it is opened
        let journal = try Journal(path: path)
        // Then it is upgraded, and its rows are intact
        let applied = try journal.writer.read { try Journal.migrator.appliedIdentifiers($0) }
        #expect(applied == Set(Journal.migrations.map(\.identifier)))
        #expect(applied.contains("v10: webhook outbox"))
        #expect(applied.contains("v11: completed objects"))
        #expect(applied.contains("v5: credentials"))
        #expect(applied.contains("v6: completed files"))
        #expect(applied.contains("v7: speed limits"))
        #expect(applied.contains("v9: sources and pieces"))
        #expect(applied.contains("v8: connections"))
        #expect(applied.contains("v14: stream downloads"))
        // A row from before streams is no stream
        #expect(try journal.record("old")?.request().stream == nil)
        let job = try #require(try journal.job("old"))
        #expect(job.state == .paused)
        #expect(job.bytes == 4096)
        #expect(job.totalBytes == 8192)
        #expect(job.attempts == 1)
        #expect(job.destination == "/tmp/old.iso")
        #expect(try journal.retry("old") == .applied)
        #expect(try journal.job("old")?.state == .queued)
    }
}
