import AsyncHTTPClient
import Foundation
import Testing

@testable import Haul

@Suite("Resume rules")
struct ResumePlanTests {
    private func headers(_ pairs: [String: String]) -> (String) -> String? {
        { name in pairs.first { $0.key.lowercased() == name.lowercased() }?.value }
    }

    @Test func freshPartialAsksForEverything() {
        let plan = ResumePlan(existingBytes: 0, stored: nil, allowsBlindResume: true)
        #expect(plan == .fresh)
        #expect(plan.requestHeaders.isEmpty)
    }

    @Test func strongETagIsUsedForIfRange() {
        let stored = PartialMetadata(url: "u", validator: Validator(etag: "\"abc\"", lastModified: "date"), totalBytes: 10)
        let plan = ResumePlan(existingBytes: 4, stored: stored, allowsBlindResume: false)
        #expect(plan.offset == 4)
        #expect(plan.requestHeaders.map(\.0) == ["Range", "If-Range"])
        #expect(plan.requestHeaders.map(\.1) == ["bytes=4-", "\"abc\""])
    }

    @Test func weakETagFallsBackToLastModified() {
        #expect(Validator(etag: "W/\"abc\"", lastModified: "Tue, 01 Jan 2030 00:00:00 GMT")
            == .lastModified("Tue, 01 Jan 2030 00:00:00 GMT"))
        #expect(Validator(etag: "W/\"abc\"", lastModified: nil) == nil)
    }

    @Test func noValidatorRestartsUnlessBlindResumeIsAllowed() {
        let stored = PartialMetadata(url: "u", validator: nil, totalBytes: 10)
        #expect(ResumePlan(existingBytes: 4, stored: stored, allowsBlindResume: false) == .fresh)
        let blind = ResumePlan(existingBytes: 4, stored: stored, allowsBlindResume: true)
        #expect(blind.offset == 4)
        #expect(blind.requestHeaders.map(\.0) == ["Range"])
    }

    @Test func matching206IsWrittenAtTheOffset() {
        let plan = ResumePlan(offset: 100, validator: .etag("\"e\""), knownTotal: 1000)
        let action = plan.evaluate(status: 206, header: headers(["Content-Range": "bytes 100-999/1000", "ETag": "\"e\""]))
        #expect(action == .write(offset: 100, truncate: false, total: 1000))
    }

    @Test func misplaced206RestartsFromZero() {
        let plan = ResumePlan(offset: 100, validator: .etag("\"e\""), knownTotal: 1000)
        guard case .restart = plan.evaluate(status: 206, header: headers(["Content-Range": "bytes 0-999/1000"])) else {
            Issue.record("expected restart")
            return
        }
        guard case .restart = plan.evaluate(status: 206, header: headers([:])) else {
            Issue.record("a 206 without Content-Range must restart")
            return
        }
        guard case .restart = plan.evaluate(
            status: 206, header: headers(["Content-Range": "bytes 100-999/1000", "ETag": "\"other\""]))
        else {
            Issue.record("a changed ETag must restart")
            return
        }
    }

    @Test func fullResponseStartsAgainFromZero() {
        let plan = ResumePlan(offset: 100, validator: .etag("\"e\""), knownTotal: 1000)
        #expect(plan.evaluate(status: 200, header: headers(["Content-Length": "1200"]))
            == .write(offset: 0, truncate: true, total: 1200))
    }

    @Test func unsatisfiableRangeOnCompletePartialIsDone() {
        let plan = ResumePlan(offset: 1000, validator: .etag("\"e\""), knownTotal: 1000)
        #expect(plan.evaluate(status: 416, header: headers(["Content-Range": "bytes */1000"])) == .complete(total: 1000))
        guard case .restart = plan.evaluate(status: 416, header: headers(["Content-Range": "bytes */2000"])) else {
            Issue.record("416 on an incomplete partial must restart")
            return
        }
        // The partial was started as a 1,500-byte file: a 416 saying the content is 1,000
        // bytes describes different content, even though the partial holds 1,000.
        let grown = ResumePlan(offset: 1000, validator: .etag("\"e\""), knownTotal: 1500)
        guard case .restart = grown.evaluate(status: 416, header: headers(["Content-Range": "bytes */1000"])) else {
            Issue.record("416 with a total other than the partial's must restart")
            return
        }
    }

    @Test func errorsAndRedirects() {
        let plan = ResumePlan.fresh
        #expect(plan.evaluate(status: 302, header: headers(["Location": "/x"])) == .redirect(location: "/x"))
        #expect(plan.evaluate(status: 503, header: headers(["Retry-After": "3"])) == .fail(status: 503, retryAfter: "3"))
        #expect(plan.evaluate(status: 404, header: headers([:])) == .fail(status: 404, retryAfter: nil))
    }

    @Test(arguments: [
        ("bytes 0-9/10", ContentRange(range: 0...9, total: 10)),
        ("bytes 5-9/*", ContentRange(range: 5...9, total: nil)),
        ("bytes */10", ContentRange(range: nil, total: 10)),
        (" Bytes  0-9/10 ", ContentRange(range: 0...9, total: 10)),
        ("BYTES 9223372036854775806-9223372036854775806/9223372036854775807",
         ContentRange(range: 9_223_372_036_854_775_806...9_223_372_036_854_775_806, total: .max)),
    ])
    func parsesContentRange(text: String, expected: ContentRange) {
        #expect(ContentRange(text) == expected)
    }

    @Test(arguments: [
        "bytes 9-5/10", "bytes 0-10/10", "items 0-1/2", "bytes */*", "bytes x-y/10", "bytes0-1/2", "bytes 0-1/2x",
        "bytes -1-2/3", "bytes 0-99999999999999999999/10", "", "bytes 0-/10",
    ])
    func rejectsBadContentRange(text: String) {
        #expect(ContentRange(text) == nil)
    }
}

@Suite("Retry policy")
struct RetryPolicyTests {
    @Test func backoffGrowsAndIsCapped() {
        let policy = RetryPolicy(maxRetries: 10, baseDelay: .seconds(1), maxDelay: .seconds(8))
        for retry in 1...10 {
            let delay = policy.delay(beforeRetry: retry, retryAfter: nil)
            let ceiling = min(Duration.seconds(1) * (1 << (retry - 1)), .seconds(8))
            #expect(delay >= ceiling / 2 && delay <= ceiling)
        }
    }

    @Test func retryAfterWinsButIsCapped() {
        let policy = RetryPolicy(maxRetries: 3, baseDelay: .seconds(1), maxDelay: .seconds(8))
        #expect(policy.delay(beforeRetry: 1, retryAfter: .seconds(3)) == .seconds(3))
        #expect(policy.delay(beforeRetry: 1, retryAfter: .seconds(30)) == .seconds(8))
        #expect(TransportErrors.parseRetryAfter("7") == .seconds(7))
        #expect(TransportErrors.parseRetryAfter("soon") == nil)
    }

    @Test func onlyTransientFailuresAreRetried() {
        #expect(DownloadError(.httpStatus, "", statusCode: 503).isRetryable)
        #expect(DownloadError(.httpStatus, "", statusCode: 429).isRetryable)
        #expect(DownloadError(.httpStatus, "", statusCode: 408).isRetryable)
        #expect(!DownloadError(.httpStatus, "", statusCode: 404).isRetryable)
        #expect(!DownloadError(.httpStatus, "", statusCode: 403).isRetryable)
        #expect(DownloadError(.network, "").isRetryable)
        #expect(!DownloadError(.checksumMismatch, "").isRetryable)
    }
}

@Suite("File names")
struct FileNamingTests {
    @Test(arguments: [
        ("attachment; filename=\"report.pdf\"", "report.pdf"),
        ("attachment; filename=plain.txt", "plain.txt"),
        ("attachment; filename=\"a;b.txt\"", "a;b.txt"),
        ("attachment; filename=\"x.txt\"; filename*=UTF-8''%E2%82%AC%20rates.txt", "€ rates.txt"),
    ])
    func readsContentDisposition(header: String, expected: String) {
        #expect(FileNaming.dispositionName(header) == expected)
    }

    @Test(arguments: [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\evil.exe", "evil.exe"),
        ("/absolute/path.txt", "path.txt"),
        (".hidden", "hidden"),
        ("name\u{0}with\u{7}controls", "namewithcontrols"),
    ])
    func sanitizesToOneComponent(name: String, expected: String) {
        #expect(FileNaming.sanitize(name) == expected)
    }

    @Test(arguments: ["..", ".", "", "/", "../", "   "])
    func rejectsNamesWithNothingLeft(name: String) {
        #expect(FileNaming.sanitize(name) == nil)
    }

    @Test func checksumsAreValidated() throws {
        #expect(throws: DownloadError.self) { try Checksum(parsing: "sha-256=abc") }
        #expect(throws: DownloadError.self) { try Checksum(parsing: "crc32=00000000") }
        #expect(throws: DownloadError.self) { try Checksum(parsing: "nohex") }
        let checksum = try Checksum(parsing: "SHA1=" + String(repeating: "A", count: 40))
        #expect(checksum.algorithm == .sha1)
        #expect(checksum.hex == String(repeating: "a", count: 40))
    }
}

/// A failure's message names the URL it is about only when that is not the download's own.
@Suite("Failure messages")
struct FailureMessageTests {
    static let download = URL(string: "https://example.com/a.iso")!

    /// (the URL the failure is about, the message as the download reports it)
    static let rows: [(String?, String)] = [
        (nil, "HTTP 404 Not Found: the server has no file at this URL"),
        ("https://example.com/a.iso", "HTTP 404 Not Found: the server has no file at this URL"),
        (
            "https://mirror.example.net/a.iso",
            "HTTP 404 Not Found: the server has no file at this URL (from https://mirror.example.net/a.iso)"
        ),
    ]

    @Test(arguments: rows)
    func aFailureNamesAnotherURLOnly(row: (String?, String)) {
        let base = TransportErrors.httpError(status: 404, url: Self.download, retryAfter: nil)
        let error = DownloadError(.httpStatus, base.message, statusCode: 404, url: row.0.flatMap(URL.init(string:)))
        let named = error.naming(download: Self.download)
        #expect(named.message == row.1)
        // Named twice (an event, then the journal's record) it still says it once.
        #expect(named.naming(download: Self.download).message == row.1)
    }

    @Test func aTransportErrorIsAboutItsRequestsURL() {
        let mirror = URL(string: "https://mirror.example.net/a.iso")!
        let error = TransportErrors.translate(HTTPClientError.remoteConnectionClosed, url: mirror)
        #expect(error.message == "the server closed the connection early")
        #expect(error.naming(download: Self.download).message.hasSuffix("(from https://mirror.example.net/a.iso)"))
    }
}
