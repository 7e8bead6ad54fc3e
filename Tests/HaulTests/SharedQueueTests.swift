import Foundation
import HaulTestSupport
import NIOPosix
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

/// `haul worker` on a real PostgreSQL (a private cluster the tests start, one database per
/// test): workers sharing one queue, deduplication, fencing of a worker whose lease was
/// taken, rescue of expired leases, retries with backoff, the per-host cap across workers
/// and the wake-up by NOTIFY. Workers run in-process, each with its own manager.
@Suite(
    "Shared queue on PostgreSQL",
    .enabled(
        if: PostgresCluster.isAvailable,
        "PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): run .ci/run or apt-get install postgresql"),
    .timeLimit(.minutes(4)))
struct SharedQueueTests {
    /// A queue in a fresh database, a fault server, and workers started on demand.
    final class Fixture: Sendable {
        let queue: PostgresQueue
        let server: FaultServer
        let root: URL

        init() async throws {
            queue = PostgresQueue(address: try await PostgresCluster.makeDatabase())
            server = try await FaultServer.start()
            root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-" + UUID().uuidString)
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        }

        func directory(_ name: String) throws -> URL {
            let url = root.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            return url
        }

        func settings(directory: URL, slots: Int = 4, perHost: Int? = nil, lease: Duration = .seconds(60),
                      poll: Duration = .milliseconds(50)) -> QueueWorker.Settings {
            var settings = QueueWorker.Settings(directory: directory)
            settings.slots = slots
            settings.perHost = perHost
            settings.lease = lease
            settings.pollInterval = poll
            settings.retry = RetryPolicy(maxRetries: 0, baseDelay: .milliseconds(10), maxDelay: .seconds(60))
            return settings
        }

        /// Starts a worker; returns it, its ID (once it listens) and the task to cancel to stop it.
        func startWorker(_ settings: QueueWorker.Settings) async throws -> (QueueWorker, Int64, Task<Void, any Error>) {
            let worker = QueueWorker(queue: queue, settings: settings)
            let (ids, continuation) = AsyncStream.makeStream(of: Int64.self)
            let task = Task { try await worker.run(started: { continuation.yield($0) }) }
            var iterator = ids.makeAsyncIterator()
            guard let id = await iterator.next() else { throw QueueError("the worker did not start") }
            return (worker, id, task)
        }

        func stop(_ task: Task<Void, any Error>) async {
            task.cancel()
            _ = await task.result
        }

        /// Rows as `(key, state, attempt, lease_owner)`.
        func rows() async throws -> [(key: String, state: String, attempt: Int, owner: Int64?)] {
            var rows: [(key: String, state: String, attempt: Int, owner: Int64?)] = []
            for try await (key, state, attempt, owner) in try await queue.client.query(
                "SELECT key, state, attempt, lease_owner FROM haul_jobs ORDER BY id"
            ).decode((String, String, Int, Int64?).self) {
                rows.append((key, state, attempt, owner))
            }
            return rows
        }

        /// The channel a test-only trigger notifies on every change to the jobs table.
        static let rowsChannel = "haul_test_rows"

        /// Adds the trigger that announces every change to the jobs table on ``rowsChannel``.
        func notifyRowChanges() async throws {
            try await queue.client.query(
                """
                CREATE FUNCTION haul_test_rows_changed() RETURNS trigger AS $$
                BEGIN PERFORM pg_notify('haul_test_rows', ''); RETURN NULL; END $$ LANGUAGE plpgsql
                """)
            try await queue.client.query(
                """
                CREATE TRIGGER haul_test_rows AFTER INSERT OR UPDATE OR DELETE ON haul_jobs
                FOR EACH STATEMENT EXECUTE FUNCTION haul_test_rows_changed()
                """)
        }

        /// Waits until `condition` holds of the rows (see ``waitUntil(_:_:)``).
        func waitForRows(
            _ what: String, _ condition: ([(key: String, state: String, attempt: Int, owner: Int64?)]) -> Bool
        ) async throws {
            try await waitUntil(what) { condition(try await self.rows()) }
        }

        /// Waits until `condition` holds: checked once listening for changes has
        /// begun, then again on each change (no polling; the suite's time limit ends a wait
        /// that never comes true). `what` names it for a failure.
        func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
            let held = try await queue.client.withConnection { connection in
                try await connection.listen(on: Self.rowsChannel) { notifications in
                    if try await condition() { return true }
                    for try await _ in notifications where try await condition() { return true }
                    return false
                }
            }
            if !held {
                Issue.record("stopped listening before \(what): \(try await rows())")
                throw QueueError("stopped listening")
            }
        }

        func close() async throws {
            try await server.shutdown()
            try? FileManager.default.removeItem(at: root)
        }
    }

    static func with(_ body: @Sendable (Fixture) async throws -> Void) async throws {
        let fixture = try await Fixture()
        try await fixture.queue.withRunning {
            try await fixture.queue.migrate()
            try await fixture.notifyRowChanges()
            try await body(fixture)
        }
        try await fixture.close()
    }

    @Test("Migrations are named and applied once, however often workers start")
    func migrations() async throws {
        try await Self.with { f in
            try await f.queue.migrate()
            var names: [String] = []
            for try await name in try await f.queue.client.query("SELECT name FROM haul_migrations").decode(String.self) {
                names.append(name)
            }
            #expect(names == PostgresQueue.migrations.map(\.name))
        }
    }

    @Test("The deduplication key: the same ID is never queued twice")
    func deduplication() async throws {
        try await Self.with { f in
            let url = f.server.url("/files/a")
            let requests = [try QueueRequest(url: url), try QueueRequest(url: url, id: "b")]
            #expect(try await f.queue.enqueue(requests) == 2)
            let again = [try QueueRequest(url: url)]
            #expect(try await f.queue.enqueue(again) == 0)
            #expect(try await f.queue.jobs().map(\.id) == [url.absoluteString, "b"])
        }
    }

    @Test("Two workers share one queue: every job completes once, with the right bytes, each fetched once")
    func twoWorkersExactlyOnce() async throws {
        try await Self.with { f in
            // Given 60 small files, queued
            var files: [String: [UInt8]] = [:]
            for index in 0..<60 {
                let bytes = FaultServer.randomBytes(count: 1000 + index * 37, seed: UInt64(index + 1))
                files["f\(index)"] = bytes
                f.server.setFile("f\(index)", bytes)
            }
            try await f.queue.enqueue(files.keys.sorted().map { try! QueueRequest(url: f.server.url("/files/\($0)")) })
            // When two workers with one shared directory run them
            let directory = try f.directory("shared")
            let (_, one, first) = try await f.startWorker(f.settings(directory: directory))
            let (_, two, second) = try await f.startWorker(f.settings(directory: directory))
            try await f.waitForRows("every job completed") { $0.allSatisfy { $0.state == "completed" } }
            await f.stop(first)
            await f.stop(second)
            // Then each job was claimed once, by one of them, and each file fetched once
            let rows = try await f.rows()
            #expect(rows.count == 60)
            #expect(rows.allSatisfy { $0.attempt == 1 && ($0.owner == one || $0.owner == two) })
            for (name, bytes) in files {
                let saved = try Data(contentsOf: directory.appendingPathComponent(name))
                #expect(Array(saved) == bytes, "\(name)")
                #expect(f.server.requests(path: "/files/\(name)").count == 1, "\(name)")
            }
            #expect(try await f.queue.workers().isEmpty, "stopped workers unregister")
        }
    }

    @Test("A completed job queued again is revalidated: one conditional request, no body, and it completes again")
    func completedJobQueuedAgainCompletesUnchanged() async throws {
        try await Self.with { f in
            // Given a job a worker completed
            let bytes = FaultServer.randomBytes(count: 5_000, seed: 17)
            f.server.setFile("r", bytes)
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/files/r"), id: "r", name: "r.bin")])
            let directory = try f.directory("r")
            let (_, _, task) = try await f.startWorker(f.settings(directory: directory))
            // (and recorded how: the completed file, written after the rename, is what the
            // next run revalidates)
            try await f.waitUntil("the job completed, its file recorded") {
                try await f.queue.client.query(
                    "SELECT count(*)::int8 FROM haul_jobs WHERE key = 'r' AND state = 'completed' AND completed_file IS NOT NULL"
                ).decode(Int64.self).reduce(0, +) == 1
            }
            // When it is queued again as a submission queues a completed job (its completed
            // file kept, to revalidate; PostgresJobStore.submit)
            try await f.queue.client.query(
                """
                UPDATE haul_jobs SET state = 'available', scheduled_at = now(), max_attempts = attempt + 1,
                    lease_owner = NULL, lease_expires_at = NULL, finished_at = NULL, bytes_committed = 0, validator = NULL
                WHERE key = 'r'
                """)
            // Then the worker completes it again, with one conditional request and no body
            try await f.waitForRows("the job completed again") { $0.first?.state == "completed" && $0.first?.attempt == 2 }
            await f.stop(task)
            let requests = f.server.requests(path: "/files/r")
            #expect(requests.count == 2)
            #expect(requests.last?.headers.contains { $0.name.lowercased() == "if-none-match" } == true)
            let unchanged = try await f.queue.client.query("SELECT unchanged FROM haul_jobs WHERE key = 'r'")
            for try await flag in unchanged.decode(Bool.self) { #expect(flag) }
            #expect(try Array(Data(contentsOf: directory.appendingPathComponent("r.bin"))) == bytes)
        }
    }

    @Test("A worker whose lease was taken over cannot record its completion, and leaves its file where it is")
    func staleWorkerIsFenced() async throws {
        try await Self.with { f in
            // Given a job that worker A holds, its response held at a gate
            let bytes = FaultServer.randomBytes(count: 20_000, seed: 7)
            f.server.setFile("x", bytes)
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/files/x?gate=g"), id: "x", name: "x.bin")])
            // (one slot, so that A, busy, does not claim the job back itself; a lease of ten
            // minutes, so that A renews nothing while the test runs: a renewal after the
            // expiry below would give A the job back before B could take it)
            let (a, _, first) = try await f.startWorker(
                f.settings(directory: try f.directory("a"), slots: 1, lease: .seconds(600)))
            await f.server.waitForGateWaiters("g", count: 1)
            // When its lease expires (as after a long pause) and worker B takes the job over
            try await f.queue.client.query(
                "UPDATE haul_jobs SET lease_expires_at = now() - interval '1 second' WHERE key = 'x'")
            let (_, b, second) = try await f.startWorker(f.settings(directory: try f.directory("b")))
            await f.server.waitForGateWaiters("g", count: 2)
            f.server.release("g")
            try await f.waitForRows("the job completed") { $0.first?.state == "completed" }
            await a.waitUntilIdle()
            await f.stop(first)
            await f.stop(second)
            // Then B's completion stands, and A renamed nothing into place
            let row = try #require(try await f.rows().first)
            #expect(row.attempt == 2)
            #expect(row.owner == b)
            #expect(try Array(Data(contentsOf: f.root.appendingPathComponent("b/x.bin"))) == bytes)
            #expect(!FileManager.default.fileExists(atPath: f.root.appendingPathComponent("a/x.bin").path))
        }
    }

    @Test("An expired lease is rescued by another worker, which resumes from the committed bytes of the shared partial")
    func rescueResumesFromCommittedBytes() async throws {
        try await Self.with { f in
            // Given a job a vanished worker ran, with 6,000 bytes committed in the shared directory
            let bytes = FaultServer.randomBytes(count: 50_000, seed: 9)
            f.server.setFile("r", bytes)
            let directory = try f.directory("shared")
            let url = f.server.url("/files/r")
            try await f.queue.enqueue([try QueueRequest(url: url, id: "r", name: "r.bin")])
            // (the partial and its sidecar, as the vanished worker left them on shared storage)
            let paths = try #require(try PartialPaths(destination: .directory(directory, name: "r.bin"), url: url))
            try Data(bytes[0..<8_000]).write(to: URL(fileURLWithPath: paths.partial))
            let etag = try #require(f.server.etag(forFile: "r"))
            _ = try PartialMetadata(url: url.absoluteString, validator: .etag(etag), totalBytes: 50_000)
                .save(to: paths.metadata)
            try await f.queue.client.query(
                """
                UPDATE haul_jobs SET state = 'running', attempt = 1, lease_owner = 12345,
                    lease_expires_at = now() - interval '1 second', bytes_committed = 6000, total_bytes = 50000,
                    validator = \("etag:" + etag), boot_id = 'another machine'
                WHERE key = 'r'
                """)
            // When a worker starts
            let (_, id, task) = try await f.startWorker(f.settings(directory: directory))
            try await f.waitForRows("the rescued job completed") { $0.first?.state == "completed" }
            await f.stop(task)
            // Then it took the job over as attempt 2 and asked only for the bytes after the committed ones
            let row = try #require(try await f.rows().first)
            #expect(row.attempt == 2 && row.owner == id)
            #expect(try Array(Data(contentsOf: directory.appendingPathComponent("r.bin"))) == bytes)
            let request = try #require(f.server.requests(path: "/files/r").first)
            #expect(request.header("Range") == "bytes=6000-")
        }
    }

    @Test("A retryable failure goes back to the queue with scheduled_at after the backoff (Retry-After honoured), then completes")
    func retryWithBackoff() async throws {
        try await Self.with { f in
            let bytes = FaultServer.randomBytes(count: 3_000, seed: 3)
            f.server.setFile("t", bytes)
            try await f.queue.enqueue([
                try QueueRequest(url: f.server.url("/files/t?fail=503&fail_times=1&retry_after=40"), id: "t", name: "t.bin")
            ])
            let directory = try f.directory("d")
            let (_, _, task) = try await f.startWorker(f.settings(directory: directory))
            // The 503 with Retry-After: 40 puts it back 40 seconds on.
            try await f.waitForRows("the job retryable") { $0.first?.state == "retryable" }
            var delay: Double = 0
            for try await (seconds, error) in try await f.queue.client.query(
                "SELECT extract(epoch FROM scheduled_at - updated_at)::float8, last_error FROM haul_jobs"
            ).decode((Double, String?).self) {
                delay = seconds
                #expect(error?.contains("503") == true)
            }
            #expect(delay > 39 && delay < 41)
            // Once due, a worker claims it again.
            try await f.queue.client.query("UPDATE haul_jobs SET scheduled_at = now()")
            try await f.waitForRows("the job completed") { $0.first?.state == "completed" }
            await f.stop(task)
            #expect(try await f.rows().first?.attempt == 2)
            #expect(try Array(Data(contentsOf: directory.appendingPathComponent("t.bin"))) == bytes)
        }
    }

    @Test("A final failure fails the job for good; haul retry queues it again with more attempts")
    func finalFailure() async throws {
        try await Self.with { f in
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/status/404"), id: "n")])
            let (_, _, task) = try await f.startWorker(f.settings(directory: try f.directory("d")))
            try await f.waitForRows("the job failed") { $0.first?.state == "failed" }
            #expect(try await f.queue.retry(["n"]) == 1)
            try await f.waitForRows("the job failed again") { $0.first?.state == "failed" && $0.first?.attempt == 2 }
            await f.stop(task)
        }
    }

    @Test("A per-host cap holds across workers: never more than 2 requests in flight with 2 workers of 4 slots")
    func perHostCapAcrossWorkers() async throws {
        try await Self.with { f in
            f.server.setFile("c", FaultServer.randomBytes(count: 2_000, seed: 5))
            try await f.queue.enqueue(
                (0..<8).map { try! QueueRequest(url: f.server.url("/files/c?gate=cap"), id: "c\($0)", name: "c\($0)") })
            let directory = try f.directory("d")
            let (_, _, first) = try await f.startWorker(f.settings(directory: directory, perHost: 2))
            let (_, _, second) = try await f.startWorker(f.settings(directory: directory, perHost: 2))
            await f.server.waitForGateWaiters("cap", count: 2)
            #expect(try await f.rows().filter { $0.state == "running" }.count == 2)
            f.server.release("cap")
            try await f.waitForRows("every job completed") { $0.allSatisfy { $0.state == "completed" } }
            await f.stop(first)
            await f.stop(second)
            #expect(f.server.statistics.maxInFlightRequests <= 2)
        }
    }

    @Test("Completions that arrive while one is in flight go in one statement, each fenced on its own lease")
    func groupCommit() async throws {
        try await Self.with { f in
            // Given a log of the statements that complete jobs, with how many rows each completed
            try await f.queue.client.query("CREATE TABLE haul_test_completions (seq bigserial, rows int8)")
            try await f.queue.client.query(
                """
                CREATE FUNCTION haul_test_completions() RETURNS trigger AS $$
                BEGIN
                    INSERT INTO haul_test_completions (rows) SELECT count(*) FROM new_rows n JOIN old_rows o ON o.id = n.id
                        WHERE n.state = 'completed' AND o.state <> 'completed';
                    RETURN NULL;
                END $$ LANGUAGE plpgsql
                """)
            try await f.queue.client.query(
                """
                CREATE TRIGGER haul_test_completions AFTER UPDATE ON haul_jobs
                REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION haul_test_completions()
                """)
            // and ten jobs a worker's store holds, the last of them since taken over by another worker
            try await f.queue.enqueue((0..<10).map { try! QueueRequest(url: f.server.url("/files/g\($0)"), id: "g\($0)") })
            let store = PostgresJobStore(
                queue: f.queue, owner: 777, settings: f.settings(directory: try f.directory("d"), slots: 10),
                logger: Logger(label: "test"))
            #expect(try await store.claimQueued(limit: 10).count == 10)
            try await f.queue.client.query("UPDATE haul_jobs SET lease_owner = 888, attempt = attempt + 1 WHERE key = 'g9'")
            // When the first completion is held in flight (its row locked by another transaction)
            let (locked, lockedNow) = AsyncStream.makeStream(of: Void.self)
            let (unlock, unlockNow) = AsyncStream.makeStream(of: Void.self)
            let holder = Task {
                try await f.queue.client.withTransaction(logger: Logger(label: "test")) { connection in
                    try await connection.query("SELECT id FROM haul_jobs WHERE key = 'g0' FOR UPDATE", logger: Logger(label: "test"))
                    lockedNow.yield()
                    for await _ in unlock { break }
                }
            }
            for await _ in locked { break }
            let first = Task { try await store.confirmCompletion(DownloadID("g0"), bytes: 10).answer() }
            await store.waitForCompletionArrivals(1)
            // and nine more arrive meanwhile
            let rest = (1..<10).map { index in
                Task { () -> Bool in
                    do {
                        try await store.confirmCompletion(DownloadID("g\(index)"), bytes: 10).answer()
                        return true
                    } catch {
                        return false
                    }
                }
            }
            await store.waitForCompletionArrivals(10)
            unlockNow.yield()
            try await holder.value
            try await first.value
            var outcomes: [Bool] = []
            for task in rest { outcomes.append(await task.value) }
            // Then the nine went in one statement after the first; each caller learnt its own
            // outcome: the taken-over job's completion was refused
            #expect(outcomes == Array(repeating: true, count: 8) + [false])
            var statements: [Int64] = []
            for try await rows in try await f.queue.client.query(
                "SELECT rows FROM haul_test_completions WHERE rows > 0 ORDER BY seq"
            ).decode(Int64.self) {
                statements.append(rows)
            }
            #expect(statements == [1, 8])
            let rows = try await f.rows()
            #expect(rows.filter { $0.state == "completed" }.map(\.key) == (0..<9).map { "g\($0)" })
            #expect(rows.last?.state == "running" && rows.last?.owner == 888)
            await store.close()
        }
    }

    @Test("A worker that polls once an hour wakes on NOTIFY for a new job")
    func notifyWakesWorker() async throws {
        try await Self.with { f in
            f.server.setFile("w", FaultServer.randomBytes(count: 1_000, seed: 11))
            let directory = try f.directory("d")
            let (_, _, task) = try await f.startWorker(f.settings(directory: directory, poll: .seconds(3600)))
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/files/w"), id: "w", name: "w")])
            try await f.waitForRows("the job completed") { $0.first?.state == "completed" }
            await f.stop(task)
        }
    }

    @Test("Pause and cancel reach waiting jobs at once and running ones through their worker")
    func pauseAndCancel() async throws {
        try await Self.with { f in
            f.server.setFile("p", FaultServer.randomBytes(count: 5_000, seed: 13))
            try await f.queue.enqueue([
                try QueueRequest(url: f.server.url("/files/p?gate=p"), id: "running", name: "p1"),
                try QueueRequest(url: f.server.url("/files/p"), id: "waiting", name: "p2", priority: -1),
            ])
            let (_, _, task) = try await f.startWorker(f.settings(directory: try f.directory("d"), slots: 1))
            await f.server.waitForGateWaiters("p", count: 1)
            #expect(try await f.queue.pause(["waiting"]) == 1)
            #expect(try await f.queue.cancel(["running"]) == 1)
            try await f.waitForRows("running cancelled, waiting paused") { rows in
                rows.map(\.state) == ["cancelled", "paused"]
            }
            #expect(try await f.queue.retry(["waiting"]) == 1)
            f.server.release("p")
            try await f.waitForRows("the resumed job completed") { $0.last?.state == "completed" }
            await f.stop(task)
        }
    }

    @Test("Queue URLs: a password on the command line is refused; PGPASSWORD and a .pgpass file are read")
    func queueAddress() throws {
        #expect(throws: QueueError.self) {
            try QueueAddress(parsing: "postgres://u:secret@db/q", fromCommandLine: true, environment: [:])
        }
        let fromEnvironment = try QueueAddress(parsing: "postgres://u:secret@db/q", fromCommandLine: false, environment: [:])
        #expect(fromEnvironment.password == "secret")
        #expect(!fromEnvironment.description.contains("secret"))
        let withVariable = try QueueAddress(
            parsing: "postgres://u@db:6000/q", fromCommandLine: true, environment: ["PGPASSWORD": "pw"])
        #expect(withVariable.password == "pw" && withVariable.port == 6000 && withVariable.database == "q")
        #expect(
            QueueAddress.passwordFromLines(
                "# comment\nother:*:*:*:no\ndb:6000:q:u:pa\\:ss\n", host: "db", port: 6000, database: "q", user: "u")
                == "pa:ss")
        let socket = try QueueAddress(
            parsing: "postgres://u@/q?host=/run/pg&port=5433", fromCommandLine: true, environment: [:])
        #expect(socket.socketPath == "/run/pg/.s.PGSQL.5433")
        #expect(QueueAddress.redacted("postgres://u:secret@db/q").contains("secret") == false)
    }
}

/// Group commit's rule, without a database.
@Suite("Group commit")
struct GroupCommitTests {
    @Test("The first arrival goes at once; those that arrive while it is in flight go together next, in order, at most maxBatch")
    func batches() {
        var group = GroupCommit<Int>(maxBatch: 3)
        #expect(group.arrive(1) == [1])
        #expect(group.isBusy)
        for item in 2...6 { #expect(group.arrive(item) == nil) }
        #expect(group.sent() == [2, 3, 4])
        #expect(group.arrive(7) == nil)
        #expect(group.sent() == [5, 6, 7])
        #expect(group.sent() == nil)
        #expect(!group.isBusy)
        // Idle again: the next arrival goes at once.
        #expect(group.arrive(8) == [8])
        #expect(group.sent() == nil)
    }
}

/// The queue's priorities as a worker's manager orders them.
@Suite("Queue priorities")
struct QueuePriorityTests {
    @Test func theQueuesDefaultIsNormalAndItsRangeMapsOntoTheFiveLevels() {
        #expect(PostgresJobStore.priority(fromQueue: 0) == .normal)
        #expect(PostgresJobStore.priority(fromQueue: 1) == .high)
        #expect(PostgresJobStore.priority(fromQueue: 2) == .veryHigh)
        #expect(PostgresJobStore.priority(fromQueue: 40) == .veryHigh)
        #expect(PostgresJobStore.priority(fromQueue: -1) == .low)
        #expect(PostgresJobStore.priority(fromQueue: -9) == .veryLow)
    }
}
