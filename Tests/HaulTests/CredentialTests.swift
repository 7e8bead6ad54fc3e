import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Credentials against real servers: two fault servers on different ports are two origins.
@Suite("Credentials", .timeLimit(.minutes(4)))
struct CredentialTests {
    static let secrets: [(name: String, value: String)] = [
        ("Authorization", "Bearer t0ken-secret"), ("Cookie", "session=cookie-secret"),
        ("Proxy-Authorization", "Basic cHJveHktc2VjcmV0"), ("X-Api-Key", "key-secret"), ("X-Trace", "trace-1"),
    ]
    static let credentialNames = ["Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key"]

    /// A path on `server` that redirects (302) to `target`, an absolute URL.
    static func redirect(on server: FaultServer, to target: URL) -> URL {
        let encoded = target.absoluteString.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        return server.url("/redirect/0?to=\(encoded)")
    }

    /// Runs `body` with a fixture and a second server: another origin.
    static func withTwoOrigins(
        journal: Bool = false, _ configure: (inout DownloadManager.Configuration) -> Void = { _ in },
        _ body: (Fixture, FaultServer) async throws -> Void
    ) async throws {
        let other = try await FaultServer.start()
        do {
            try await Fixture.with(journal: journal, configure) { f in try await body(f, other) }
        } catch {
            try? await other.shutdown()
            throw error
        }
        try await other.shutdown()
    }

    @Test func credentialsReachTheirOriginAndNotTheRedirectTarget() async throws {
        try await Self.withTwoOrigins { f, other in
            // Given a file on another origin, reached through a redirect from the first
            let bytes = FaultServer.randomBytes(count: 50_000, seed: 3)
            other.setFile("asset", bytes)
            var request = DownloadRequest(
                url: Self.redirect(on: f.server, to: other.url("/files/asset")),
                destination: .directory(f.directory, name: "asset"), headers: Self.secrets)
            request.sensitiveHeaderNames = ["x-api-key"]

            // When it is downloaded
            let result = try await f.manager.download(request).result

            // Then the first origin saw every header, the second none of the credentials
            #expect(sha256(f.contents("asset")) == sha256(bytes))
            #expect(result.finalURL == other.url("/files/asset"))
            let first = try #require(f.server.requests(path: "/redirect/0").first)
            for (name, value) in Self.secrets { #expect(first.header(name) == value) }
            let second = try #require(other.requests(path: "/files/asset").first)
            for name in Self.credentialNames { #expect(second.header(name) == nil, "\(name) leaked") }
            #expect(second.header("X-Trace") == "trace-1")
        }
    }

    @Test func credentialsAreSentAgainOnlyWhenARedirectReturnsToTheOrigin() async throws {
        try await Self.withTwoOrigins { f, other in
            let bytes = f.serve("home", count: 20_000)
            // origin → other origin → back to the origin
            let back = Self.redirect(on: other, to: f.server.url("/files/home"))
            let request = DownloadRequest(
                url: Self.redirect(on: f.server, to: back), destination: .directory(f.directory, name: "home"),
                headers: [("Authorization", "Bearer t0ken-secret")])
            _ = try await f.manager.download(request).result
            #expect(sha256(f.contents("home")) == sha256(bytes))
            #expect(f.server.requests(path: "/redirect/0").first?.header("Authorization") == "Bearer t0ken-secret")
            #expect(other.requests(path: "/redirect/0").first?.header("Authorization") == nil)
            #expect(f.server.requests(path: "/files/home").first?.header("Authorization") == "Bearer t0ken-secret")
        }
    }

    @Test func userInfoIsBasicAuthForItsOriginOnly() async throws {
        try await Self.withTwoOrigins { f, other in
            other.setFile("u", FaultServer.randomBytes(count: 1000, seed: 4))
            let redirect = Self.redirect(on: f.server, to: other.url("/files/u"))
            var components = URLComponents(url: redirect, resolvingAgainstBaseURL: false)!
            components.user = "alice"
            components.password = "pw-secret"
            let handle = try await f.manager.download(
                DownloadRequest(url: components.url!, destination: .directory(f.directory, name: "u")))
            #expect(!handle.id.rawValue.contains("pw-secret"))
            #expect(handle.id.rawValue == redirect.absoluteString)
            _ = try await handle.result
            let basic = "Basic " + Data("alice:pw-secret".utf8).base64EncodedString()
            #expect(f.server.requests(path: "/redirect/0").first?.header("Authorization") == basic)
            #expect(other.requests(path: "/files/u").first?.header("Authorization") == nil)
        }
    }

    @Test func segmentsCarryCredentialsOnlyOnTheirOrigin() async throws {
        try await Self.withTwoOrigins({ configuration in
            configuration.segmentedConnections = 3
            configuration.segmentationThreshold = 1 << 20
            configuration.maxConnectionsPerHost = 4
        }) { f, other in
            // Segments fetched from another origin, after a redirect, go without them (each
            // response trickles until the test has seen three, so that splitting pays)
            let trickling = "gate=split&gate_after=0&gate_rate=\(256 << 10)"
            let bytes = FaultServer.randomBytes(count: 16 << 20, seed: 5)
            other.setFile("seg", bytes)
            let authorization: [(name: String, value: String)] = [("Authorization", "Bearer t0ken-secret")]
            let away = try await f.manager.download(
                DownloadRequest(
                    url: Self.redirect(on: f.server, to: other.url("/files/seg?\(trickling)")),
                    destination: .directory(f.directory, name: "seg"), headers: authorization))
            await other.waitForRequests(count: 3, path: "/files/seg")
            other.release("split")
            _ = try await away.result
            #expect(sha256(f.contents("seg")) == sha256(bytes))
            let elsewhere = other.requests(path: "/files/seg")
            #expect(elsewhere.contains { $0.header("Range") != nil })
            #expect(elsewhere.allSatisfy { $0.header("Authorization") == nil })

            // while segments from the origin itself keep them.
            let own = f.serve("own", count: 16 << 20)
            let home = try await f.manager.download(
                DownloadRequest(
                    url: f.server.url("/files/own?\(trickling)"), destination: .directory(f.directory, name: "own"),
                    headers: authorization))
            await f.server.waitForRequests(count: 3, path: "/files/own")
            f.server.release("split")
            _ = try await home.result
            #expect(sha256(f.contents("own")) == sha256(own))
            let served = f.server.requests(path: "/files/own")
            #expect(served.contains { $0.header("Range") != nil })
            #expect(served.allSatisfy { $0.header("Authorization") == "Bearer t0ken-secret" })
        }
    }

    // MARK: - The journal

    /// Every byte of the journal's files (the database, its WAL and shared memory).
    static func journalBytes(_ path: String) -> Data {
        var data = Data()
        for suffix in ["", "-wal", "-shm"] {
            if let bytes = FileManager.default.contents(atPath: path + suffix) { data.append(bytes) }
        }
        return data
    }

    @Test func theJournalDoesNotStoreCredentialsButTheQueueUsesThem() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("q", count: 30_000)
            var components = URLComponents(url: f.server.url("/files/q"), resolvingAgainstBaseURL: false)!
            components.user = "alice"
            components.password = "pw-secret"
            var request = DownloadRequest(
                url: components.url!, destination: .directory(f.directory),
                headers: [("Cookie", "session=cookie-secret"), ("X-Api-Key", "key-secret"), ("X-Trace", "trace-1")])
            request.sensitiveHeaderNames = ["X-Api-Key"]
            // Queued through the journal: admission rebuilds the request from its row.
            try await f.manager.enqueue([request])
            await f.manager.waitUntilIdle()
            #expect(sha256(f.contents("q")) == sha256(bytes))
            let sent = try #require(f.server.requests(path: "/files/q").first)
            #expect(sent.header("Cookie") == "session=cookie-secret")
            #expect(sent.header("X-Api-Key") == "key-secret")
            #expect(sent.header("Authorization") == "Basic " + Data("alice:pw-secret".utf8).base64EncodedString())

            let stored = Self.journalBytes(f.directory.path + "-journal/journal.sqlite")
            for secret in ["pw-secret", "cookie-secret", "key-secret", Data("alice:pw-secret".utf8).base64EncodedString()] {
                #expect(stored.range(of: Data(secret.utf8)) == nil, "\(secret) is in the journal")
            }
            #expect(stored.range(of: Data("trace-1".utf8)) != nil)
            #expect(try f.journal?.job(request.id)?.url == f.server.url("/files/q").absoluteString)
        }
    }

    @Test func aJobWhoseCredentialsAreGoneIsLeftPausedWithoutARequest() async throws {
        try await Fixture.with(journal: true) { f in
            f.serve("g", count: 10_000)
            let url = f.server.url("/files/g?gate=g")
            let request = DownloadRequest(
                url: url, destination: .directory(f.directory), headers: [("Authorization", "Bearer t0ken-secret")])
            // A first manager starts it, then stops (as a process would at Ctrl-C).
            try await f.manager.enqueue([request])
            await f.server.waitForGateWaiters("g", count: 1)
            await f.manager.shutdown()
            #expect(try f.journal?.job(request.id)?.state == .paused)

            // A second one, without the credentials, does not run it (the server would answer now).
            f.server.release("g")
            let later = f.makeManager()
            let events = later.events
            #expect(try await later.resumeUnfinished() == 1)
            var error: DownloadError?
            for await managerEvent in events where managerEvent.event.isTerminal {
                if case .failed(let failure) = managerEvent.event { error = failure }
                break
            }
            #expect(error?.code == .credentialsRequired)
            #expect(error?.message.contains("Authorization") == true)
            await later.waitUntilIdle()
            await later.shutdown()
            #expect(f.server.requests(path: "/files/g").count == 1)
            let job = try #require(try f.journal?.job(request.id))
            #expect(job.state == .paused)
            #expect(job.errorCode == "credentialsRequired")
        }
    }

    @Test func storedCredentialsLetAnotherManagerResume() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("s", count: 10_000)
            var request = DownloadRequest(
                url: f.server.url("/files/s?gate=s"), destination: .directory(f.directory),
                headers: [("Authorization", "Bearer t0ken-secret")])
            request.storesCredentials = true
            try await f.manager.enqueue([request])
            await f.server.waitForGateWaiters("s", count: 1)
            await f.manager.shutdown()

            f.server.release("s")
            let later = f.makeManager()
            #expect(try await later.resumeUnfinished() == 1)
            await later.waitUntilIdle()
            await later.shutdown()
            #expect(sha256(f.contents("s")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/s").last?.header("Authorization") == "Bearer t0ken-secret")
        }
    }

    @Test func theJournalIsPrivateToItsOwner() async throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("haul-modes-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: base) }
        let path = base.appendingPathComponent("state/journal.sqlite").path
        let journal = try Journal(path: path)
        try await Fixture.with { f in
            let bytes = f.serve("m", count: 1000)
            let manager = DownloadManager(configuration: f.configuration, journal: journal, eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
            _ = try await manager.download(
                DownloadRequest(
                    url: f.server.url("/files/m"), destination: .directory(f.directory),
                    headers: [("X-Trace", "t")])
            ).result
            #expect(sha256(f.contents("m")) == sha256(bytes))
            // While the journal is open its WAL and shared memory exist too.
            for suffix in ["", "-wal", "-shm"] {
                #expect(Self.mode(path + suffix) == 0o600, "journal.sqlite\(suffix)")
            }
            #expect(Self.mode(base.appendingPathComponent("state").path) == 0o700)
            await manager.shutdown()
        }

        // An existing journal made readable by others is tightened when opened.
        let old = base.appendingPathComponent("old.sqlite").path
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: base.path)
        #expect(FileManager.default.createFile(atPath: old, contents: nil, attributes: [.posixPermissions: 0o644]))
        _ = try Journal(path: old)
        #expect(Self.mode(old) == 0o600)
        // A directory the user named, and that existed, is left as it is.
        #expect(Self.mode(base.path) == 0o755)
    }

    static func mode(_ path: String) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int).flatMap { $0 }
    }
}

/// Credentials through the `haul` binary: never printed, never journaled unless asked.
@Suite("Credentials (CLI)", .timeLimit(.minutes(4)))
struct CredentialCLITests {
    @Test func getSendsCredentialsToTheOriginOnlyAndNeverPrintsThem() async throws {
        try await CLIFixture.with { f, journal in
            let other = try await FaultServer.start()
            do {
                try await Self.checkGet(f, other: other, journal: journal)
            } catch {
                try? await other.shutdown()
                throw error
            }
            try await other.shutdown()
        }
    }

    static func checkGet(_ f: Fixture, other: FaultServer, journal: String) async throws {
        do {
            other.setFile("c", FaultServer.randomBytes(count: 5000, seed: 6))
            let redirect = CredentialTests.redirect(on: f.server, to: other.url("/files/c"))
            var components = URLComponents(url: redirect, resolvingAgainstBaseURL: false)!
            components.user = "alice"
            components.password = "pw-secret"
            let run = try await Haul.run([
                "get", components.url!.absoluteString, "-o", "c", "-d", f.directory.path, "--json",
                "--secret-header", "X-Api-Key: key-secret", "--header", "X-Trace: trace-1", "--journal", journal,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            let basic = "Basic " + Data("alice:pw-secret".utf8).base64EncodedString()
            let first = try #require(f.server.requests(path: "/redirect/0").first)
            #expect(first.header("Authorization") == basic)
            #expect(first.header("X-Api-Key") == "key-secret")
            let second = try #require(other.requests(path: "/files/c").first)
            #expect(second.header("Authorization") == nil)
            #expect(second.header("X-Api-Key") == nil)
            #expect(second.header("X-Trace") == "trace-1")

            #expect(try await Haul.jobs(journal, all: true).first?["url"] as? String == redirect.absoluteString)
            let list = try await Haul.run(["list", "--json", "--all", "--journal", journal])
            let table = try await Haul.run(["list", "--all", "--journal", journal])
            let stored = CredentialTests.journalBytes(journal)
            for secret in ["pw-secret", "key-secret", Data("alice:pw-secret".utf8).base64EncodedString()] {
                for (what, text) in [("get", run.stdout + run.stderr), ("list --json", list.stdout), ("list", table.stdout)] {
                    #expect(!text.contains(secret), "\(what) shows \(secret)")
                }
                #expect(stored.range(of: Data(secret.utf8)) == nil, "the journal holds \(secret)")
            }
        }
    }

    /// Starts `haul get` on a stalling file with an Authorization header and interrupts it
    /// once bytes are on disk; returns the arguments to run it again.
    static func interruptedGet(_ f: Fixture, journal: String, extra: [String] = []) async throws -> [String] {
        f.serve("big", count: 2_000_000)
        let url = f.server.url("/files/big?stall_after=500000&stall_times=1").absoluteString
        // An interrupted haul exits at once, its stalled request cancelled; no timeout may end
        // the stall first (a retry would be a second request), however slow the machine.
        let arguments =
            ["get", url, "-d", f.directory.path, "--json", "--timeout", "600"]
            + ["--header", "Authorization: Bearer t0ken-secret"] + extra + ["--journal", journal]
        let first = try await Haul.run(arguments) { line in
            line.contains("\"event\":\"progress\"") ? SIGINT : nil
        }
        #expect(first.status == 130)
        #expect(f.server.requests(path: "/files/big").count == 1)
        return arguments
    }

    @Test func resumeWithoutTheCredentialsSaysWhyAndSendsNothing() async throws {
        try await CLIFixture.with { f, journal in
            let arguments = try await Self.interruptedGet(f, journal: journal)

            // haul resume was not given the header: it must not ask the server without it.
            let resume = try await Haul.run(["resume", "--journal", journal])
            #expect(resume.status == 1)
            #expect(resume.stderr.contains("started with credentials (Authorization)"))
            #expect(resume.stderr.contains("--store-credentials"))
            #expect(!(resume.stdout + resume.stderr).contains("t0ken-secret"))
            #expect(f.server.requests(path: "/files/big").count == 1)
            let job = try #require(try await Haul.jobs(journal).first)
            #expect(job["state"] as? String == "paused")
            #expect((job["error"] as? String)?.contains("Authorization") == true)
            #expect(CredentialTests.journalBytes(journal).range(of: Data("t0ken-secret".utf8)) == nil)

            // The same command again, with the header, finishes it from the partial file.
            let again = try await Haul.run(arguments)
            #expect(again.status == 0, "\(again.stderr)")
            let last = try #require(f.server.requests(path: "/files/big").last)
            #expect(last.header("Authorization") == "Bearer t0ken-secret")
            #expect(last.header("Range") != nil)
        }
    }

    @Test func resumeWithStoredCredentialsContinues() async throws {
        try await CLIFixture.with { f, journal in
            _ = try await Self.interruptedGet(f, journal: journal, extra: ["--store-credentials"])
            let resume = try await Haul.run(["resume", "--journal", journal])
            #expect(resume.status == 0, "\(resume.stderr)")
            let last = try #require(f.server.requests(path: "/files/big").last)
            #expect(last.header("Authorization") == "Bearer t0ken-secret")
            #expect(last.header("Range") != nil)
            #expect(CredentialTests.mode(journal) == 0o600)
        }
    }
}
