import Foundation
import Haul
import HaulServer
import HaulTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// The API in process (HummingbirdTesting's router mode) over a real manager and journal,
/// downloading from the fault server.
@Suite("Service API")
struct ServiceAPITests {
    static let token = "test-token-0123456789abcdef"
    static let host = "127.0.0.1:6800"

    /// A journal-backed manager, a download root, the router, and the fault server.
    static func with(
        _ body: @Sendable (_ client: any TestClientProtocol, _ f: Fixture, _ root: String) async throws -> Void
    ) async throws {
        try await Fixture.with(journal: true) { f in
            let root = f.directory.path
            let core = ServiceCore(
                manager: f.manager, journal: f.journal!, batch: try DownloadBatch(roots: [root], defaultDirectory: root))
            await core.hub.start()
            // HummingbirdTesting's router mode gives every request the authority "localhost";
            // the tests' own Host field must be allowed as well (see tokenAndHostAreChecked).
            let rules = AccessRulesBox(
                AccessRules(
                    token: token,
                    allowedHosts: AccessRules.hosts(listeningOn: "127.0.0.1", port: 6800).union(["localhost"])))
            let app = Application(router: ServiceRouter.make(core: core, rules: rules))
            try await app.test(.router) { client in try await body(client, f, root) }
            await core.hub.finish()
        }
    }

    static var headers: HTTPFields {
        [.authorization: "Bearer \(token)", HTTPField.Name("Host")!: host, .contentType: "application/json"]
    }

    static func json(_ response: TestResponse) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
    }

    static func errorCode(_ response: TestResponse) throws -> String? {
        (try json(response)["error"] as? [String: Any])?["code"] as? String
    }

    @Test func addedDownloadsAreListedAndComplete() async throws {
        try await Self.with { client, f, _ in
            // Given two files on the fault server
            let a = f.serve("a", count: 30_000)
            f.serve("b", count: 40_000, seed: 2)
            let body = """
                {"downloads": [{"url": "\(f.server.url("/files/a"))"}, {"url": "\(f.server.url("/files/b"))", "name": "bee"}]}
                """

            // When they are added
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: body))
            #expect(added.status == .created)
            let ids = try #require(try Self.json(added)["ids"] as? [String])
            #expect(ids == [f.server.url("/files/a").absoluteString, f.server.url("/files/b").absoluteString])
            await f.manager.waitUntilIdle()

            // Then both are listed, completed, and one is fetched by ID
            let list = try await client.execute(uri: "/api/v1/downloads?state=completed", method: .get, headers: Self.headers)
            #expect(list.status == .ok)
            let page = try Self.json(list)
            #expect(page["total"] as? Int == 2)
            let downloads = try #require(page["downloads"] as? [[String: Any]])
            #expect(downloads.map { $0["state"] as? String } == ["completed", "completed"])
            let one = try await client.execute(
                uri: "/api/v1/downloads/\(ids[0].addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)",
                method: .get, headers: Self.headers)
            #expect(one.status == .ok)
            #expect(try Self.json(one)["bytes"] as? Int == 30_000)
            #expect(sha256(f.contents("a")) == sha256(a))
            #expect(f.contents("bee")?.count == 40_000)

            // And the stats count them
            let stats = try Self.json(try await client.execute(uri: "/api/v1/stats", method: .get, headers: Self.headers))
            #expect((stats["counts"] as? [String: Int])?["completed"] == 2)
        }
    }

    /// A zsync control file added by URL is a delta download: its target is built from a
    /// seed inside the roots and the ranges it lacks; a seed outside the roots, fields the
    /// control file gives, and seeds without a control file are refused, naming the field.
    @Test func aControlFileIsADeltaDownloadWithSeedsOnlyInsideTheRoots() async throws {
        try await Self.with { client, f, root in
            // Given a new version and its control file on the server, and the old version
            // inside the download root and outside it
            let (old, new) = DeltaDownloadTests.versions()
            f.server.setFile("t.bin", new)
            f.server.setFile("t.bin.zsync", DeltaDownloadTests.control(of: new).encoded())
            try Data(old).write(to: f.file("old.bin"))
            let outside = FileManager.default.temporaryDirectory.appendingPathComponent("haul-outside-\(UUID().uuidString)")
            try Data(old).write(to: outside)
            defer { try? FileManager.default.removeItem(at: outside) }
            let control = f.server.url("/files/t.bin.zsync").absoluteString
            func add(_ download: String) async throws -> TestResponse {
                try await client.execute(
                    uri: "/api/v1/downloads", method: .post, headers: Self.headers,
                    body: ByteBuffer(string: #"{"downloads": [\#(download)]}"#))
            }

            // When the refused ones are added, then each is a 400 naming its field, and nothing is fetched
            for (download, field) in [
                (#"{"url": "\#(control)", "seeds": ["\#(outside.path)"]}"#, "downloads[0].seeds[0]"),
                (#"{"url": "\#(control)", "seeds": ["../../etc/passwd"]}"#, "downloads[0].seeds[0]"),
                (#"{"url": "\#(control)", "checksum": "sha-256=\#(String(repeating: "0", count: 64))"}"#, "downloads[0].checksum"),
                (#"{"url": "\#(f.server.url("/files/t.bin"))", "seeds": ["old.bin"]}"#, "downloads[0].seeds"),
            ] {
                let refused = try await add(download)
                #expect(refused.status == .badRequest, "\(download)")
                #expect((try Self.json(refused)["error"] as? [String: Any])?["field"] as? String == field, "\(download)")
            }
            #expect(f.server.statistics.totalRequests == 0)

            // When the control file is added with the seed inside the root
            let added = try await add(#"{"url": "\#(control)", "seeds": ["old.bin"], "name": "new.bin"}"#)
            #expect(added.status == .created, "\(String(buffer: added.body))")
            await f.manager.waitUntilIdle()

            // Then the target is built, and what was asked for is the ranges the seed lacks,
            // several to a request (the fault server answers those with the whole file,
            // which is taken from as it passes)
            #expect(sha256(f.contents("new.bin")) == sha256(new))
            let ranges = f.server.requests(path: "/files/t.bin").compactMap { $0.header("Range") }
            #expect(ranges.first?.split(separator: ",").count ?? 0 > 1, "\(ranges)")
            #expect(!(ranges.first ?? "").hasPrefix("bytes=0-"), "\(ranges)")
        }
    }

    @Test func downloadsAddedPausedStartOnlyWhenResumed() async throws {
        try await Self.with { client, f, _ in
            // Given a file on the fault server, added paused
            let a = f.serve("a", count: 30_000)
            let body = #"{"downloads": [{"url": "\#(f.server.url("/files/a"))"}], "paused": true}"#
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: body))
            #expect(added.status == .created)
            let id = try #require((try Self.json(added)["ids"] as? [String])?.first)
            let path = "/api/v1/downloads/\(id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"

            // Then it is listed paused, and the server never saw a request for it
            await f.manager.waitUntilIdle()
            #expect(try Self.json(try await client.execute(uri: path, method: .get, headers: Self.headers))["state"] as? String == "paused")
            #expect(f.server.requests(path: "/files/a").isEmpty)

            // When it is resumed, it completes
            let resumed = try await client.execute(
                uri: path, method: .patch, headers: Self.headers, body: ByteBuffer(string: #"{"state": "queued"}"#))
            #expect(resumed.status == .ok)
            await f.manager.waitUntilIdle()
            #expect(try Self.json(try await client.execute(uri: path, method: .get, headers: Self.headers))["state"] as? String == "completed")
            #expect(sha256(f.contents("a")) == sha256(a))
        }
    }

    @Test func aBatchWithOneBadFieldAddsNothingAndNamesIt() async throws {
        try await Self.with { client, f, _ in
            let body = """
                {"downloads": [{"url": "\(f.server.url("/files/a"))"}, {"url": "http://x/y", "directory": "/etc"}]}
                """
            let response = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: body))
            #expect(response.status == .badRequest)
            #expect(try Self.errorCode(response) == "invalidField")
            let message = try #require((try Self.json(response)["error"] as? [String: Any])?["message"] as? String)
            #expect(message.hasPrefix("downloads[1].directory:"))
            let list = try Self.json(try await client.execute(uri: "/api/v1/downloads", method: .get, headers: Self.headers))
            #expect(list["total"] as? Int == 0)
            #expect(f.server.requests(path: "/files/a").isEmpty)
        }
    }

    @Test func malformedBodiesMissingFieldsAndOversizedBodies() async throws {
        try await Self.with { client, _, _ in
            let malformed = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: "{\"downloads\": ["))
            #expect(malformed.status == .badRequest)
            let missing = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers,
                body: ByteBuffer(string: #"{"downloads": [{"name": "x"}]}"#))
            #expect(missing.status == .badRequest)
            let message = try #require((try Self.json(missing)["error"] as? [String: Any])?["message"] as? String)
            #expect(message == "downloads[0].url: is required")
            let huge = "{\"downloads\": [" + String(repeating: " ", count: DownloadsAPI.maximumBody) + "]}"
            let tooLarge = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: huge))
            #expect(tooLarge.status == .contentTooLarge)
            #expect(try Self.errorCode(tooLarge) == "tooLarge")
            let badQuery = try await client.execute(uri: "/api/v1/downloads?limit=0", method: .get, headers: Self.headers)
            #expect(badQuery.status == .badRequest)
            let badState = try await client.execute(uri: "/api/v1/downloads?state=done", method: .get, headers: Self.headers)
            #expect(badState.status == .badRequest)
            let badFilter = try await client.execute(uri: "/api/v1/events?types=download,gossip", method: .get, headers: Self.headers)
            #expect(badFilter.status == .badRequest)
            #expect(try Self.errorCode(badFilter) == "invalidField")
        }
    }

    /// Sizes are what a client or a server claims: two of Int64.max each once overflowed the
    /// sum of the manager's progress and crashed the service at its next stats tick, and
    /// again at every restart (the journal resumes them). schemathesis's helper found it.
    @Test func hugeClaimedSizesDoNotOverflowTheTotals() async throws {
        try await Self.with { client, f, _ in
            f.serve("h", count: 1_000)
            let gated = f.server.url("/files/h?gate=huge").absoluteString
            let body = """
                {"downloads": [{"url": "\(gated)&n=1", "expectedSize": 9223372036854775807},
                               {"url": "\(gated)&n=2", "expectedSize": 9223372036854775807}]}
                """
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: body))
            #expect(added.status == .created)
            let stats = try await client.execute(uri: "/api/v1/stats", method: .get, headers: Self.headers)
            #expect(stats.status == .ok)
            let progress = await f.manager.progress
            #expect(progress.totalBytes == .max)
            f.server.release("huge")
            // And a piece list that cannot fit such a size is refused, not a crash
            let pieces = """
                {"downloads": [{"url": "\(gated)&n=3", "expectedSize": 9223372036854775807,
                  "pieces": {"algorithm": "md5", "length": 2, "hashes": ["00000000000000000000000000000000"]}}]}
                """
            let refused = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: Self.headers, body: ByteBuffer(string: pieces))
            #expect(refused.status == .badRequest)
        }
    }

    @Test func unknownIDIs404() async throws {
        try await Self.with { client, _, _ in
            let response = try await client.execute(uri: "/api/v1/downloads/nope", method: .get, headers: Self.headers)
            #expect(response.status == .notFound)
            #expect(try Self.errorCode(response) == "notFound")
        }
    }

    @Test func tokenAndHostAreChecked() async throws {
        try await Self.with { client, _, _ in
            var noToken = Self.headers
            noToken[.authorization] = nil
            let anonymous = try await client.execute(uri: "/api/v1/stats", method: .get, headers: noToken)
            #expect(anonymous.status == .unauthorized)
            #expect(try Self.errorCode(anonymous) == "unauthorized")

            var wrongToken = Self.headers
            wrongToken[.authorization] = "Bearer \(Self.token)x"
            #expect(try await client.execute(uri: "/api/v1/stats", method: .get, headers: wrongToken).status == .unauthorized)

            var rebound = Self.headers
            rebound[HTTPField.Name("Host")!] = "attacker.example:6800"
            let foreign = try await client.execute(uri: "/api/v1/stats", method: .get, headers: rebound)
            #expect(foreign.status == .forbidden)
            #expect(try Self.errorCode(foreign) == "forbiddenHost")
        }
    }
}
