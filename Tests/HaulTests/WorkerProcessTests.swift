import AsyncHTTPClient
import Foundation
import HaulTestSupport
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

#if canImport(Glibc)
import Glibc
#endif

/// `haul worker` as processes: several built `haul` binaries on one queue in a real
/// PostgreSQL, against the fault server. Killed, stopped and stale workers, the per-host
/// cap across processes, a database restart, and `haul get --queue -i`.
///
/// Every wait is on an event: a line on a worker's stderr, a process's exit, or a change
/// to the jobs table (LISTEN on a test-only trigger). The only waits for time are the
/// leases' own, in the tests about leases (`--lease 4`, the minimum), and even those end
/// on the database's record of the rescue.
///
/// The server's own records are the evidence: a test-only trigger writes every claim
/// (key, old and new owner, attempt, the old lease's expiry, `now()`) and every
/// completion into an audit table.
@Suite(
    "haul worker processes on PostgreSQL",
    .enabled(
        if: PostgresCluster.isAvailable,
        "PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): run .ci/run or apt-get install postgresql"),
    .serialized,
    .timeLimit(.minutes(3)))
struct WorkerProcessTests {
    /// A queue in a fresh database, a fault server, a temporary directory, and the worker
    /// processes started, which ``with(cluster:_:)`` kills however the test ends.
    final class Fixture: Sendable {
        let url: String
        let queue: PostgresQueue
        let server: FaultServer
        let root: URL
        private let processes = Locked<[HaulProcess]>([])

        init(url: String) async throws {
            self.url = url
            queue = PostgresQueue(address: try QueueAddress(parsing: url, fromCommandLine: false))
            server = try await FaultServer.start()
            root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-workers-" + UUID().uuidString)
            try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        }

        func directory(_ name: String) throws -> URL {
            let url = root.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            return url
        }

        /// A `haul worker` process on the queue; returns once it listens for jobs, with its
        /// worker ID (its lease owner).
        func startWorker(
            directory: URL, _ extra: [String] = [], environment: [String: String]? = nil, useQueueOption: Bool = true
        ) async throws -> Worker {
            let target = directory.isFileURL ? directory.path : directory.absoluteString
            let arguments = ["worker"] + (useQueueOption ? ["--queue", url] : []) + ["-d", target] + extra
            let process = try HaulProcess(arguments, environment: environment)
            processes.withLock { $0.append(process) }
            guard let line = await process.errorLine(where: { $0.contains("is listening for jobs") }),
                let id = line.split(separator: " ").compactMap({ Int64($0) }).first
            else {
                let run = await process.wait()
                Issue.record("the worker did not start (\(run.status)): \(run.stderr)")
                throw QueueError("the worker did not start")
            }
            return Worker(process: process, id: id)
        }

        /// Stops every worker still running with SIGTERM and waits for it to exit (status 0).
        /// A job's completion is in the database before its file is renamed into place (the
        /// fenced update comes first): once its worker has exited, the rename is done too.
        func stopWorkers() async {
            let running = processes.withLock { $0 }.filter(\.isRunning)
            for process in running { process.send(SIGTERM) }
            for process in running {
                let run = await process.wait()
                #expect(run.status == 0, "a worker stopped with \(run.status): \(run.stderr)")
            }
        }

        /// Kills every worker still running and waits for it.
        func killWorkers() async {
            for process in processes.withLock({ $0 }) where process.isRunning {
                process.send(SIGKILL)
                _ = await process.wait()
            }
        }

        /// A value of the database: the first column of the first row of `query`.
        func value<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, as: T.Type = T.self) async throws -> T {
            for try await value in try await queue.client.query(query).decode(T.self) { return value }
            throw QueueError("no row")
        }

        /// The channel a test-only trigger notifies on every change to the jobs table.
        static let rowsChannel = "haul_test_rows"

        /// Adds the test-only triggers: one announcing every change to the jobs table, one
        /// writing every claim and completion into `haul_test_audit`.
        func addTriggers() async throws {
            for statement in [
                """
                CREATE FUNCTION haul_test_rows_changed() RETURNS trigger AS $$
                BEGIN PERFORM pg_notify('haul_test_rows', ''); RETURN NULL; END $$ LANGUAGE plpgsql
                """,
                """
                CREATE TRIGGER haul_test_rows AFTER INSERT OR UPDATE OR DELETE ON haul_jobs
                FOR EACH STATEMENT EXECUTE FUNCTION haul_test_rows_changed()
                """,
                """
                CREATE TABLE haul_test_audit (
                    seq bigserial PRIMARY KEY, event text NOT NULL, key text NOT NULL, old_state text,
                    old_owner bigint, new_owner bigint, attempt integer, old_expires timestamptz, at timestamptz)
                """,
                """
                CREATE FUNCTION haul_test_audit() RETURNS trigger AS $$
                BEGIN
                    IF NEW.attempt > OLD.attempt THEN
                        INSERT INTO haul_test_audit (event, key, old_state, old_owner, new_owner, attempt, old_expires, at)
                        VALUES ('claim', NEW.key, OLD.state, OLD.lease_owner, NEW.lease_owner, NEW.attempt,
                                OLD.lease_expires_at, now());
                    END IF;
                    IF NEW.state = 'completed' AND OLD.state <> 'completed' THEN
                        INSERT INTO haul_test_audit (event, key, old_state, old_owner, new_owner, attempt, old_expires, at)
                        VALUES ('completed', NEW.key, OLD.state, OLD.lease_owner, NEW.lease_owner, NEW.attempt,
                                OLD.lease_expires_at, now());
                    END IF;
                    RETURN NULL;
                END $$ LANGUAGE plpgsql
                """,
                """
                CREATE TRIGGER haul_test_audit AFTER UPDATE ON haul_jobs
                FOR EACH ROW EXECUTE FUNCTION haul_test_audit()
                """,
            ] {
                try await queue.client.query(PostgresQuery(unsafeSQL: statement))
            }
        }

        /// Waits until `condition` holds: checked once listening for changes to the jobs
        /// table has begun, then again on each change (no polling; the suite's time limit
        /// ends a wait that never comes true). A broken connection (a database restart) is
        /// listened on again.
        func waitUntil(_ what: String, _ condition: @escaping @Sendable () async throws -> Bool) async throws {
            var failures = 0
            while true {
                do {
                    let held = try await queue.client.withConnection { connection in
                        try await connection.listen(on: Self.rowsChannel) { notifications in
                            if try await condition() { return true }
                            for try await _ in notifications where try await condition() { return true }
                            return false
                        }
                    }
                    if held { return }
                    throw QueueError("stopped listening before \(what)")
                } catch {
                    failures += 1
                    if failures > 20 {
                        Issue.record("waiting for \(what): \(error)")
                        throw error
                    }
                }
            }
        }

        /// Waits until `sql` (a boolean query on the queue) is true.
        func waitUntil(_ what: String, sql: String) async throws {
            try await waitUntil(what) { try await self.value(PostgresQuery(unsafeSQL: sql), as: Bool.self) }
        }

        /// Claims that took a job whose lease was still live under another owner.
        func overlappingClaims() async throws -> Int64 {
            try await value(
                """
                SELECT count(*)::int8 FROM haul_test_audit WHERE event = 'claim' AND old_state = 'running'
                    AND old_expires > at AND old_owner IS DISTINCT FROM new_owner
                """, as: Int64.self)
        }

        /// Keys that entered `completed` other than exactly once, and how many did once.
        func completions() async throws -> (once: Int, otherwise: [String]) {
            var once = 0
            var otherwise: [String] = []
            for try await (key, count) in try await queue.client.query(
                "SELECT j.key, count(a.seq)::int8 FROM haul_jobs j LEFT JOIN haul_test_audit a ON a.key = j.key AND a.event = 'completed' GROUP BY j.key"
            ).decode((String, Int64).self) {
                if count == 1 { once += 1 } else { otherwise.append("\(key): \(count)") }
            }
            return (once, otherwise)
        }

        /// `(state, attempt, owner, committed)` of job `key`.
        func row(_ key: String) async throws -> (state: String, attempt: Int, owner: Int64?, committed: Int64) {
            for try await row in try await queue.client.query(
                "SELECT state, attempt, lease_owner, bytes_committed FROM haul_jobs WHERE key = \(key)"
            ).decode((String, Int, Int64?, Int64).self) {
                return row
            }
            throw QueueError("no job \(key)")
        }

        func close() async {
            await killWorkers()
            try? await server.shutdown()
            try? FileManager.default.removeItem(at: root)
        }
    }

    struct Worker: Sendable {
        let process: HaulProcess
        let id: Int64
    }

    /// Runs `body` with a fixture on a fresh database of the shared cluster (or of
    /// `cluster`), the schema migrated and the test triggers added; kills the workers and
    /// removes the files however it ends.
    static func with(cluster: PostgresCluster.Running? = nil, _ body: @Sendable (Fixture) async throws -> Void)
        async throws
    {
        let url: String
        if let cluster { url = try await cluster.makeDatabase() } else { url = try await PostgresCluster.makeDatabaseURL() }
        let fixture = try await Fixture(url: url)
        do {
            try await fixture.queue.withRunning {
                try await fixture.queue.migrate()
                try await fixture.addTriggers()
                try await body(fixture)
                await fixture.killWorkers()
            }
        } catch {
            await fixture.close()
            throw error
        }
        await fixture.close()
    }

    /// Registers `count` small files `NAME0000`…, each different; returns their bytes by name.
    static func serveSmallFiles(_ server: FaultServer, prefix: String, count: Int) -> [String: [UInt8]] {
        var files: [String: [UInt8]] = [:]
        for index in 0..<count {
            let name = prefix + String(format: "%04d", index)
            let bytes = FaultServer.randomBytes(count: 100 + (index * 37) % 1_900, seed: UInt64(index + 1))
            server.setFile(name, bytes)
            files[name] = bytes
        }
        return files
    }

    /// Checks that every file in `files` is in `directory` with its bytes.
    static func expectFiles(_ files: [String: [UInt8]], in directory: URL) {
        var wrong: [String] = []
        for (name, bytes) in files {
            let saved = try? Data(contentsOf: directory.appendingPathComponent(name))
            if saved.map(Array.init) != bytes { wrong.append(name) }
        }
        #expect(wrong.isEmpty, "wrong or missing files: \(wrong.sorted().prefix(20))")
    }

    /// The server's rate for slow downloads (bytes per second), and their size: the first
    /// checkpoint (1 second and 8 MiB) comes after about a second, and a rescuer needs about
    /// half a second for the rest.
    static let slowRate = 8 << 20
    static let slowSize = 12 << 20

    // MARK: - Tests

    @Test("4 worker processes, 2,000 jobs queued with haul get --queue -i: each completes exactly once, every file right, no claim of a live lease")
    func exactlyOnce() async throws {
        try await Self.with { f in
            // Given 2,000 small files, queued from an input file by the CLI
            let files = Self.serveSmallFiles(f.server, prefix: "f", count: 2_000)
            let list = files.keys.sorted().map { f.server.url("/files/\($0)").absoluteString }.joined(separator: "\n")
            let input = f.root.appendingPathComponent("input.txt")
            try Data((list + "\n").utf8).write(to: input)
            let queued = try await Haul.run(["get", "--queue", f.url, "-i", input.path])
            #expect(queued.status == 0, "\(queued.stderr)")
            #expect(queued.stdout.contains("queued 2000 of 2000"))
            // When 4 workers share one directory
            let directory = try f.directory("shared")
            var workers: [Worker] = []
            for _ in 0..<4 { workers.append(try await f.startWorker(directory: directory)) }
            try await f.waitUntil(
                "every job completed", sql: "SELECT count(*) FILTER (WHERE state <> 'completed') = 0 FROM haul_jobs")
            for worker in workers { worker.process.send(SIGTERM) }
            for worker in workers { #expect(await worker.process.wait().status == 0) }
            // Then the server's records show each job completed once, and no claim took a live lease
            let (once, otherwise) = try await f.completions()
            #expect(once == 2_000)
            #expect(otherwise.isEmpty, "\(otherwise.prefix(20))")
            #expect(try await f.overlappingClaims() == 0)
            let claims = try await f.value("SELECT count(*)::int8 FROM haul_test_audit WHERE event = 'claim'", as: Int64.self)
            #expect(claims == 2_000, "each job claimed once")
            let owners = try await f.value(
                "SELECT count(DISTINCT lease_owner)::int8 FROM haul_jobs", as: Int64.self)
            #expect(owners > 1, "the workers shared the work")
            // and every file has its bytes, fetched once
            Self.expectFiles(files, in: directory)
            let requests = Dictionary(grouping: f.server.requests(), by: \.path)
            #expect(requests.count == 2_000 && requests.values.allSatisfy { $0.count == 1 })
        }
    }

    @Test(
        "2 worker processes on one queue, into one bucket (-d s3://…/): every object right, a multipart one too, nothing staged or left unfinished",
        .enabled(if: SeaweedFS.isAvailable, "\(SeaweedFS.skipReason)"))
    func workersIntoOneBucket() async throws {
        try await SeaweedFS.with { server, client in
            try await HeavyProcessTests.ObjectStorageTests.makeBucket("fleet", client: client, server: server)
            try await Self.with { f in
                var files = Self.serveSmallFiles(f.server, prefix: "o", count: 60)
                let big = FaultServer.randomBytes(count: 20_000_000, seed: 99)
                f.server.setFile("big", big)
                files["big"] = big
                let list = files.keys.sorted().map { f.server.url("/files/\($0)").absoluteString }.joined(separator: "\n")
                let input = f.root.appendingPathComponent("input.txt")
                try Data((list + "\n").utf8).write(to: input)
                let queued = try await Haul.run(["get", "--queue", f.url, "-i", input.path])
                #expect(queued.status == 0, "\(queued.stderr)")
                var workers: [Worker] = []
                for index in 0..<2 {
                    let staging = try f.directory("staging\(index)")
                    workers.append(
                        try await f.startWorker(
                            directory: URL(string: "s3://fleet/in/")!, ["--staging", staging.path],
                            environment: server.environment))
                }
                try await f.waitUntil(
                    "every job completed", sql: "SELECT count(*) FILTER (WHERE state <> 'completed') = 0 FROM haul_jobs")
                await f.stopWorkers()
                var wrong: [String] = []
                for (name, bytes) in files {
                    let stored = try await HeavyProcessTests.ObjectStorageTests.object(
                        "in/\(name)", bucket: "fleet", in: server, client: client)
                    if stored != bytes { wrong.append(name) }
                }
                #expect(wrong.isEmpty, "wrong or missing objects: \(wrong.sorted().prefix(20))")
                #expect(try await client.pendingUploads(S3Location(bucket: "fleet", key: "in/big")).isEmpty)
                for index in 0..<2 {
                    let left = try FileManager.default.contentsOfDirectory(atPath: try f.directory("staging\(index)").path)
                    #expect(left.isEmpty, "staged files left: \(left)")
                }
            }
        }
    }

    @Test("A worker killed mid-download: its jobs are rescued after the lease and finished by the others from the committed bytes")
    func killedWorker() async throws {
        try await Self.with { f in
            // Given a worker running two slow downloads, with bytes committed
            var files: [String: [UInt8]] = [:]
            for (index, name) in ["k0", "k1"].enumerated() {
                files[name] = FaultServer.randomBytes(count: Self.slowSize, seed: UInt64(100 + index))
                f.server.setFile(name, files[name]!)
            }
            let directory = try f.directory("shared")
            let doomed = try await f.startWorker(directory: directory, ["-j", "2", "--lease", "4"])
            // (each first response stalls after 10 MiB, past the first checkpoint at 8 MiB,
            // so that the doomed worker cannot finish however long the others take to start)
            try await f.queue.enqueue(
                files.keys.sorted().map {
                    try! QueueRequest(
                        url: f.server.url("/files/\($0)?rate=\(Self.slowRate)&stall_after=\(10 << 20)&stall_times=1"),
                        id: $0, name: $0)
                })
            let owner = doomed.id
            try await f.waitUntil(
                "both jobs running on the first worker, bytes committed",
                sql: """
                    SELECT count(*) FILTER (WHERE state = 'running' AND lease_owner = \(owner)) = 2
                       AND max(bytes_committed) > 0 FROM haul_jobs
                    """)
            let others = [
                try await f.startWorker(directory: directory, ["--lease", "4"]),
                try await f.startWorker(directory: directory, ["--lease", "4"]),
            ]
            // When it is killed
            doomed.process.send(SIGKILL)
            #expect(await doomed.process.wait().status != 0)
            var committed: [String: Int64] = [:]
            for name in files.keys { committed[name] = try await f.row(name).committed }
            #expect(committed.values.contains { $0 > 0 })
            // Then, once the leases expire, the others take the jobs over and complete them
            try await f.waitUntil(
                "both jobs completed", sql: "SELECT count(*) FILTER (WHERE state <> 'completed') = 0 FROM haul_jobs")
            let rescuers = Set(others.map(\.id))
            for name in files.keys.sorted() {
                let row = try await f.row(name)
                #expect(row.attempt == 2 && row.owner.map(rescuers.contains) == true, "\(name): \(row)")
                // from the bytes the killed worker had written (at least those committed)
                let second = f.server.requests(path: "/files/\(name)").dropFirst().first
                let from = second?.header("Range").flatMap { Int64($0.dropFirst("bytes=".count).dropLast()) } ?? 0
                if committed[name]! > 0 { #expect(from >= committed[name]!, "\(name) resumed from \(from)") }
            }
            #expect(try await f.overlappingClaims() == 0)
            #expect(try await f.completions().otherwise.isEmpty)
            await f.stopWorkers()
            Self.expectFiles(files, in: directory)
        }
    }

    @Test("A stopped worker past its lease: another finishes the job; woken, its writes are refused and the final file stays right")
    func staleWorker() async throws {
        try await Self.with { f in
            // Given a worker running a slow download into a shared directory, bytes committed
            let old = FaultServer.randomBytes(count: Self.slowSize, seed: 200)
            f.server.setFile("s", old)
            let directory = try f.directory("shared")
            let stale = try await f.startWorker(directory: directory, ["-j", "1", "--lease", "4"])
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/files/s?rate=\(Self.slowRate)"), id: "s", name: "s")])
            try await f.waitUntil(
                "the job running with bytes committed",
                sql: "SELECT bool_and(state = 'running' AND lease_owner = \(stale.id) AND bytes_committed > 0) FROM haul_jobs")
            // When it is stopped past its lease, and the file changes on the server meanwhile
            // (so that the stale worker's bytes differ from the new ones: its late writes
            // would show in the final file)
            stale.process.send(SIGSTOP)
            let new = FaultServer.randomBytes(count: Self.slowSize, seed: 201)
            f.server.setFile("s", new)
            let other = try await f.startWorker(directory: directory, ["--lease", "4"])
            try await f.waitUntil(
                "the job completed by the other worker",
                sql: "SELECT bool_and(state = 'completed' AND lease_owner = \(other.id)) FROM haul_jobs")
            // and woken again
            stale.process.send(SIGCONT)
            let refused = await stale.process.errorLine(where: { $0.contains("lost the lease of s ") })
            #expect(refused != nil, "\(stale.process.errorText)")
            stale.process.send(SIGTERM)
            #expect(await stale.process.wait().status == 0)
            // Then the completion is the other worker's alone, and the final file holds the new bytes
            let row = try await f.row("s")
            #expect(row.attempt == 2 && row.owner == other.id)
            #expect(try await f.completions().otherwise.isEmpty)
            #expect(try await f.overlappingClaims() == 0)
            await f.stopWorkers()
            let saved = try Data(contentsOf: directory.appendingPathComponent("s"))
            // (compared here, not inside #expect: a failure would render two 12 MiB arrays)
            var differing = 0
            for (one, other) in zip(saved, new) where one != other { differing += 1 }
            #expect(saved.count == new.count && differing == 0, "\(differing) bytes differ: the stale worker wrote into the final file")
        }
    }

    @Test("--per-host 4 across 4 worker processes: never more than 4 requests in flight to the host")
    func perHostCap() async throws {
        try await Self.with { f in
            let files = Self.serveSmallFiles(f.server, prefix: "c", count: 40)
            let directory = try f.directory("shared")
            for _ in 0..<4 { _ = try await f.startWorker(directory: directory, ["-j", "4", "--per-host", "4"]) }
            // Every worker wakes on the NOTIFY of the new jobs; the first four requests are held.
            try await f.queue.enqueue(
                files.keys.sorted().map { try! QueueRequest(url: f.server.url("/files/\($0)?gate=cap"), id: $0, name: $0) })
            await f.server.waitForGateWaiters("cap", count: 4)
            #expect(try await f.value("SELECT count(*)::int8 FROM haul_jobs WHERE state = 'running'", as: Int64.self) == 4)
            f.server.release("cap")
            try await f.waitUntil(
                "every job completed", sql: "SELECT count(*) FILTER (WHERE state <> 'completed') = 0 FROM haul_jobs")
            #expect(f.server.statistics.maxInFlightRequests == 4)
            await f.stopWorkers()
            Self.expectFiles(files, in: directory)
        }
    }

    @Test("The database restarts while workers run: they reconnect and finish; nothing is lost or doubled")
    func databaseRestart() async throws {
        let cluster = try await PostgresCluster.startPrivate()
        do {
            try await Self.with(cluster: cluster) { f in
                // Given 300 jobs, each a quarter second long, and two workers at them
                var files: [String: [UInt8]] = [:]
                for index in 0..<300 {
                    let name = String(format: "r%03d", index)
                    files[name] = FaultServer.randomBytes(count: 2_000 + index, seed: UInt64(300 + index))
                    f.server.setFile(name, files[name]!)
                }
                try await f.queue.enqueue(
                    files.keys.sorted().map { try! QueueRequest(url: f.server.url("/files/\($0)?rate=8000"), id: $0, name: $0) })
                let directory = try f.directory("shared")
                for _ in 0..<2 { _ = try await f.startWorker(directory: directory, ["-j", "8", "--lease", "10"]) }
                try await f.waitUntil(
                    "some jobs completed", sql: "SELECT count(*) >= 30 FROM haul_jobs WHERE state = 'completed'")
                // When the database restarts under them
                try await cluster.restart()
                // Then they finish every job, each completed once, every file right
                try await f.waitUntil(
                    "every job completed", sql: "SELECT count(*) FILTER (WHERE state <> 'completed') = 0 FROM haul_jobs")
                let (once, otherwise) = try await f.completions()
                #expect(once == 300)
                #expect(otherwise.isEmpty, "\(otherwise.prefix(20))")
                #expect(try await f.overlappingClaims() == 0)
                await f.stopWorkers()
                Self.expectFiles(files, in: directory)
            }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    @Test("haul get --queue -i FILE: all or nothing; a bad line adds none and is named")
    func enqueueInputFile() async throws {
        try await Self.with { f in
            let a = f.server.url("/files/a").absoluteString
            let b = f.server.url("/files/b").absoluteString
            let bad = f.root.appendingPathComponent("bad.txt")
            try Data("\(a)\n# a comment\n\(b)\n  out=b.bin\nftp://example.com/x\n".utf8).write(to: bad)
            let refused = try await Haul.run(["get", "--queue", f.url, "-i", bad.path])
            #expect(refused.status == 2)
            #expect(refused.stderr.contains("line 5"), "\(refused.stderr)")
            #expect(refused.stderr.contains("nothing was queued"))
            #expect(try await f.value("SELECT count(*)::int8 FROM haul_jobs", as: Int64.self) == 0)

            let good = f.root.appendingPathComponent("good.txt")
            let digest = "sha-256=" + String(repeating: "0", count: 64)
            try Data("\(a)\n\(b)\n  out=b.bin\n  checksum=\(digest)\n".utf8).write(to: good)
            let run = try await Haul.run(["get", "--queue", f.url, "-i", good.path])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("queued 2 of 2"))
            var rows: [String] = []
            for try await (key, name, options) in try await f.queue.client.query(
                "SELECT key, coalesce(destination, ''), options->>'checksum' FROM haul_jobs ORDER BY id"
            ).decode((String, String, String?).self) {
                rows.append("\(key)|\(name)|\(options ?? "")")
            }
            #expect(rows == ["\(a)||", "\(b) -> b.bin|b.bin|\(digest)"])
        }
    }

    @Test("--on-complete, --on-error and --log-format json on a worker: each end runs its hook and has its line")
    func workerHooksAndLogs() async throws {
        try await Self.with { f in
            f.server.setFile("h", FaultServer.randomBytes(count: 4_000, seed: 401))
            try await f.queue.enqueue([
                try QueueRequest(url: f.server.url("/files/h"), id: "h", name: "h"),
                try QueueRequest(url: f.server.url("/files/missing"), id: "m", name: "m"),
            ])
            let tools = try f.directory("tools")
            let (hook, records) = try await CompletionHookTests.recordingHook(in: tools)
            let directory = try f.directory("d")
            let worker = try await f.startWorker(
                directory: directory,
                ["--on-complete", hook, "--on-error", hook, "--log-format", "json", "--metrics-listen", "127.0.0.1:0"])
            try await f.waitUntil(
                "both jobs ended", sql: "SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'failed')) = 0 FROM haul_jobs")
            // Its metrics, at the address it logged, once the log says both ends were counted.
            for end in ["download completed", "download failed"] {
                _ = await worker.process.errorLine { $0.contains("\"message\":\"\(end)\"") }
            }
            let announced = try #require(await worker.process.errorLine { $0.contains("metrics at http://") })
            let address = try #require(announced.split(separator: "http://").last?.split(separator: "/").first)
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://\(address)/metrics"), timeout: .seconds(10))
            #expect(response.status == .ok)
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            for line in [
                "haul_downloads_completed_total 1", "haul_downloads_failed_total{code=\"httpStatus\"} 1",
                "haul_received_bytes_total 4000", "haul_worker_leases 0.0", "haul_worker_leases_lost_total 0",
                "haul_worker_leases_rescued_total 0",
            ] {
                #expect(text.contains(line + "\n"), "no '\(line)' in:\n\(text)")
            }
            #expect(!text.contains("haul_journal_write_duration_seconds"), "a worker has no journal")
            // A worker waits for its hooks before it exits.
            worker.process.send(SIGTERM)
            let run = await worker.process.wait()
            #expect(run.status == 0, "\(run.stderr)")
            let runs = try CompletionHookTests.runs(in: records)
            let completed = try #require(runs.first { $0["HAUL_ID"] == "h" })
            #expect(completed["HAUL_URL"] == f.server.url("/files/h").absoluteString)
            #expect(completed["HAUL_PATH"] == directory.appendingPathComponent("h").path)
            #expect(completed["HAUL_BYTES"] == "4000")
            let failed = try #require(runs.first { $0["HAUL_ID"] == "m" })
            #expect(failed["HAUL_ERROR_CODE"] == "httpStatus")
            #expect(runs.count == 2)
            // The log: JSON objects only, one of them each download's end.
            var objects: [[String: Any]] = []
            for line in run.stderr.split(separator: "\n") {
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object != nil, "not a JSON object: \(line)")
                if let object { objects.append(object) }
            }
            #expect(objects.contains { $0["message"] as? String == "download completed" && $0["id"] as? String == "h" })
            #expect(objects.contains { $0["message"] as? String == "download failed" && $0["id"] as? String == "m" })
            #expect(objects.contains { $0["message"] as? String == "hook ran" && $0["id"] as? String == "h" })
        }
    }

    @Test("--metrics-listen on an address that is not loopback, without a token: refused")
    func workerMetricsNeedATokenBeyondLoopback() async throws {
        try await Self.with { f in
            var environment = Haul.environment
            environment["HAUL_TOKEN"] = nil
            let run = try await Haul.run(
                ["worker", "--queue", f.url, "-d", try f.directory("d").path, "--metrics-listen", "0.0.0.0:0"],
                environment: environment)
            #expect(run.status != 0)
            #expect(run.stderr.contains("refusing to listen on 0.0.0.0"), "\(run.stderr)")
        }
    }

    @Test("SIGTERM: the worker exits with its job given back (available, partial kept), and never prints the password")
    func sigtermGivesJobsBack() async throws {
        try await Self.with { f in
            f.server.setFile("t", FaultServer.randomBytes(count: Self.slowSize, seed: 400))
            try await f.queue.enqueue([try QueueRequest(url: f.server.url("/files/t?rate=\(Self.slowRate)"), id: "t", name: "t")])
            // (the password in HAUL_QUEUE_URL, where it may be; the cluster trusts, so any works)
            let password = "sekrit-\(UUID().uuidString.prefix(8))"
            var environment = Haul.environment
            environment["HAUL_QUEUE_URL"] = f.url.replacingOccurrences(of: "postgres@", with: "postgres:\(password)@")
            let directory = try f.directory("d")
            let worker = try await f.startWorker(directory: directory, environment: environment, useQueueOption: false)
            try await f.waitUntil(
                "the job running with bytes committed",
                sql: "SELECT bool_and(state = 'running' AND bytes_committed > 0) FROM haul_jobs")
            worker.process.send(SIGTERM)
            let run = await worker.process.wait()
            #expect(run.status == 0)
            let row = try await f.row("t")
            #expect(row.state == "available" && row.committed > 0)
            #expect(try await f.value("SELECT lease_expires_at IS NULL FROM haul_jobs", as: Bool.self))
            let partial = directory.appendingPathComponent("t.haul-partial")
            let size = (try? FileManager.default.attributesOfItem(atPath: partial.path)[.size] as? Int) ?? 0
            #expect(size >= Int(row.committed), "the partial file is kept")
            #expect(try await f.value("SELECT count(*)::int8 FROM haul_workers", as: Int64.self) == 0)
            #expect(!run.stderr.contains(password) && !run.stdout.contains(password))
        }
    }
}
