import Foundation
import GRDB
@testable import Haul
import HaulServer
import HaulTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// The API's controls, settings, sign-in and dashboard in process, and the event hub's
/// order and replay, over a real manager, journal and fault server.
@Suite("Service controls")
struct ServiceControlTests {
    typealias API = ServiceAPITests

    static func path(_ id: String) -> String {
        "/api/v1/downloads/\(id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
    }

    static func post(_ client: any TestClientProtocol, _ uri: String, _ body: String, headers: HTTPFields = API.headers)
        async throws -> TestResponse
    {
        try await client.execute(uri: uri, method: .post, headers: headers, body: ByteBuffer(string: body))
    }

    static func state(_ client: any TestClientProtocol, _ id: String) async throws -> String? {
        try API.json(try await client.execute(uri: path(id), method: .get, headers: API.headers))["state"] as? String
    }

    @Test func pauseResumeRetryAndDeleteOneDownload() async throws {
        try await API.with { client, f, root in
            // Given a download held at the server's gate
            let bytes = f.serve("g", count: 200_000)
            let id = f.server.url("/files/g?gate=g").absoluteString
            let added = try await Self.post(client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(id)", "name": "g"}]}"#)
            #expect(added.status == .created)
            await f.server.waitForGateWaiters("g", count: 1)
            #expect(try await Self.state(client, id) == "running")

            // When it is paused, it says so; resumed, it asks again; then it completes
            let paused = try await client.execute(
                uri: Self.path(id), method: .patch, headers: API.headers, body: ByteBuffer(string: #"{"state": "paused"}"#))
            #expect(paused.status == .ok)
            #expect(try API.json(paused)["state"] as? String == "paused")
            let resumed = try await client.execute(
                uri: Self.path(id), method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"state": "queued", "priority": "high"}"#))
            #expect(resumed.status == .ok)
            #expect(try API.json(resumed)["priority"] as? String == "high")
            await f.server.waitForGateWaiters("g", count: 1)
            f.server.release("g")
            await f.manager.waitUntilIdle()
            #expect(try await Self.state(client, id) == "completed")
            #expect(sha256(f.contents("g")) == sha256(bytes))

            // A completed download has nothing to retry
            let retry = try await Self.post(client, Self.path(id) + "/retry", "")
            #expect(retry.status == .conflict)

            // Deleted with its file: gone from the list and the disk
            let deleted = try await client.execute(uri: Self.path(id) + "?files=delete", method: .delete, headers: API.headers)
            #expect(deleted.status == .noContent)
            #expect(try await client.execute(uri: Self.path(id), method: .get, headers: API.headers).status == .notFound)
            #expect(!FileManager.default.fileExists(atPath: root + "/g"))
            let again = try await client.execute(uri: Self.path(id), method: .delete, headers: API.headers)
            #expect(again.status == .notFound)
            let badFiles = try await client.execute(uri: Self.path(id) + "?files=maybe", method: .delete, headers: API.headers)
            #expect(badFiles.status == .badRequest)
        }
    }

    @Test func aFailedDownloadIsRetried() async throws {
        try await API.with { client, f, _ in
            // Given a download that fails for good (404)
            let id = f.server.url("/files/missing").absoluteString
            _ = try await Self.post(client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(id)"}]}"#)
            await f.manager.waitUntilIdle()
            #expect(try await Self.state(client, id) == "failed")

            // When the file appears and the download is retried, it completes
            let bytes = f.serve("missing", count: 10_000)
            let retried = try await Self.post(client, Self.path(id) + "/retry", "")
            #expect(retried.status == .ok)
            await f.manager.waitUntilIdle()
            #expect(try await Self.state(client, id) == "completed")
            #expect(sha256(f.contents("missing")) == sha256(bytes))
        }
    }

    @Test func bulkActionsByStateAndByIDs() async throws {
        try await API.with { client, f, root in
            // Given two downloads held at a gate
            f.serve("h1", count: 100_000)
            f.serve("h2", count: 100_000, seed: 2)
            let ids = ["h1", "h2"].map { f.server.url("/files/\($0)?gate=h").absoluteString }
            let body = #"{"downloads": [{"url": "\#(ids[0])", "name": "h1"}, {"url": "\#(ids[1])", "name": "h2"}]}"#
            #expect(try await Self.post(client, "/api/v1/downloads", body).status == .created)
            await f.server.waitForGateWaiters("h", count: 2)

            // When every running one is paused, both are
            let paused = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "pause", "states": ["running"]}"#)
            #expect(try API.json(paused)["affected"] as? Int == 2)
            let list = try API.json(
                try await client.execute(uri: "/api/v1/downloads?state=paused", method: .get, headers: API.headers))
            #expect(list["total"] as? Int == 2)

            // And removing them by ID deletes their rows and partial files
            let removed = try await Self.post(
                client, "/api/v1/downloads/bulk", #"{"action": "remove", "ids": ["\#(ids[0])", "\#(ids[1])"], "files": "delete"}"#)
            #expect(try API.json(removed)["affected"] as? Int == 2)
            let all = try API.json(try await client.execute(uri: "/api/v1/downloads", method: .get, headers: API.headers))
            #expect(all["total"] as? Int == 0)
            let left = try FileManager.default.contentsOfDirectory(atPath: root).filter { $0.hasPrefix("h") }
            #expect(left.isEmpty)

            // A bad action or neither ids nor states is a 400
            let bad = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "explode", "ids": []}"#)
            #expect(bad.status == .badRequest)
            let neither = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "pause"}"#)
            #expect(neither.status == .badRequest)
        }
    }

    /// A download is its URL and its destination, through the API as on the command line:
    /// one URL under two names is two downloads, each with its ID in the answer; a URL
    /// names its download in `bulk`, and one that names several is a 400 that lists them.
    @Test func oneURLUnderTwoNamesIsTwoDownloads() async throws {
        try await API.with { client, f, root in
            let bytes = f.serve("u", count: 50_000)
            let url = f.server.url("/files/u").absoluteString
            let added = try await Self.post(
                client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(url)", "name": "a"}, {"url": "\#(url)", "name": "b"}]}"#)
            #expect(added.status == .created)
            let b = "\(url) -> \(root)/b"
            #expect(try API.json(added)["ids"] as? [String] == [url, b])
            let c = try await Self.post(client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(url)", "name": "c"}]}"#)
            #expect(try API.json(c)["ids"] as? [String] == ["\(url) -> \(root)/c"])
            await f.manager.waitUntilIdle()
            for name in ["a", "b", "c"] { #expect(sha256(f.contents(name)) == sha256(bytes), "\(name)") }
            let all = try API.json(try await client.execute(uri: "/api/v1/downloads", method: .get, headers: API.headers))
            #expect(all["total"] as? Int == 3)

            // The URL is the first one's ID; once that is removed, it names two
            let removed = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "remove", "ids": ["\#(url)"]}"#)
            #expect(try API.json(removed)["affected"] as? Int == 1)
            let several = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "remove", "ids": ["\#(url)"]}"#)
            #expect(several.status == .badRequest)
            let said = String(buffer: several.body)
            #expect(said.contains("names 2 downloads (one per destination)") && said.contains(b), "\(said)")
            let ambiguous = try await client.execute(uri: Self.path(url), method: .get, headers: API.headers)
            #expect(ambiguous.status == .badRequest)
            let one = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "remove", "ids": ["\#(b)"]}"#)
            #expect(try API.json(one)["affected"] as? Int == 1)
            // Now it names one: the URL is a handle on it, for one download's paths too
            let only = try await client.execute(uri: Self.path(url), method: .get, headers: API.headers)
            #expect(try API.json(only)["id"] as? String == "\(url) -> \(root)/c")
            let last = try await Self.post(client, "/api/v1/downloads/bulk", #"{"action": "remove", "ids": ["\#(url)"]}"#)
            #expect(try API.json(last)["affected"] as? Int == 1)
            let none = try API.json(try await client.execute(uri: "/api/v1/downloads", method: .get, headers: API.headers))
            #expect(none["total"] as? Int == 0)
        }
    }

    @Test func settingsChangeWithoutARestartAndBadOnesChangeNothing() async throws {
        try await API.with { client, f, root in
            let sub = root + "/sub"
            try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
            let changed = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxConcurrentDownloads": 3, "maxConnectionsPerHost": 2, "defaultDirectory": "\#(sub)"}"#))
            #expect(changed.status == .ok)
            let settings = try API.json(changed)
            #expect(settings["maxConcurrentDownloads"] as? Int == 3)
            #expect(settings["maxConnectionsPerHost"] as? Int == 2)
            #expect((settings["defaultDirectory"] as? String)?.hasSuffix("/sub") == true)
            #expect(await f.manager.limits.slots == 3)

            // A download without a directory now goes to the new default
            f.serve("s", count: 5_000)
            _ = try await Self.post(client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(f.server.url("/files/s"))"}]}"#)
            await f.manager.waitUntilIdle()
            #expect(FileManager.default.fileExists(atPath: sub + "/s"))

            // A directory outside the roots is refused, and nothing changes
            let refused = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxConcurrentDownloads": 7, "defaultDirectory": "/etc"}"#))
            #expect(refused.status == .badRequest)
            #expect(try API.errorCode(refused) == "invalidField")
            #expect(await f.manager.limits.slots == 3)
            let zero = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxConcurrentDownloads": 0}"#))
            #expect(zero.status == .badRequest)
        }
    }

    @Test func speedLimitsChangeWhileDownloadsRun() async throws {
        try await API.with { client, f, _ in
            // Overall and per-host limits, in bytes per second; 0 lifts one
            let limited = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxBytesPerSecond": 1048576, "maxBytesPerSecondPerHost": 524288}"#))
            #expect(limited.status == .ok)
            #expect(try API.json(limited)["maxBytesPerSecond"] as? Int == 1_048_576)
            #expect(f.manager.overallRateLimit == 1_048_576)
            #expect(f.manager.perHostRateLimit == 524_288)
            let lifted = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxBytesPerSecond": 0}"#))
            #expect(try API.json(lifted)["maxBytesPerSecond"] as? Int == 0)
            #expect(f.manager.overallRateLimit == nil)
            #expect(f.manager.perHostRateLimit == 524_288)
            let negative = try await client.execute(
                uri: "/api/v1/settings", method: .patch, headers: API.headers,
                body: ByteBuffer(string: #"{"maxBytesPerSecondPerHost": -1}"#))
            #expect(negative.status == .badRequest)
            #expect(try API.json(negative)["error"].flatMap { ($0 as? [String: Any])?["field"] as? String } == "maxBytesPerSecondPerHost")
            #expect(f.manager.perHostRateLimit == 524_288)

            // One download's own limit, while it runs
            f.serve("r", count: 100_000)
            let id = f.server.url("/files/r?gate=r").absoluteString
            _ = try await Self.post(client, "/api/v1/downloads", #"{"downloads": [{"url": "\#(id)"}]}"#)
            await f.server.waitForGateWaiters("r", count: 1)
            let own = try await client.execute(
                uri: Self.path(id), method: .patch, headers: API.headers, body: ByteBuffer(string: #"{"maxBytesPerSecond": 200000}"#))
            #expect(own.status == .ok)
            #expect(await f.manager.rateLimit(of: DownloadID(id)) == 200_000)
            f.server.release("r")
            await f.manager.waitUntilIdle()
            // Once it has ended there is nothing to limit
            let ended = try await client.execute(
                uri: Self.path(id), method: .patch, headers: API.headers, body: ByteBuffer(string: #"{"maxBytesPerSecond": 1000}"#))
            #expect(ended.status == .conflict)
        }
    }

    @Test func theDashboardSignsInWithACookieThatNeedsItsOwnOrigin() async throws {
        try await API.with { client, f, _ in
            let host: HTTPFields = [HTTPField.Name("Host")!: API.host, .contentType: "application/json"]
            // The page itself needs no credential, and is the dashboard
            let page = try await client.execute(uri: "/", method: .get, headers: host)
            #expect(page.status == .ok)
            #expect(page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(String(buffer: page.body).contains("/dashboard/app.js"))

            // A wrong token is refused; the right one gives an HttpOnly, SameSite=Strict cookie
            let wrong = try await Self.post(client, "/api/v1/session", #"{"token": "nope"}"#, headers: host)
            #expect(wrong.status == .unauthorized)
            let signedIn = try await Self.post(client, "/api/v1/session", #"{"token": "\#(API.token)"}"#, headers: host)
            #expect(signedIn.status == .noContent)
            let cookie = try #require(signedIn.headers[.setCookie])
            #expect(cookie.contains("HttpOnly"))
            #expect(cookie.contains("SameSite=Strict"))
            let session = try #require(cookie.split(separator: ";").first.map(String.init))

            // The cookie reads the API
            var withCookie = host
            withCookie[.cookie] = session
            #expect(try await client.execute(uri: "/api/v1/stats", method: .get, headers: withCookie).status == .ok)

            // A change with the cookie needs the dashboard's own Origin
            let body = #"{"downloads": [{"url": "\#(f.server.url("/files/none"))"}]}"#
            let noOrigin = try await Self.post(client, "/api/v1/downloads", body, headers: withCookie)
            #expect(noOrigin.status == .forbidden)
            #expect(try API.errorCode(noOrigin) == "forbiddenOrigin")
            var foreign = withCookie
            foreign[.origin] = "http://evil.example"
            #expect(try await Self.post(client, "/api/v1/downloads", body, headers: foreign).status == .forbidden)
            var own = withCookie
            own[.origin] = "http://\(API.host)"
            #expect(try await Self.post(client, "/api/v1/downloads", body, headers: own).status == .created)

            // Signed out, the cookie no longer works
            #expect(try await client.execute(uri: "/api/v1/session", method: .delete, headers: own).status == .noContent)
            #expect(try await client.execute(uri: "/api/v1/stats", method: .get, headers: withCookie).status == .unauthorized)
        }
    }

    @Test func eventsNoClientWantedAreReplayedWhole() async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            // Given only a client that wants the ends
            let endsOnly = EventFilter(types: ["download"], states: [.completed])
            let (_, ends, endsClient) = await core.hub.subscribe(after: nil, filter: endsOnly)

            let before = await core.hub.latestEventID

            // When a download is added and completes
            f.serve("w", count: 20_000)
            let request = DownloadRequest(url: f.server.url("/files/w"), destination: .directory(f.directory))
            try await f.manager.enqueue([request])
            var parser = EventStreamParser()
            let sent = try #require(await ends.next())
            let completion = try #require(parser.feed(sent.readableBytesView).first)

            // Then a client replayed from before it is sent every state change, whole, in order
            let (replay, _, other) = await core.hub.subscribe(after: 1_000)
            #expect(replay.map(\.kind) == ["resync"])
            #expect(completion.id != nil)
            let (missed, _, another) = await core.hub.subscribe(after: before)
            var replayParser = EventStreamParser()
            var states: [JobState] = []
            for frame in missed {
                for event in replayParser.feed(frame.bytes.readableBytesView) where event.kind == "download" {
                    let view = try ServiceJSON.decoder.decode(DownloadView.self, from: event.data)
                    #expect(view.id == request.id.rawValue)
                    #expect(event.id == frame.id)
                    states.append(view.state)
                }
            }
            #expect(states.first == .queued)
            #expect(states.contains(.running))
            #expect(states.last == .completed)
            await core.hub.unsubscribe(endsClient)
            await core.hub.unsubscribe(other)
            await core.hub.unsubscribe(another)
            await core.hub.finish()
        }
    }

    /// The service says what moved, as the command line does: a download's completion
    /// event and its view give the bytes the completing run fetched, and one repeated and
    /// answered `304` says `unchanged`; the stats count those.
    @Test func whatACompletionMovedIsInItsEventItsViewAndTheStats() async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            let (_, ends, client) = await core.hub.subscribe(
                after: nil, filter: EventFilter(types: ["download"], states: [.completed]))
            f.serve("m", count: 30_000)
            let request = DownloadRequest(url: f.server.url("/files/m"), destination: .directory(f.directory))
            var parser = EventStreamParser()
            var completions: [DownloadView] = []
            for _ in 1...2 {
                try await core.add([request], paused: false)
                let frame = try #require(await ends.next())
                let event = try #require(parser.feed(frame.readableBytesView).first)
                completions.append(try ServiceJSON.decoder.decode(DownloadView.self, from: event.data))
                await f.manager.waitUntilIdle()
            }
            #expect(completions.map(\.bytesTransferred) == [30_000, 0])
            #expect(completions.map(\.unchanged) == [false, true])
            #expect(f.server.bytesServed(path: "/files/m") == 30_000)
            await f.manager.flushJournal()
            let view = try #require(try await core.views([request.id]).first)
            #expect(view.unchanged && view.bytesTransferred == 0 && view.bytes == 30_000)
            let stats = try await EventHub.stats(manager: f.manager, journal: f.journal!)
            #expect(stats.counts["completed"] == 1 && stats.unchanged == 1)
            #expect(stats.transferredBytes == 30_000 && stats.completedBytes == 60_000)
            await core.hub.unsubscribe(client)
            await core.hub.finish()
        }
    }

    @Test(.timeLimit(.minutes(4)))
    func addedDownloadsAreSeenQueuedBeforeAnythingElse() async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            let (_, live, client) = await core.hub.subscribe(after: nil, filter: EventFilter(types: ["download"]))
            let rules = AccessRulesBox(
                AccessRules(
                    token: API.token,
                    allowedHosts: AccessRules.hosts(listeningOn: "127.0.0.1", port: 6800).union(["localhost"])))
            let app = Application(router: ServiceRouter.make(core: core, rules: rules))

            // Given many small files, which start while the API is still answering the request
            let count = 300
            for index in 0..<count { f.serve("q\(index)", count: 2_000, seed: UInt64(index)) }
            let body = """
                {"downloads": [\((0..<count).map { "{\"url\": \"\(f.server.url("/files/q\($0)"))\"}" }.joined(separator: ","))]}
                """
            try await app.test(.router) { api in
                // When they are added in one request
                let added = try await Self.post(api, "/api/v1/downloads", body)
                #expect(added.status == .created)

                // Then every one is seen queued first, then running, then completed once
                var seen: [String: [JobState]] = [:]
                var completed = 0
                var parser = EventStreamParser()
                while completed < count, let bytes = await live.next() {
                    for event in parser.feed(bytes.readableBytesView) {
                        let view = try ServiceJSON.decoder.decode(DownloadView.self, from: event.data)
                        seen[view.id, default: []].append(view.state)
                        if view.state == .completed { completed += 1 }
                    }
                }
                #expect(seen.count == count)
                for (id, states) in seen {
                    #expect(states.first == .queued, "\(id): \(states)")
                    #expect(states.last == .completed && states.filter { $0 == .completed }.count == 1, "\(id): \(states)")
                    let running = try #require(states.firstIndex(of: .running), "\(id): \(states)")
                    #expect(!states[running...].contains(.queued), "\(id): \(states)")
                }
            }
            await core.hub.unsubscribe(client)
            await core.hub.finish()
        }
    }

    @Test(.timeLimit(.minutes(4)))
    func aDownloadAddedAgainIsAnnouncedFromItsJournalRow() async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            let (_, queued, client) = await core.hub.subscribe(
                after: nil, filter: EventFilter(types: ["download"], states: [.queued]))
            let rules = AccessRulesBox(
                AccessRules(
                    token: API.token,
                    allowedHosts: AccessRules.hosts(listeningOn: "127.0.0.1", port: 6800).union(["localhost"])))
            let app = Application(router: ServiceRouter.make(core: core, rules: rules))
            try await app.test(.router) { api in
                // Given a download that completed
                f.serve("again", count: 10_000)
                let body = "{\"downloads\": [{\"url\": \"\(f.server.url("/files/again"))\"}]}"
                #expect(try await Self.post(api, "/api/v1/downloads", body).status == .created)
                var parser = EventStreamParser()
                var announced: [DownloadView] = []
                func next() async throws -> DownloadView {
                    while announced.isEmpty, let bytes = await queued.next() {
                        announced += try parser.feed(bytes.readableBytesView).map {
                            try ServiceJSON.decoder.decode(DownloadView.self, from: $0.data)
                        }
                    }
                    // (the stream ends only when the test is cancelled, by its time limit)
                    guard !announced.isEmpty else { throw CancellationError() }
                    return announced.removeFirst()
                }
                let first = try await next()
                await f.manager.waitUntilIdle()
                #expect(try await Self.state(api, first.id) == "completed")
                // (added long ago, so that a view made afresh would not match)
                let longAgo = Date(timeIntervalSince1970: 1_700_000_000)
                try await f.journal!.writer.write { db in
                    try db.execute(sql: "UPDATE job SET createdAt = ? WHERE id = ?", arguments: [longAgo, first.id])
                }

                // When it is added again
                #expect(try await Self.post(api, "/api/v1/downloads", body).status == .created)

                // Then it is announced queued from its row, created when it was first added
                let second = try await next()
                #expect(second.id == first.id)
                #expect(second.createdAt == longAgo)
                #expect(second.finishedAt == nil && second.state == .queued)
                await f.manager.waitUntilIdle()
                #expect(try await Self.state(api, first.id) == "completed")
            }
            await core.hub.unsubscribe(client)
            await core.hub.finish()
        }
    }

    @Test func eventsComeInOrderWithFullSnapshotsAndReplayFromLastEventID() async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            let (_, live, client) = await core.hub.subscribe(after: nil)
            let endsOnly = EventFilter(types: ["download", "removed"], states: [.completed, .failed, .cancelled])
            let (_, ends, endsClient) = await core.hub.subscribe(after: nil, filter: endsOnly)

            // When a download is added and completes
            f.serve("e", count: 50_000)
            let request = DownloadRequest(url: f.server.url("/files/e"), destination: .directory(f.directory))
            try await f.manager.enqueue([request])

            // Then its state changes arrive in order, each with the whole download
            var events: [ServiceEvent] = []
            var states: [String] = []
            var parser = EventStreamParser()
            reading: while let bytes = await live.next() {
                for event in parser.feed(bytes.readableBytesView) {
                    events.append(event)
                    guard event.kind == "download" else { continue }
                    let view = try ServiceJSON.decoder.decode(DownloadView.self, from: event.data)
                    #expect(view.id == request.id.rawValue)
                    #expect(view.url == request.url.absoluteString)
                    states.append(view.state.rawValue)
                    if view.state == .completed {
                        #expect(view.bytes == 50_000)
                        break reading
                    }
                }
            }
            #expect(states.first == "queued")
            #expect(states.contains("running"))
            #expect(states.last == "completed")
            let ids = events.compactMap(\.id)
            #expect(ids.count == events.count)
            #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })

            // A client that asked for the ends only was sent the completion and nothing else
            var endParser = EventStreamParser()
            let sent = try #require(await ends.next())
            let endEvents = endParser.feed(sent.readableBytesView)
            #expect(endEvents.map(\.kind) == ["download"])
            #expect(try endEvents.map { try ServiceJSON.decoder.decode(DownloadView.self, from: $0.data).state } == [.completed])
            #expect(endEvents.first?.id == events.last { $0.kind == "download" }?.id)

            // A client that saw only the first frame is replayed the rest, in order
            let (replay, _, second) = await core.hub.subscribe(after: ids[0])
            #expect(replay.map(\.id).prefix(ids.count - 1) == ids.dropFirst())
            // and, filtered, only what its filter admits
            let (endsReplay, _, fourth) = await core.hub.subscribe(after: ids[0], filter: endsOnly)
            #expect(endsReplay.map(\.id) == endEvents.compactMap(\.id))
            await core.hub.unsubscribe(fourth)
            await core.hub.unsubscribe(endsClient)
            // One from another run (an unknown, older number) is told to resync
            let (stale, _, third) = await core.hub.subscribe(after: 1)
            #expect(stale.map(\.kind) == ["resync"])
            await core.hub.unsubscribe(client)
            await core.hub.unsubscribe(second)
            await core.hub.unsubscribe(third)
            await core.hub.finish()
        }
    }
}
