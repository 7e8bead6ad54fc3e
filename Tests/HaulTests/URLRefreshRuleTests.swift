import Foundation
import Testing

@testable import Haul

/// The rules for URLs that stop serving their content (signed URLs that expire), as values:
/// no sockets.
@Suite("Expired URLs: the rules")
struct URLRefreshRuleTests {
    static let now = Date(timeIntervalSince1970: 1_795_734_000)  // 2026-11-26T23:00:00Z

    @Test(
        "A signed URL's query gives its expiry",
        arguments: [
            // AWS Signature V4: signed at X-Amz-Date, valid X-Amz-Expires seconds.
            ("https://b.s3.amazonaws.com/k?X-Amz-Date=20261126T225500Z&X-Amz-Expires=300&X-Amz-Signature=ab", 1_795_734_000.0),
            ("https://b/k?x-amz-date=20261126T225500Z&x-amz-expires=600", 1_795_734_300),
            // Google Cloud Storage V4.
            ("https://storage.googleapis.com/b/k?X-Goog-Date=20261126T230000Z&X-Goog-Expires=60", 1_795_734_060),
            // CloudFront, AWS V2, GCS V2: seconds since 1970.
            ("https://d.cloudfront.net/k?Expires=1795734000&Signature=x&Key-Pair-Id=y", 1_795_734_000),
            // Azure SAS.
            ("https://a.blob.core.windows.net/c/k?sv=2022-11-02&se=2026-11-26T23:00:00Z&sig=abc", 1_795_734_000),
        ])
    func expiryFromTheQuery(url: String, expected: Double) throws {
        #expect(SignedURLExpiry.expiry(of: try #require(URL(string: url))) == Date(timeIntervalSince1970: expected))
    }

    @Test(
        "A URL whose query gives no usable expiry has none",
        arguments: [
            "https://example.com/file.iso",
            "https://example.com/file.iso?Expires=soon",
            "https://b/k?X-Amz-Date=yesterday&X-Amz-Expires=300",
            "https://b/k?X-Amz-Expires=300",
            "https://b/k?se=not-a-date",
        ])
    func noExpiry(url: String) throws {
        #expect(SignedURLExpiry.expiry(of: try #require(URL(string: url))) == nil)
    }

    static let original = URL(string: "https://releases.example/app.zip")!
    static let signed = URL(string: "https://bucket.example/app.zip?X-Amz-Date=20261126T220000Z&X-Amz-Expires=300&X-Amz-Signature=ab")!
    static let fresh = URL(string: "https://bucket.example/app.zip?X-Amz-Date=20261126T230000Z&X-Amz-Expires=300&X-Amz-Signature=cd")!

    static func status(_ code: Int, from url: URL) -> DownloadError {
        TransportErrors.httpError(status: code, url: url, retryAfter: nil)
    }

    @Test("Other failures are left as they are")
    func otherFailures() {
        var rule = URLRefreshRule(url: Self.signed, canRefresh: true)
        for error in [Self.status(404, from: Self.signed), DownloadError(.network, "reset"), Self.status(500, from: Self.signed)] {
            #expect(rule.failed(error, progressed: false, now: Self.now) == .fail(error))
        }
    }

    @Test("401, 403 and 410 from the URL itself ask for a fresh one, twice in a row at most without progress")
    func refreshesWithoutProgressAreBounded() {
        for code in [401, 403, 410] {
            var rule = URLRefreshRule(url: Self.signed, canRefresh: true)
            let error = Self.status(code, from: Self.signed)
            #expect(rule.failed(error, progressed: true, now: Self.now) == .refresh(expired: Self.signed))
            rule.refreshed(to: Self.fresh)
            #expect(rule.current == Self.fresh)
            #expect(!rule.usesStoredLocation)
            let again = Self.status(code, from: Self.fresh)
            #expect(rule.failed(again, progressed: false, now: Self.now) == .refresh(expired: Self.fresh))
            rule.refreshed(to: Self.fresh)
            guard case .fail(let final) = rule.failed(again, progressed: false, now: Self.now) else {
                Issue.record("a third refresh without progress was asked for")
                continue
            }
            #expect(final.code == .urlExpired)
            #expect(final.message.contains("the fresh URLs asked for were refused too"))
        }
    }

    @Test("Bytes gained between refreshes let a long download refresh again")
    func progressResetsTheBound() {
        var rule = URLRefreshRule(url: Self.signed, canRefresh: true)
        for _ in 0..<5 {
            #expect(rule.failed(Self.status(403, from: rule.current), progressed: true, now: Self.now) == .refresh(expired: rule.current))
            rule.refreshed(to: Self.fresh)
        }
    }

    @Test("A redirect's target that expired is followed again from the start once, without asking")
    func redirectTargetsAreFollowedAgain() {
        var rule = URLRefreshRule(url: Self.original, canRefresh: false)
        #expect(rule.usesStoredLocation)
        let expired = Self.status(403, from: Self.signed)
        #expect(rule.failed(expired, progressed: false, now: Self.now) == .refollow)
        #expect(!rule.usesStoredLocation)
        #expect(rule.current == Self.original)
        // The same target again: the signing endpoint gave nothing fresh.
        guard case .fail(let final) = rule.failed(expired, progressed: false, now: Self.now) else {
            Issue.record("refollowed twice")
            return
        }
        #expect(final.code == .urlExpired)
        #expect(final.message.contains("--refresh-command"))
        // A segmented partial's segments meet the redirect itself: the expiry stands.
        var segmented = URLRefreshRule(url: Self.original, canRefresh: true)
        #expect(segmented.failed(expired, progressed: false, now: Self.now) == .refollow)
        #expect(
            segmented.failed(Self.status(302, from: Self.original), progressed: false, now: Self.now)
                == .refresh(expired: Self.original))
    }

    @Test("Without a way to refresh, a signed URL fails as expired, saying how to give a fresh one; another URL's 403 stays a 403")
    func withoutARefresher() {
        var rule = URLRefreshRule(url: Self.signed, canRefresh: false)
        guard case .fail(let error) = rule.failed(Self.status(403, from: Self.signed), progressed: false, now: Self.now) else {
            Issue.record("no failure")
            return
        }
        #expect(error.code == .urlExpired)
        #expect(error.statusCode == 403)
        #expect(error.message.contains("its signature expired at 2026-11-26T22:05:00Z"))
        #expect(error.message.contains("--refresh-command"))
        #expect(!error.isRetryable)

        var plain = URLRefreshRule(url: Self.original, canRefresh: false)
        let forbidden = Self.status(403, from: Self.original)
        #expect(plain.failed(forbidden, progressed: false, now: Self.now) == .fail(forbidden))
    }

    @Test("A URL already past its expiry is refreshed before it is sent, once")
    func refreshBeforeSending() {
        var rule = URLRefreshRule(url: Self.signed, canRefresh: true)
        #expect(rule.beforeAttempt(now: Self.now) == .refresh(expired: Self.signed))
        #expect(rule.beforeAttempt(now: Self.now) == .proceed)
        rule.refreshed(to: Self.fresh)
        #expect(rule.beforeAttempt(now: Self.now) == .proceed)  // valid until 23:05
        var unsigned = URLRefreshRule(url: Self.original, canRefresh: true)
        #expect(unsigned.beforeAttempt(now: Self.now) == .proceed)
        var noRefresher = URLRefreshRule(url: Self.signed, canRefresh: false)
        #expect(noRefresher.beforeAttempt(now: Self.now) == .proceed)
    }

    @Test("A partial recorded under one signature resumes under another of the same object, not of another path")
    func partialsFollowTheObjectAcrossSignatures() {
        let recorded = PartialMetadata(url: Self.signed.absoluteString, validator: nil, totalBytes: 10)
        #expect(recorded.isFrom(Self.signed))
        #expect(recorded.isFrom(Self.fresh))
        #expect(!recorded.isFrom(URL(string: "https://bucket.example/other.zip?X-Amz-Signature=cd")!))
        #expect(!recorded.isFrom(URL(string: "https://bucket.example/app.zip")!))
        let plain = PartialMetadata(url: "https://example.com/get?id=1", validator: nil, totalBytes: 10)
        #expect(!plain.isFrom(URL(string: "https://example.com/get?id=2")!))
    }
}
