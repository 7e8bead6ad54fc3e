import Foundation
import Testing

@testable import Haul

/// The redirect rules shared by downloads and manifest fetches, as a pure value: no sockets.
@Suite("Redirect follower (rules)")
struct RedirectFollowerTests {
    static let start = URL(string: "https://api.example.com/dir/file?x=1")!

    static func follower(
        from url: URL = start, maxRedirects: Int = 10, subject: RedirectFollower.Subject = .download,
        allowsDowngrade: Bool = false
    ) -> RedirectFollower {
        let policy = RedirectPolicy(
            url: url, headers: [("Authorization", "Bearer t0ken"), ("X-Trace", "trace-1")],
            allowsDowngrade: allowsDowngrade)
        return RedirectFollower(url: url, policy: policy, maxRedirects: maxRedirects, subject: subject)
    }

    /// The error `body` throws, if any.
    static func error(_ body: () throws(DownloadError) -> Void) -> DownloadError? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Where the next hop goes

    @Test(arguments: [
        // Location, next URL
        ("https://cdn.example.net/a.iso", "https://cdn.example.net/a.iso"),
        ("/other/path", "https://api.example.com/other/path"),
        ("sibling", "https://api.example.com/dir/sibling"),
        ("../up?q=2", "https://api.example.com/up?q=2"),
        ("//mirror.example.org/f", "https://mirror.example.org/f"),
        ("http://api.example.com:8080/f", "http://api.example.com:8080/f"),
        ("HTTPS://api.example.com/case", "HTTPS://api.example.com/case"),
        ("https://alice:secret@cdn.example.net/f", "https://cdn.example.net/f"),
    ])
    func resolvesTheLocationAgainstTheCurrentURL(location: String, next: String) throws {
        // Given a follower for an https URL that allows downgrades (to test resolution alone)
        var follower = Self.follower(allowsDowngrade: true)
        // When a 302 sends it to `location`
        let hop = try follower.follow(status: 302, location: location)
        // Then the next hop is the resolved absolute URL, without user info
        #expect(hop.url.absoluteString == next)
        #expect(follower.url == hop.url)
        #expect(follower.redirects == 1)
    }

    @Test func aRelativeLocationResolvesAgainstTheLatestHop() throws {
        var follower = Self.follower()
        try follower.follow(status: 301, location: "https://cdn.example.net/a/b")
        let hop = try follower.follow(status: 307, location: "c")
        #expect(hop.url.absoluteString == "https://cdn.example.net/a/c")
        #expect(follower.original == Self.start)
        #expect(follower.redirects == 2)
    }

    // MARK: - Unusable locations

    @Test(arguments: [
        // subject, Location, message
        (
            RedirectFollower.Subject.download, "ftp://files.example.com/a" as String?,
            "https://api.example.com/dir/file?x=1 redirects to an unusable location 'ftp://files.example.com/a' (ftp: is not a scheme Haul downloads)"
        ),
        (
            .download, "file:///etc/passwd",
            "https://api.example.com/dir/file?x=1 redirects to an unusable location 'file:///etc/passwd' (file: is not a scheme Haul downloads)"
        ),
        (
            .download, "ftp://bob:hunter2@files.example.com/a",
            "https://api.example.com/dir/file?x=1 redirects to an unusable location 'ftp://files.example.com/a' (ftp: is not a scheme Haul downloads)"
        ),
        (
            .download, nil,
            "https://api.example.com/dir/file?x=1 redirects to an unusable location '' (no Location header)"
        ),
        (
            .download, "http://[::1",
            "https://api.example.com/dir/file?x=1 redirects to an unusable location 'http://[::1' (not a URL)"
        ),
        (
            .manifest, "mailto:someone@example.com",
            "https://api.example.com/dir/file?x=1 redirected (302) without a usable Location (mailto: is not a scheme Haul downloads)"
        ),
        (
            .manifest, "",
            "https://api.example.com/dir/file?x=1 redirected (302) without a usable Location (no Location header)"
        ),
        (
            .manifest, nil,
            "https://api.example.com/dir/file?x=1 redirected (302) without a usable Location (no Location header)"
        ),
    ])
    func refusesLocationsThatAreNotHTTP(subject: RedirectFollower.Subject, location: String?, message: String) {
        var follower = Self.follower(subject: subject)
        let error = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: location) }
        #expect(error?.code == .unusableRedirect)
        #expect(error?.isRetryable == false)
        // The message never shows a password from the Location.
        #expect(error?.message == message)
        #expect(follower.url == Self.start)
    }

    // MARK: - Loops and long chains

    @Test(arguments: [
        (
            RedirectFollower.Subject.download,
            "its redirects loop back to https://api.example.com/dir/file?x=1"
        ),
        (.manifest, "the manifest's redirects loop back to https://api.example.com/dir/file?x=1"),
    ])
    func aRedirectBackToTheStartIsALoop(subject: RedirectFollower.Subject, message: String) throws {
        // Given a redirect away
        var follower = Self.follower(subject: subject)
        try follower.follow(status: 302, location: "/elsewhere")
        // When the next one comes back to the first URL
        let error = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: "/dir/file?x=1") }
        // Then it is a loop
        #expect(error?.code == .redirectLoop)
        #expect(error?.message == message)
    }

    @Test func aRedirectBackToAnyEarlierHopIsALoop() throws {
        var follower = Self.follower()
        try follower.follow(status: 302, location: "/a")
        try follower.follow(status: 302, location: "/b")
        let error = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: "/a") }
        #expect(error?.code == .redirectLoop)
        #expect(follower.url.path == "/b")
    }

    @Test(arguments: [
        (
            RedirectFollower.Subject.download, 0,
            "more than 0 redirects"
        ),
        (.download, 3, "more than 3 redirects"),
        (.manifest, 0, "fetching the manifest https://api.example.com/dir/file?x=1 took more than 0 redirects"),
        (.manifest, 3, "fetching the manifest https://api.example.com/dir/file?x=1 took more than 3 redirects"),
    ])
    func followsAtMostMaxRedirects(subject: RedirectFollower.Subject, maxRedirects: Int, message: String) throws {
        // Given a follower allowing `maxRedirects`
        var follower = Self.follower(maxRedirects: maxRedirects, subject: subject)
        // When that many redirects are followed, each to a new URL
        for hop in 0..<maxRedirects { try follower.follow(status: 302, location: "/hop/\(hop)") }
        // Then one more is refused
        let error = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: "/one-more") }
        #expect(error?.code == .tooManyRedirects)
        #expect(error?.message == message)
        #expect(follower.redirects == maxRedirects)
    }

    @Test func aLoopIsReportedAsALoopEvenAtTheLimit() throws {
        var follower = Self.follower(maxRedirects: 1)
        try follower.follow(status: 302, location: "/a")
        let error = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: "/dir/file?x=1") }
        #expect(error?.code == .redirectLoop)
    }

    // MARK: - Headers and origins (the redirect policy, per hop)

    @Test func credentialsGoOnlyToTheirOriginHopByHop() throws {
        var follower = Self.follower()
        #expect(follower.headers.map(\.name) == ["X-Trace", "Authorization"])
        // Away to another origin: only the plain header.
        let away = try follower.follow(status: 302, location: "https://objects.example.net/signed")
        #expect(away.headers.map(\.name) == ["X-Trace"])
        #expect(follower.headers.map(\.name) == ["X-Trace"])
        // Back to the origin: the credentials return.
        let back = try follower.follow(status: 302, location: "https://api.example.com/final")
        #expect(back.headers.map(\.name) == ["X-Trace", "Authorization"])
    }

    @Test(arguments: [
        // allows downgrade, refused
        (false, true),
        (true, false),
    ])
    func httpsToHttpIsRefusedUnlessAllowed(allowsDowngrade: Bool, refused: Bool) {
        var follower = Self.follower(allowsDowngrade: allowsDowngrade)
        let error = Self.error { () throws(DownloadError) in
            try follower.follow(status: 302, location: "http://api.example.com/plain")
        }
        #expect((error?.code == .insecureRedirect) == refused)
        if !refused {
            // Followed, but credentials never go to the http origin.
            #expect(follower.url.absoluteString == "http://api.example.com/plain")
            #expect(follower.headers.map(\.name) == ["X-Trace"])
        } else {
            #expect(follower.url == Self.start)
        }
    }

    @Test func aRefusedRedirectLeavesTheFollowerWhereItWas() throws {
        var follower = Self.follower(maxRedirects: 1)
        try follower.follow(status: 302, location: "/a")
        _ = Self.error { () throws(DownloadError) in try follower.follow(status: 302, location: "/b") }
        #expect(follower.url.path == "/a")
        #expect(follower.redirects == 1)
    }
}
