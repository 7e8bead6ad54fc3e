import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// netrc files as plain values, and their credentials against real servers: to the origin
/// of the URL only, never to the host a redirect names.
@Suite("netrc", .timeLimit(.minutes(4)))
struct NetrcTests {
    @Test func machinesLoginsAndPasswords() throws {
        let netrc = try Netrc(
            parsing: """
                # a comment line
                machine files.example.com login alice password s3cret
                machine Other.Example
                    login bob
                    password "with spaces \\" and quote"
                    account ignored
                default login anonymous password guest
                """)
        #expect(netrc.credentials(forHost: "files.example.com") == .init(login: "alice", password: "s3cret"))
        #expect(netrc.credentials(forHost: "FILES.example.COM")?.login == "alice")
        #expect(netrc.credentials(forHost: "other.example")?.password == "with spaces \" and quote")
        #expect(netrc.credentials(forHost: "unknown.example") == .init(login: "anonymous", password: "guest"))
    }

    @Test func withoutDefaultUnknownHostsGetNothing() throws {
        let netrc = try Netrc(parsing: "machine a.example login a password pa\n")
        #expect(netrc.credentials(forHost: "b.example") == nil)
    }

    @Test func firstEntryForAHostWins() throws {
        let netrc = try Netrc(parsing: "machine a login first password one\nmachine a login second password two\n")
        #expect(netrc.credentials(forHost: "a")?.login == "first")
    }

    @Test func entriesWithoutPasswordAreIgnored() throws {
        let netrc = try Netrc(parsing: "machine a login only\nmachine b login b password pb")
        #expect(netrc.credentials(forHost: "a") == nil)
        #expect(netrc.credentials(forHost: "b")?.password == "pb")
    }

    @Test func macrosAreSkippedToTheBlankLine() throws {
        let netrc = try Netrc(
            parsing: """
                macdef init
                cd /pub
                password not-a-password

                machine a login a password pa
                """)
        #expect(netrc.credentials(forHost: "a")?.password == "pa")
    }

    @Test func malformedFilesNameTheLineNotTheSecret() {
        for (text, line) in [
            ("machine a login a password", 1), ("machine a\nlogin a password pa\nbogus word-secret", 3),
            ("machine a password \"unterminated-secret", 1),
        ] {
            let error = #expect(throws: DownloadError.self) { try Netrc(parsing: text) }
            #expect(error?.code == .invalidConfiguration)
            #expect(error?.message.contains("line \(line)") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("secret") == false)
        }
    }

    @Test func descriptionsHideThePasswords() throws {
        #expect("\(Netrc.Credentials(login: "alice", password: "s3cret"))" == "alice:***")
        let netrc = try Netrc(parsing: "machine a.example login alice password s3cret\n")
        var dumped = ""
        dump(netrc, to: &dumped)
        dump(netrc.credentials(forHost: "a.example"), to: &dumped)
        #expect(!(dumped + "\(netrc)").contains("s3cret"))
        #expect(dumped.contains("a.example"))
    }

    @Test func unreadableFileIsNamed() {
        let path = "/nonexistent-\(UUID().uuidString)/netrc"
        let error = #expect(throws: DownloadError.self) { try Netrc(contentsOfFile: path) }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.message.contains(path) == true)
    }

    // MARK: - The policy

    @Test func policyBindsNetrcCredentialsToTheOrigin() throws {
        let netrc = try Netrc(parsing: "machine origin.example login alice password s3cret\n")
        let url = URL(string: "https://origin.example/file")!
        let policy = RedirectPolicy(url: url, headers: [], netrc: netrc, allowsDowngrade: false)
        let basic = "Basic " + Data("alice:s3cret".utf8).base64EncodedString()
        #expect(policy.headers(for: url).map { $0.value } == [basic])
        // Another port, scheme or host is another origin
        #expect(policy.headers(for: URL(string: "https://origin.example:8443/file")!).isEmpty)
        #expect(policy.headers(for: URL(string: "https://cdn.example/file")!).isEmpty)
    }

    @Test func anAuthorizationOfTheRequestWinsOverNetrc() throws {
        let netrc = try Netrc(parsing: "default login alice password s3cret\n")
        let url = URL(string: "https://origin.example/file")!
        let policy = RedirectPolicy(
            url: url, headers: [("authorization", "Bearer mine")], netrc: netrc, allowsDowngrade: false)
        #expect(policy.headers(for: url).map { $0.value } == ["Bearer mine"])
    }

    // MARK: - Against servers

    @Test func netrcCredentialsReachTheOriginAndNotTheRedirectTarget() async throws {
        // Given a netrc with an entry for both hosts: the origin (127.0.0.1) and the host
        // a redirect names (localhost, another server)
        let netrc = try Netrc(
            parsing: """
                machine 127.0.0.1 login alice password origin-secret
                machine localhost login mallory password target-secret
                """)
        try await CredentialTests.withTwoOrigins({ $0.netrc = netrc }) { f, other in
            let bytes = FaultServer.randomBytes(count: 30_000, seed: 21)
            other.setFile("asset", bytes)
            let target = URL(string: "http://localhost:\(other.port)/files/asset")!

            // When a download starts at the origin and is redirected to the other host
            let start = CredentialTests.redirect(on: f.server, to: target)
            let result = try await f.manager.download(
                DownloadRequest(url: start, destination: .directory(f.directory, name: "asset"))
            ).result

            // Then the origin got its netrc credentials, and the redirect's host none
            #expect(result.finalURL == target)
            #expect(sha256(f.contents("asset")) == sha256(bytes))
            let basic = "Basic " + Data("alice:origin-secret".utf8).base64EncodedString()
            #expect(f.server.requests(path: "/redirect/0").first?.header("Authorization") == basic)
            let redirected = try #require(other.requests(path: "/files/asset").first)
            #expect(redirected.header("Authorization") == nil)
        }
    }

    @Test func commandLineReadsNetrcFileAndWarnsWhenOthersCanReadIt() async throws {
        try await Fixture.with { f in
            // Given a file behind netrc credentials, and a netrc readable by everyone
            let bytes = f.serve("n.bin", count: 5_000)
            let netrcPath = f.directory.appendingPathComponent("netrc").path
            try "machine 127.0.0.1 login alice password cli-secret\n".write(
                toFile: netrcPath, atomically: true, encoding: .utf8)
            chmod(netrcPath, 0o644)
            let journal = f.directory.appendingPathComponent("journal.sqlite").path
            let out = f.directory.appendingPathComponent("out")

            // When haul get runs with --netrc-file
            let run = try await Haul.run([
                "get", f.server.url("/files/n.bin").absoluteString, "-d", out.path, "--journal", journal,
                "--netrc-file", netrcPath,
            ])

            // Then the request carried the credentials, haul warned, and never printed them
            #expect(run.status == 0, "\(run.stderr)")
            let sent = try #require(f.server.requests(path: "/files/n.bin").first)
            #expect(sent.header("Authorization") == "Basic " + Data("alice:cli-secret".utf8).base64EncodedString())
            #expect(run.stderr.contains("can be read by other users"))
            #expect(!(run.stdout + run.stderr).contains("cli-secret"))
            #expect(sha256(FileManager.default.contents(atPath: out.appendingPathComponent("n.bin").path)) == sha256(bytes))

            // And a malformed netrc is a usage error (exit 2) naming the line
            try "machine 127.0.0.1 login alice password\n".write(toFile: netrcPath, atomically: true, encoding: .utf8)
            let bad = try await Haul.run([
                "get", f.server.url("/files/n.bin").absoluteString, "--journal", journal, "--netrc-file", netrcPath,
            ])
            #expect(bad.status == 2)
            #expect(bad.stderr.contains("line 1"))
        }
    }
}
