import Foundation
import Haul
import HaulServer
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import HaulPostgres

/// `haul serve --queue`: the shared queue's part of the API (`/api/v1/cluster`) in process
/// (HummingbirdTesting's router mode), over a real manager and journal and a real
/// PostgreSQL database (a private cluster, one database per test), and its `cluster`
/// events. Jobs are added through the API or `PostgresQueue`; where a test needs a job in
/// a state only a worker gives (running, failed) or a worker row, it writes the row as a
/// worker would, so that nothing depends on a transfer's timing.
@Suite(
    "Cluster API on PostgreSQL",
    .enabled(
        if: PostgresCluster.isAvailable,
        "PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): run .ci/run or apt-get install postgresql"),
    .timeLimit(.minutes(4)))
struct ClusterAPITests {
    typealias API = ServiceAPITests

    /// The API of a service with a shared queue in a fresh database.
    static func with(
        _ body: @Sendable (_ client: any TestClientProtocol, _ queue: PostgresQueue, _ core: ServiceCore) async throws
            -> Void
    ) async throws {
        let queue = PostgresQueue(address: try await PostgresCluster.makeDatabase())
        try await queue.withRunning {
            try await queue.migrate()
            try await Fixture.with(journal: true) { f in
                let root = f.directory.path
                let core = ServiceCore(
                    manager: f.manager, journal: f.journal!,
                    batch: try DownloadBatch(roots: [root], defaultDirectory: root), queue: queue)
                await core.hub.start()
                await core.cluster?.monitor.start()
                let rules = AccessRulesBox(
                    AccessRules(
                        token: API.token,
                        allowedHosts: AccessRules.hosts(listeningOn: "127.0.0.1", port: 6800).union(["localhost"])))
                let app = Application(router: ServiceRouter.make(core: core, rules: rules))
                try await app.test(.router) { client in try await body(client, queue, core) }
                await core.cluster?.monitor.finish()
                await core.hub.finish()
            }
        }
    }

    static func post(_ client: any TestClientProtocol, _ uri: String, _ body: String = "") async throws -> TestResponse {
        try await client.execute(uri: uri, method: .post, headers: API.headers, body: ByteBuffer(string: body))
    }

    static func patch(_ client: any TestClientProtocol, _ uri: String, _ body: String) async throws -> TestResponse {
        try await client.execute(uri: uri, method: .patch, headers: API.headers, body: ByteBuffer(string: body))
    }

    static func get(_ client: any TestClientProtocol, _ uri: String) async throws -> [String: Any] {
        let response = try await client.execute(uri: uri, method: .get, headers: API.headers)
        #expect(response.status == .ok, "\(uri): \(String(buffer: response.body))")
        return try API.json(response)
    }

    /// `/api/v1/cluster/jobs/KEY`, the key percent-encoded (keys are usually URLs).
    static func jobPath(_ key: String) -> String {
        "/api/v1/cluster/jobs/" + key.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    static func ids(_ page: [String: Any]) -> [String] {
        (page["jobs"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    @Test("Jobs are listed by state, text, sort and page, with the whole queue's counts")
    func listFiltersSortsAndPages() async throws {
        try await Self.with { client, queue, _ in
            // Given five jobs: two waiting, one failed, one completed, one running on a worker
            let requests = try (1...5).map {
                try QueueRequest(url: URL(string: "http://files.example/f\($0).bin")!, id: "job\($0)", priority: $0 % 3)
            }
            #expect(try await queue.enqueue(requests) == 5)
            try await queue.client.query(
                "UPDATE haul_jobs SET state = 'failed', attempt = 6, last_error = 'HTTP 404', last_error_code = 'httpStatus' WHERE key = 'job3'"
            )
            try await queue.client.query(
                "UPDATE haul_jobs SET state = 'completed', bytes_committed = 10, total_bytes = 10 WHERE key = 'job4'")
            try await queue.client.query(
                "UPDATE haul_jobs SET state = 'running', bytes_committed = 250, total_bytes = 1000 WHERE key = 'job5'")

            // Then a state filter finds the failed one, with its error
            let failed = try await Self.get(client, "/api/v1/cluster/jobs?state=failed")
            #expect(failed["total"] as? Int == 1)
            let job = try #require((failed["jobs"] as? [[String: Any]])?.first)
            #expect(job["id"] as? String == "job3")
            #expect(job["error"] as? String == "HTTP 404")
            #expect(job["errorCode"] as? String == "httpStatus")
            #expect(job["attempt"] as? Int == 6)
            #expect(job["name"] as? String == "f3.bin")
            let counts = try #require(failed["counts"] as? [String: Int])
            #expect(counts == ["available": 2, "running": 1, "retryable": 0, "paused": 0, "completed": 1, "failed": 1, "cancelled": 0])

            // Pages of two, oldest first, cover all five once
            let first = try await Self.get(client, "/api/v1/cluster/jobs?limit=2&offset=0")
            let second = try await Self.get(client, "/api/v1/cluster/jobs?limit=2&offset=2")
            let third = try await Self.get(client, "/api/v1/cluster/jobs?limit=2&offset=4")
            #expect(first["total"] as? Int == 5)
            #expect(Self.ids(first) + Self.ids(second) + Self.ids(third) == ["job1", "job2", "job3", "job4", "job5"])
            #expect(third["offset"] as? Int == 4)

            // Several states at once, newest first; by priority; by progress; by text
            let unfinished = try await Self.get(client, "/api/v1/cluster/jobs?state=available,running&order=desc")
            #expect(Self.ids(unfinished) == ["job5", "job2", "job1"])
            let byPriority = try await Self.get(client, "/api/v1/cluster/jobs?sort=priority&order=desc")
            #expect(Self.ids(byPriority) == ["job2", "job5", "job1", "job4", "job3"])
            let byProgress = try await Self.get(client, "/api/v1/cluster/jobs?sort=progress&order=desc&limit=2")
            #expect(Self.ids(byProgress) == ["job4", "job5"])
            let found = try await Self.get(client, "/api/v1/cluster/jobs?q=F2.BIN")
            #expect(Self.ids(found) == ["job2"])
            // LIKE's wildcards are plain characters in the text
            #expect(try await Self.get(client, "/api/v1/cluster/jobs?q=f_.bin")["total"] as? Int == 0)

            // Bad parameters are 400s naming them
            for (query, field) in [("state=done", "state"), ("sort=size", "sort"), ("limit=0", "limit"), ("order=up", "order")] {
                let response = try await client.execute(uri: "/api/v1/cluster/jobs?\(query)", method: .get, headers: API.headers)
                #expect(response.status == .badRequest, "\(query)")
                let message = (try API.json(response)["error"] as? [String: Any])?["message"] as? String
                #expect(message?.hasPrefix("\(field):") == true, "\(query): \(message ?? "")")
            }
        }
    }

    @Test("Workers are listed alive or stale, with the jobs they run and their bytes")
    func workersAreListed() async throws {
        try await Self.with { client, queue, _ in
            // Given a worker that beat just now, running a job, and one silent for ten minutes
            var ids: [Int64] = []
            for try await id in try await queue.client.query(
                """
                INSERT INTO haul_workers (host, pid, heartbeat_at)
                VALUES ('alpha', 101, now()), ('beta', 202, now() - interval '10 minutes') RETURNING id
                """
            ).decode(Int64.self) {
                ids.append(id)
            }
            try await queue.enqueue([try QueueRequest(url: URL(string: "http://files.example/big.iso")!, id: "big")])
            try await queue.client.query(
                """
                UPDATE haul_jobs SET state = 'running', attempt = 1, lease_owner = \(ids[0]),
                    lease_expires_at = now() + interval '30 seconds', bytes_committed = 1234, total_bytes = 5000
                WHERE key = 'big'
                """)

            // Then both are listed, the first alive with its job, the second stale
            let workers = try #require(try await Self.get(client, "/api/v1/cluster/workers")["workers"] as? [[String: Any]])
            #expect(workers.count == 2)
            let alpha = try #require(workers.first { $0["host"] as? String == "alpha" })
            #expect((alpha["id"] as? NSNumber)?.int64Value == ids[0])
            #expect(alpha["pid"] as? Int == 101)
            #expect(alpha["status"] as? String == "alive")
            #expect(alpha["runningJobs"] as? Int == 1)
            #expect(alpha["bytes"] as? Int == 1234)
            let beta = try #require(workers.first { $0["host"] as? String == "beta" })
            #expect(beta["status"] as? String == "stale")
            #expect(beta["runningJobs"] as? Int == 0)
            #expect((beta["heartbeatAge"] as? Double ?? 0) >= 600)

            // And the job names its worker's host; the summary counts the workers
            let job = try await Self.get(client, Self.jobPath("big"))
            #expect(job["workerHost"] as? String == "alpha")
            #expect(job["bytes"] as? Int == 1234)
            let summary = try await Self.get(client, "/api/v1/cluster")
            #expect(summary["workers"] as? Int == 1)
            #expect(summary["staleWorkers"] as? Int == 1)
            #expect((summary["counts"] as? [String: Int])?["running"] == 1)
            #expect((summary["queue"] as? String)?.hasPrefix("postgres://") == true)
        }
    }

    @Test("Jobs are added all or nothing: a bad field adds none and is named; a good batch is added once")
    func enqueueIsAllOrNothing() async throws {
        try await Self.with { client, queue, _ in
            // A batch whose second job names a directory (a worker's own) adds nothing
            let bad = #"{"jobs": [{"url": "http://files.example/a"}, {"url": "http://files.example/b", "directory": "/tmp"}]}"#
            let refused = try await Self.post(client, "/api/v1/cluster/jobs", bad)
            #expect(refused.status == .badRequest)
            #expect(try API.errorCode(refused) == "invalidField")
            let message = (try API.json(refused)["error"] as? [String: Any])?["message"] as? String
            #expect(message?.hasPrefix("jobs[1].directory:") == true)
            #expect(try await queue.jobs().isEmpty)

            // So do a bad URL, a credential header, an unsafe name, a bad checksum, no jobs
            let refusals = [
                (#"{"jobs": [{"url": "ftp://files.example/a"}]}"#, "jobs[0].url:"),
                (#"{"jobs": [{"url": "http://files.example/a", "headers": {"Authorization": "Bearer x"}}]}"#, "jobs[0].headers:"),
                (#"{"jobs": [{"url": "http://files.example/a", "name": "../../etc/passwd"}]}"#, "jobs[0].name:"),
                (#"{"jobs": [{"url": "http://files.example/a", "checksum": "sha256=nothex"}]}"#, "jobs[0].checksum:"),
                (#"{"jobs": [{"url": "http://files.example/a", "priority": "urgent"}]}"#, "jobs[0].priority:"),
                (#"{"jobs": []}"#, "jobs:"),
                (#"{"jobs": [{"name": "x"}]}"#, "jobs[0].url:"),
            ]
            for (body, field) in refusals {
                let response = try await Self.post(client, "/api/v1/cluster/jobs", body)
                #expect(response.status == .badRequest, "\(body)")
                let text = (try API.json(response)["error"] as? [String: Any])?["message"] as? String ?? ""
                #expect(text.hasPrefix(field), "\(body): \(text)")
            }
            #expect(try await queue.jobs().isEmpty)
            let huge = #"{"jobs": ["# + String(repeating: " ", count: DownloadsAPI.maximumBody) + "]}"
            let tooLarge = try await Self.post(client, "/api/v1/cluster/jobs", huge)
            #expect(tooLarge.status == .contentTooLarge)

            // A good batch is added, with its name, priority and checks
            let good = """
                {"jobs": [{"url": "http://files.example/a"},
                          {"url": "http://files.example/b", "name": "bee.bin", "priority": "high",
                           "checksum": "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}]}
                """
            let added = try await Self.post(client, "/api/v1/cluster/jobs", good)
            #expect(added.status == .created)
            let answer = try API.json(added)
            #expect(answer["ids"] as? [String] == ["http://files.example/a", "http://files.example/b -> bee.bin"])
            #expect(answer["added"] as? Int == 2)
            let jobs = try await queue.jobs()
            #expect(jobs.map(\.state) == ["available", "available"])
            #expect(jobs.map(\.priority) == [0, 1])
            let bee = try await Self.get(client, Self.jobPath("http://files.example/b -> bee.bin"))
            #expect(bee["name"] as? String == "bee.bin")

            // The same batch again adds nothing new
            let again = try await Self.post(client, "/api/v1/cluster/jobs", good)
            #expect(again.status == .created)
            #expect(try API.json(again)["added"] as? Int == 0)
            #expect(try await queue.jobs().count == 2)
        }
    }

    @Test("Jobs are paused, resumed, cancelled and retried; a change that does not apply is a 409, an unknown job a 404")
    func pauseResumeRetryCancel() async throws {
        try await Self.with { client, queue, _ in
            let key = "http://files.example/dir/x.bin"
            try await queue.enqueue([try QueueRequest(url: URL(string: key)!)])
            let path = Self.jobPath(key)

            // Pause a waiting job, then resume it
            let paused = try await Self.patch(client, path, #"{"state": "paused"}"#)
            #expect(paused.status == .ok)
            #expect(try API.json(paused)["state"] as? String == "paused")
            #expect(try await Self.patch(client, path, #"{"state": "paused"}"#).status == .conflict)
            let resumed = try await Self.patch(client, path, #"{"state": "queued"}"#)
            #expect(try API.json(resumed)["state"] as? String == "available")
            #expect(try await Self.patch(client, path, #"{"state": "queued"}"#).status == .conflict)
            #expect(try await Self.patch(client, path, #"{"state": "done"}"#).status == .badRequest)

            // Cancel it; cancelling again is a conflict; retry queues it again
            let cancelled = try await client.execute(uri: path, method: .delete, headers: API.headers)
            #expect(cancelled.status == .ok)
            #expect(try API.json(cancelled)["state"] as? String == "cancelled")
            let twice = try await client.execute(uri: path, method: .delete, headers: API.headers)
            #expect(twice.status == .conflict)
            #expect(try API.errorCode(twice) == "conflict")
            let retried = try await Self.post(client, path + "/retry")
            #expect(retried.status == .ok)
            #expect(try API.json(retried)["state"] as? String == "available")
            #expect(try await Self.post(client, path + "/retry").status == .conflict)

            // A running job's worker is asked to pause it; resuming before it acts takes that back
            try await queue.client.query("UPDATE haul_jobs SET state = 'running', attempt = 1 WHERE key = \(key)")
            let asked = try await Self.patch(client, path, #"{"state": "paused"}"#)
            #expect(try API.json(asked)["state"] as? String == "running")
            #expect(try API.json(asked)["command"] as? String == "pause")
            let takenBack = try await Self.patch(client, path, #"{"state": "queued"}"#)
            #expect(try API.json(takenBack)["command"] == nil)

            // An unknown job is a 404 for each
            let unknown = Self.jobPath("http://files.example/none")
            #expect(try await client.execute(uri: unknown, method: .get, headers: API.headers).status == .notFound)
            #expect(try await Self.patch(client, unknown, #"{"state": "paused"}"#).status == .notFound)
            #expect(try await Self.post(client, unknown + "/retry").status == .notFound)
            let gone = try await client.execute(uri: unknown, method: .delete, headers: API.headers)
            #expect(gone.status == .notFound)
            #expect(try API.errorCode(gone) == "notFound")
            #expect(try await queue.jobs().count == 1)

            // A NUL, which PostgreSQL's text cannot hold, is the request's fault, not the
            // database's (503): a 404 in an ID, a 400 in a search (schemathesis found both)
            let nul = "/api/v1/cluster/jobs/a%00b"
            #expect(try await client.execute(uri: nul, method: .get, headers: API.headers).status == .notFound)
            #expect(try await Self.patch(client, nul, #"{"state": "paused"}"#).status == .notFound)
            #expect(try await Self.post(client, nul + "/retry").status == .notFound)
            #expect(try await client.execute(uri: nul, method: .delete, headers: API.headers).status == .notFound)
            let search = try await client.execute(uri: "/api/v1/cluster/jobs?q=a%00b", method: .get, headers: API.headers)
            #expect(search.status == .badRequest)
            #expect(try API.errorCode(search) == "invalidField")
            // A password in a URL is refused as the headers' credentials are: the queue keeps them in the clear
            let secret = try await Self.post(
                client, "/api/v1/cluster/jobs", #"{"jobs": [{"url": "http://user:hunter2@files.example/s"}]}"#)
            #expect(secret.status == .badRequest)
            #expect(String(buffer: secret.body).contains("does not take credentials"))
            #expect(!String(buffer: secret.body).contains("hunter2"))
            #expect(try await queue.jobs().count == 1)
        }
    }

    @Test("The API's access rules hold: token, Host, and the dashboard's own Origin for changes")
    func accessRulesApply() async throws {
        try await Self.with { client, queue, _ in
            var noToken = API.headers
            noToken[.authorization] = nil
            let anonymous = try await client.execute(uri: "/api/v1/cluster/jobs", method: .get, headers: noToken)
            #expect(anonymous.status == .unauthorized)
            #expect(try API.errorCode(anonymous) == "unauthorized")
            let anonymousAdd = try await client.execute(
                uri: "/api/v1/cluster/jobs", method: .post, headers: noToken,
                body: ByteBuffer(string: #"{"jobs": [{"url": "http://files.example/a"}]}"#))
            #expect(anonymousAdd.status == .unauthorized)

            var rebound = API.headers
            rebound[HTTPField.Name("Host")!] = "attacker.example:6800"
            let foreign = try await client.execute(uri: "/api/v1/cluster/workers", method: .get, headers: rebound)
            #expect(foreign.status == .forbidden)
            #expect(try API.errorCode(foreign) == "forbiddenHost")

            // A dashboard session reads, but changes only from the dashboard's own origin
            let host: HTTPFields = [HTTPField.Name("Host")!: API.host, .contentType: "application/json"]
            let signedIn = try await client.execute(
                uri: "/api/v1/session", method: .post, headers: host, body: ByteBuffer(string: #"{"token": "\#(API.token)"}"#))
            let session = try #require(signedIn.headers[.setCookie]?.split(separator: ";").first.map(String.init))
            var withCookie = host
            withCookie[.cookie] = session
            #expect(try await client.execute(uri: "/api/v1/cluster", method: .get, headers: withCookie).status == .ok)
            let body = ByteBuffer(string: #"{"jobs": [{"url": "http://files.example/a"}]}"#)
            let noOrigin = try await client.execute(uri: "/api/v1/cluster/jobs", method: .post, headers: withCookie, body: body)
            #expect(noOrigin.status == .forbidden)
            #expect(try API.errorCode(noOrigin) == "forbiddenOrigin")
            #expect(try await queue.jobs().isEmpty)
            var own = withCookie
            own[.origin] = "http://\(API.host)"
            #expect(try await client.execute(uri: "/api/v1/cluster/jobs", method: .post, headers: own, body: body).status == .created)
        }
    }

    @Test("A cluster event follows a change, also after the database dropped every connection")
    func clusterEventFollowsAChange() async throws {
        try await Self.with { client, queue, core in
            let (_, live, subscriber) = await core.hub.subscribe(after: nil)
            var parser = EventStreamParser()
            /// The last `cluster` event, said when a wait fails.
            var last: String?
            /// Reads events until a `cluster` one satisfies `condition` (the suite's time
            /// limit ends a wait that never comes true).
            func waitForCluster(_ what: String, _ condition: (ClusterSummaryView) -> Bool) async throws -> ClusterSummaryView {
                while let bytes = await live.next() {
                    for event in parser.feed(bytes.readableBytesView) where event.kind == "cluster" {
                        last = String(decoding: event.data, as: UTF8.self)
                        let summary = try ServiceJSON.decoder.decode(ClusterSummaryView.self, from: event.data)
                        if condition(summary) { return summary }
                    }
                }
                Issue.record("the event stream ended before \(what); the last cluster event: \(last ?? "none")")
                throw QueueError("the event stream ended")
            }

            // The first event gives the state as it is: nothing queued
            let first = try await waitForCluster("the first cluster event") { _ in true }
            #expect(first.total == 0)
            #expect(first.error == nil)

            // When a job is added through the API, an event counts it
            let added = try await Self.post(client, "/api/v1/cluster/jobs", #"{"jobs": [{"url": "http://files.example/e"}]}"#)
            #expect(added.status == .created)
            let after = try await waitForCluster("the job counted") { $0.counts["available"] == 1 }
            #expect(after.total == 1)

            // When a worker elsewhere makes progress (a row it writes), an event says so
            try await queue.client.query(
                "UPDATE haul_jobs SET state = 'running', bytes_committed = 4096, updated_at = now() WHERE key = 'http://files.example/e'")
            let progressed = try await waitForCluster("the progress") { $0.bytes == 4096 }
            #expect(progressed.counts["running"] == 1)

            // When the database drops the service's connections (as a restart does), the
            // next change, made from elsewhere, still arrives: the pool connects again
            let elsewhere = PostgresQueue(address: queue.address)
            try await elsewhere.withRunning {
                try await elsewhere.client.query(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND pid <> pg_backend_pid()
                    """)
                try await elsewhere.enqueue([try QueueRequest(url: URL(string: "http://files.example/f")!)])
            }
            let recovered = try await waitForCluster("the second job counted") { $0.total == 2 && $0.error == nil }
            #expect(recovered.counts["available"] == 1)
            await core.hub.unsubscribe(subscriber)
        }
    }
}

/// Without `--queue`, the shared queue's endpoints say there is none.
@Suite("Cluster API without a queue")
struct ClusterAPIWithoutQueueTests {
    @Test func everyClusterEndpointIs404WithAClearMessage() async throws {
        try await ServiceAPITests.with { client, _, _ in
            let headers = ServiceAPITests.headers
            for (uri, method) in [
                ("/api/v1/cluster", HTTPRequest.Method.get), ("/api/v1/cluster/jobs", .get), ("/api/v1/cluster/jobs", .post),
                ("/api/v1/cluster/workers", .get), ("/api/v1/cluster/jobs/x", .patch), ("/api/v1/cluster/jobs/x", .delete),
                ("/api/v1/cluster/jobs/x/retry", .post),
            ] {
                let response = try await client.execute(
                    uri: uri, method: method, headers: headers, body: ByteBuffer(string: #"{"state": "paused"}"#))
                #expect(response.status == .notFound, "\(method) \(uri)")
                #expect(try ServiceAPITests.errorCode(response) == "notFound")
                let message = (try ServiceAPITests.json(response)["error"] as? [String: Any])?["message"] as? String
                #expect(message?.contains("--queue") == true, "\(method) \(uri): \(message ?? "")")
            }
            // And the access rules come first: no token, no answer about the queue
            var noToken = headers
            noToken[.authorization] = nil
            #expect(try await client.execute(uri: "/api/v1/cluster/jobs", method: .get, headers: noToken).status == .unauthorized)
        }
    }
}
