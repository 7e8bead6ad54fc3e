import Foundation
import Testing

@testable import Haul

/// The credential rules as pure values: which headers go to which hop, without sockets.
@Suite("Redirect policy and credentials (rules)")
struct RedirectPolicyTests {
    static let headers: [(name: String, value: String)] = [
        ("Authorization", "Bearer t0ken"), ("proxy-authorization", "Basic cHJveHk="), ("COOKIE", "session=abc"),
        ("X-Api-Key", "k3y"), ("X-Trace", "trace-1"),
    ]

    static func policy(_ url: String = "https://api.example.com/asset", allowsDowngrade: Bool = false) -> RedirectPolicy {
        RedirectPolicy(
            url: URL(string: url)!, headers: headers, sensitiveNames: ["x-api-key"], allowsDowngrade: allowsDowngrade)
    }

    static func names(_ headers: [(name: String, value: String)]) -> [String] { headers.map { $0.name } }

    @Test(arguments: [
        ("https://api.example.com/a", "https://API.Example.COM:443/b", true),
        ("HTTP://example.com/a", "http://example.com:80/b?q", true),
        ("https://example.com/a", "http://example.com/a", false),
        ("https://example.com/a", "https://example.com:8443/a", false),
        ("https://example.com/a", "https://cdn.example.com/a", false),
        ("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a", false),
        ("http://127.0.0.1:8080/a", "http://localhost:8080/a", false),
    ])
    func originIsSchemeHostAndEffectivePort(first: String, second: String, same: Bool) {
        let a = RedirectPolicy.Origin(URL(string: first)!)
        let b = RedirectPolicy.Origin(URL(string: second)!)
        #expect(a != nil && b != nil)
        #expect((a == b) == same)
    }

    @Test(arguments: [
        // next hop, credentials sent
        ("https://api.example.com/other/path?x=1", true),
        ("https://api.example.com:443/", true),
        ("https://objects.example.net/signed?X-Amz-Signature=abc", false),
        ("https://api.example.com:8443/asset", false),
        ("https://example.com/asset", false),
    ])
    func credentialsGoOnlyToTheirOrigin(next: String, sendsCredentials: Bool) throws {
        // Given a request to api.example.com with credentials and a plain header
        let policy = Self.policy()
        // When it is redirected
        let sent = try policy.follow(from: URL(string: "https://api.example.com/asset")!, to: URL(string: next)!)
        // Then the plain header always goes, the credentials only to the origin
        let expected =
            sendsCredentials
            ? ["X-Trace", "Authorization", "proxy-authorization", "COOKIE", "X-Api-Key"] : ["X-Trace"]
        #expect(Self.names(sent) == expected)
    }

    @Test func credentialsComeBackWhenARedirectReturnsToTheOrigin() throws {
        let policy = Self.policy()
        let origin = URL(string: "https://api.example.com/asset")!
        let elsewhere = URL(string: "https://mirror.example.org/asset")!
        #expect(Self.names(try policy.follow(from: origin, to: elsewhere)) == ["X-Trace"])
        let back = try policy.follow(from: elsewhere, to: URL(string: "https://api.example.com/final")!)
        #expect(back.contains { $0.name == "Authorization" && $0.value == "Bearer t0ken" })
    }

    @Test(arguments: [
        ("https://api.example.com/a", "http://api.example.com/a", false, true),
        ("https://api.example.com/a", "http://other.example.com/a", false, true),
        ("HTTPS://api.example.com/a", "HTTP://api.example.com/a", false, true),
        ("https://api.example.com/a", "http://api.example.com/a", true, false),
        ("http://api.example.com/a", "https://api.example.com/a", false, false),
        ("http://api.example.com/a", "http://other.example.com/a", false, false),
    ])
    func httpsToHttpIsRefusedUnlessAllowed(from: String, to: String, allowed: Bool, refused: Bool) {
        let policy = Self.policy(from, allowsDowngrade: allowed)
        do {
            let sent = try policy.follow(from: URL(string: from)!, to: URL(string: to)!)
            #expect(!refused)
            // Even when allowed, credentials do not go to the http origin.
            if RedirectPolicy.Origin(URL(string: to)!) != RedirectPolicy.Origin(URL(string: from)!) {
                #expect(Self.names(sent) == ["X-Trace"])
            }
        } catch {
            #expect(refused)
            #expect(error.code == .insecureRedirect)
            #expect(error.message.contains("--allow-insecure-redirects"))
            #expect(!error.message.contains("t0ken"))
        }
    }

    @Test func onlyNamedHeadersAreSecret() {
        let policy = RedirectPolicy(
            url: URL(string: "https://a.example/")!, headers: Self.headers, allowsDowngrade: false)
        // Without X-Api-Key marked sensitive, it follows redirects like any header.
        #expect(Self.names(policy.headers(for: URL(string: "https://b.example/")!)) == ["X-Api-Key", "X-Trace"])
    }

    // MARK: - User info

    @Test func userInfoBecomesBasicAuthAndLeavesTheURLAndID() throws {
        let request = DownloadRequest(
            url: URL(string: "https://alice:p%40ss%3Aword@files.example.com:8443/a.iso")!,
            destination: .directory(URL(fileURLWithPath: "/tmp")))
        #expect(request.url.absoluteString == "https://files.example.com:8443/a.iso")
        #expect(request.id.rawValue == "https://files.example.com:8443/a.iso")
        let authorization = try #require(request.headers.first { $0.name == "Authorization" }?.value)
        #expect(authorization == "Basic " + Data("alice:p@ss:word".utf8).base64EncodedString())
        // Bound to that origin.
        let policy = RedirectPolicy(request: request, allowsDowngrade: false)
        #expect(policy.headers(for: URL(string: "https://files.example.com:8443/b")!).count == 1)
        #expect(policy.headers(for: URL(string: "https://files.example.com/b")!).isEmpty)
    }

    @Test func anIDSpelledAsTheURLWithItsPasswordLosesIt() {
        let text = "http://bob:hunter2@example.com/f"
        let request = DownloadRequest(
            url: URL(string: text)!, destination: .directory(URL(fileURLWithPath: "/tmp")), id: DownloadID(text))
        #expect(request.id.rawValue == "http://example.com/f")
        let chosen = DownloadRequest(
            url: URL(string: text)!, destination: .directory(URL(fileURLWithPath: "/tmp")), id: "mine")
        #expect(chosen.id == "mine")
    }

    @Test func anExplicitAuthorizationWinsOverUserInfo() {
        var request = DownloadRequest(
            url: URL(string: "https://example.com/f")!, destination: .directory(URL(fileURLWithPath: "/tmp")),
            headers: [("authorization", "Bearer given")])
        request.url = URL(string: "https://u:p@example.com/g")!
        #expect(request.url.absoluteString == "https://example.com/g")
        #expect(request.headers.map(\.value) == ["Bearer given"])
    }

    // MARK: - The journal's view

    static func record(for request: DownloadRequest) throws -> JobRecord {
        let paths = try PartialPaths(destination: request.destination, url: request.url, checkedDirectories: [])
        return try #require(JobRecord(request: request, paths: paths))
    }

    static func request(storing: Bool = false) -> DownloadRequest {
        var request = DownloadRequest(
            url: URL(string: "https://u:pw-secret@example.com/f")!,
            destination: .directory(FileManager.default.temporaryDirectory),
            headers: [("Cookie", "c=cookie-secret"), ("X-Api-Key", "key-secret"), ("Accept", "*/*")])
        request.sensitiveHeaderNames = ["X-Api-Key"]
        request.storesCredentials = storing
        return request
    }

    @Test func aRecordWithholdsCredentialsAndTheVaultGivesThemBack() throws {
        let request = Self.request()
        var record = try Self.record(for: request)
        var vault = CredentialVault()
        vault.deposit(request, into: &record)
        let stored = [record.url, record.id, record.headers ?? "", record.credentials ?? ""].joined(separator: " ")
        for secret in ["pw-secret", "cookie-secret", "key-secret", "dTpwdy1zZWNyZXQ="] {
            #expect(!stored.contains(secret))
        }
        #expect(record.credentials?.hasPrefix("Cookie, X-Api-Key, Authorization; key=") == true)

        var rebuilt = try record.request()
        #expect(rebuilt.headers.map { $0.name } == ["Accept"])
        #expect(rebuilt.sensitiveHeaderNames == ["X-Api-Key"])
        try vault.restore(&rebuilt, from: record)
        #expect(rebuilt.headers.map { $0.name } == ["Accept", "Cookie", "X-Api-Key", "Authorization"])

        // Another process's vault has no such entry.
        var elsewhere = try record.request()
        #expect(throws: DownloadError.self) { try CredentialVault().restore(&elsewhere, from: record) }
        do {
            try CredentialVault().restore(&elsewhere, from: record)
        } catch {
            #expect(error.code == .credentialsRequired)
            #expect(error.message.contains("Cookie, X-Api-Key, Authorization"))
            #expect(error.message.contains("--store-credentials"))
        }
    }

    @Test func identicalCredentialsShareOneReference() throws {
        var vault = CredentialVault()
        var first = try Self.record(for: Self.request())
        var second = try Self.record(for: Self.request())
        vault.deposit(Self.request(), into: &first)
        vault.deposit(Self.request(), into: &second)
        #expect(first.credentials == second.credentials)
        var other = Self.request()
        other.headers[0].value = "c=different"
        var third = try Self.record(for: other)
        vault.deposit(other, into: &third)
        #expect(third.credentials != first.credentials)
    }

    @Test func storingCredentialsIsAnOptIn() throws {
        let request = Self.request(storing: true)
        var record = try Self.record(for: request)
        let before = record
        var vault = CredentialVault()
        vault.deposit(request, into: &record)
        #expect(record == before)
        #expect(record.headers?.contains("cookie-secret") == true)
        #expect(record.credentials == "Cookie, X-Api-Key, Authorization; stored")
        var rebuilt = try record.request()
        try CredentialVault().restore(&rebuilt, from: record)
        #expect(rebuilt.headers.count == 4)
        #expect(rebuilt.storesCredentials)
        #expect(rebuilt.isCredential("x-api-key"))
    }

    @Test(arguments: ["Authorization; withheld", "Cookie, X-A; key=00ff", "Authorization; stored"])
    func referencesRoundTrip(text: String) throws {
        let reference = try #require(CredentialReference(text: text))
        #expect(reference.text == text)
    }
}
