import Foundation
import NIOHTTP1
import Testing

@testable import Haul

/// The decisions about a download's responses, as a pure value: no sockets, no files.
@Suite("Transfer machine (rules)")
struct TransferMachineTests {
    static let url = URL(string: "https://example.com/files/a.iso")!
    static let etag = "\"v1\""

    static func settings(
        url: URL = url, expectedSize: Int64? = nil, hashes: Bool = false, carried: Int64? = nil,
        threshold: Int64? = nil, maxRedirects: Int = 10, allowsDowngrade: Bool = false
    ) -> TransferMachine.Settings {
        TransferMachine.Settings(
            url: url,
            policy: RedirectPolicy(url: url, headers: [("Authorization", "Bearer t0ken")], allowsDowngrade: allowsDowngrade),
            maxRedirects: maxRedirects, expectedSize: expectedSize, hashes: hashes, carriedDigestBytes: carried,
            segmentationThreshold: threshold)
    }

    /// A machine for a file whose partial holds `length` bytes described by `stored`, started.
    static func file(
        _ settings: TransferMachine.Settings = settings(), length: Int64 = 0, stored: PartialMetadata? = nil,
        revalidating: Validator? = nil
    ) -> (TransferMachine, TransferMachine.EndAction) {
        var machine = TransferMachine(
            settings: settings, destination: .file,
            partial: TransferMachine.Partial(
                length: length, stored: stored, currentBoot: "boot", revalidating: revalidating))
        let action = machine.start()
        return (machine, action)
    }

    /// A machine for a partial of 100 bytes of a 1000-byte content with an ETag, started.
    static func resuming(_ settings: TransferMachine.Settings = settings()) -> TransferMachine {
        file(settings, length: 100, stored: PartialMetadata(url: url.absoluteString, validator: .etag(etag), totalBytes: 1000)).0
    }

    static func headers(_ pairs: [(String, String)]) -> HTTPHeaders { HTTPHeaders(pairs) }

    static func take(_ action: TransferMachine.HeadAction) -> TransferMachine.Take? {
        if case .take(let take) = action { return take }
        return nil
    }

    static func request(_ action: TransferMachine.EndAction) -> TransferMachine.Request? {
        if case .send(let request) = action { return request }
        return nil
    }

    static func error(_ action: TransferMachine.EndAction) -> DownloadError? {
        switch action {
        case .fail(let error), .reject(let error): error
        default: nil
        }
    }

    static func segments(_ action: TransferMachine.EndAction) -> TransferMachine.Segments? {
        if case .segment(let segments) = action { return segments }
        return nil
    }

    static func finish(_ action: TransferMachine.EndAction) -> TransferMachine.Finish? {
        if case .finish(let finish) = action { return finish }
        return nil
    }

    // MARK: - The first request

    @Test func aFreshDownloadAsksForEverything() throws {
        // Given no partial, When the attempt starts
        let (_, action) = Self.file()
        // Then one request for the whole content, carrying the request's credentials
        let request = try #require(Self.request(action))
        #expect(request.reason == .first)
        #expect(request.url == Self.url)
        #expect(request.resumeHeaders.isEmpty)
        #expect(request.headers.map(\.name) == ["Authorization"])
        #expect(request.progress?.completed == 0)
    }

    @Test func aPartialWithAValidatorAsksForTheRest() throws {
        let (_, action) = Self.file(
            length: 100, stored: PartialMetadata(url: Self.url.absoluteString, validator: .etag(Self.etag), totalBytes: 1000))
        let request = try #require(Self.request(action))
        #expect(request.resumeHeaders.map(\.0) == ["Range", "If-Range"])
        #expect(request.resumeHeaders.map(\.1) == ["bytes=100-", Self.etag])
        #expect(request.progress?.completed == 100)
        #expect(request.progress?.total == 1000)
    }

    @Test func aCompletedFileIsRevalidatedAndA304KeepsIt() throws {
        let started = Self.file(revalidating: .etag(Self.etag))
        var machine = started.0
        #expect(try #require(Self.request(started.1)).resumeHeaders.map(\.0) == ["If-None-Match"])
        #expect(machine.receivedHead(status: 304, headers: [:]) == .discard)
        guard case .notModified(let url) = machine.requestEnded(error: nil) else {
            Issue.record("a 304 on revalidation keeps the completed file")
            return
        }
        #expect(url == Self.url)
    }

    // MARK: - 200 vs 206 vs 416 on a partial

    @Test func a206AtTheOffsetIsWrittenAfterThePartial() throws {
        var machine = Self.resuming()
        let take = try #require(
            Self.take(
                machine.receivedHead(
                    status: 206, headers: Self.headers([("Content-Range", "bytes 100-999/1000"), ("ETag", Self.etag)]))))
        #expect(take.offset == 100)
        #expect(take.total == 1000)
        #expect(take.preparation == .reserve(1000))
        #expect(!take.inMemory)
        #expect(machine.receivedBodyPart(500) == .write(at: 100))
        #expect(machine.receivedBodyPart(400) == .write(at: 600))
        let finish = try #require(Self.finish(machine.requestEnded(error: nil)))
        #expect(finish.size == 1000)
        #expect(finish.validator == .etag(Self.etag))
    }

    @Test func a200OnAPartialStartsOverFromZero() throws {
        var machine = Self.resuming()
        let take = try #require(
            Self.take(
                machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "1200"), ("ETag", "\"v2\"")]))))
        #expect(take.offset == 0)
        #expect(
            take.preparation
                == .startOver(
                    PartialMetadata(url: Self.url.absoluteString, validator: .etag("\"v2\""), totalBytes: 1200),
                    reserve: 1200))
        #expect(take.checkpointValidator == .etag("\"v2\""))
        #expect(machine.receivedBodyPart(1200) == .write(at: 0))
        #expect(Self.finish(machine.requestEnded(error: nil))?.size == 1200)
    }

    @Test(arguments: [
        // Content-Range of the 416, whether the partial is complete
        ("bytes */100", true),
        ("bytes */1000", false),
        ("", true),  // no Content-Range: the recorded total counts
    ])
    func a416IsCompleteOnlyWhenThePartialHoldsEverything(contentRange: String, complete: Bool) throws {
        var (machine, _) = Self.file(
            length: 100, stored: PartialMetadata(url: Self.url.absoluteString, validator: .etag(Self.etag), totalBytes: 100))
        let head = machine.receivedHead(
            status: 416, headers: contentRange.isEmpty ? [:] : Self.headers([("Content-Range", contentRange)]))
        let end = machine.requestEnded(error: nil)
        if complete {
            #expect(head == .discard)
            #expect(Self.finish(end)?.size == 100)
        } else {
            // Not the content asked for: stopped, and asked again from zero.
            #expect(head == .stop)
            let request = try #require(Self.request(end))
            #expect(request.resumeHeaders.isEmpty)
            #expect(request.progress?.completed == 0)
        }
    }

    @Test(arguments: [
        // headers of a 206 answering `bytes=100-` with If-Range "v1"
        [("Content-Range", "bytes 0-999/1000")],  // Content-Range at the wrong offset
        [("Content-Range", "bytes 100-999/1000"), ("ETag", "\"v2\"")],  // validator changed
        [("ETag", "\"v1\"")],  // no Content-Range
    ])
    func aMismatched206RestartsOnceThenFails(headers: [(String, String)]) throws {
        var machine = Self.resuming()
        #expect(machine.receivedHead(status: 206, headers: Self.headers(headers)) == .stop)
        #expect(machine.receivedBodyPart(10) == .discard)
        let request = try #require(Self.request(machine.requestEnded(error: Self.cancelled)))
        guard case .restart = request.reason else {
            Issue.record("expected a restart, got \(request.reason)")
            return
        }
        #expect(request.resumeHeaders.isEmpty)
        // From zero, a response that is not the content is the server's fault.
        #expect(machine.receivedHead(status: 416, headers: [:]) == .stop)
        #expect(Self.error(machine.requestEnded(error: Self.cancelled))?.code == .protocolViolation)
    }

    static let cancelled = DownloadError(.network, "cancelled")

    // MARK: - Segments

    @Test(arguments: [
        // Accept-Ranges, Content-Length, ETag, threshold, segmented
        ("bytes", "2000", "\"v1\"", 1000, true),
        ("bytes", "1000", "\"v1\"", 1000, true),
        ("bytes", "999", "\"v1\"", 1000, false),  // below the threshold
        ("none", "2000", "\"v1\"", 1000, false),  // no ranges
        ("bytes", "", "\"v1\"", 1000, false),  // no length
        ("bytes", "2000", "W/\"weak\"", 1000, false),  // no usable validator
    ] as [(String, String, String, Int64, Bool)])
    func aFresh200IsSegmentedWhenItQualifies(
        acceptRanges: String, length: String, etag: String, threshold: Int64, segmented: Bool
    ) throws {
        var (machine, _) = Self.file(Self.settings(threshold: threshold))
        var pairs = [("Accept-Ranges", acceptRanges), ("ETag", etag), ("Content-Disposition", "attachment; filename=b.iso")]
        if !length.isEmpty { pairs.append(("Content-Length", length)) }
        let head = machine.receivedHead(status: 200, headers: Self.headers(pairs))
        guard segmented else {
            #expect(Self.take(head) != nil)
            return
        }
        #expect(head == .split)
        guard case .segment(let segments) = machine.requestEnded(error: Self.cancelled) else {
            Issue.record("expected segments")
            return
        }
        #expect(segments.prepares)
        #expect(segments.total == Int64(length))
        #expect(segments.remaining.map { [$0.0, $0.1] } == [[0, Int64(length)!]])
        #expect(segments.metadata.location == Self.url.absoluteString)
        #expect(segments.headers.map(\.name) == ["Authorization"])
        // The name is kept in the sidecar, for a resumed run to use.
        #expect(segments.contentDisposition == "attachment; filename=b.iso")
        #expect(segments.metadata.contentDisposition == "attachment; filename=b.iso")
        // Complete: committed with the first response's name and validator.
        let finish = try #require(Self.finish(machine.segmentsEnded(.complete)))
        #expect(finish.size == Int64(length))
        #expect(finish.validator == .etag(etag))
        #expect(finish.contentDisposition == "attachment; filename=b.iso")
    }

    /// A response over HTTP/2 is split as one over HTTP/1.1 is, and its segments say it
    /// came over HTTP/2: whether the others join is the split rule's (over HTTP/2, one
    /// stream probes first unless the split was asked for; `SplitRuleTests`).
    @Test(arguments: [false, true])
    func overHTTP2TheSegmentsSaySo(multiplexed: Bool) throws {
        var (machine, _) = Self.file(Self.settings(threshold: 1000))
        let big = Self.headers([("Accept-Ranges", "bytes"), ("Content-Length", "2000"), ("ETag", Self.etag)])
        #expect(machine.receivedHead(status: 200, headers: big, multiplexed: multiplexed) == .split)
        let segments = try #require(Self.segments(machine.requestEnded(error: Self.cancelled)))
        #expect(segments.multiplexed == multiplexed)
    }

    @Test func segmentsThatFindTheContentChangedStartOverOnOneConnection() throws {
        var (machine, _) = Self.file(Self.settings(threshold: 1000))
        let big = Self.headers([("Accept-Ranges", "bytes"), ("Content-Length", "2000"), ("ETag", Self.etag)])
        #expect(machine.receivedHead(status: 200, headers: big) == .split)
        _ = machine.requestEnded(error: Self.cancelled)
        let request = try #require(Self.request(machine.segmentsEnded(.changed("changed"))))
        #expect(request.reason == .segmentsChanged("changed"))
        #expect(request.resumeHeaders.isEmpty)
        // The same big response is now read, not segmented.
        let take = try #require(Self.take(machine.receivedHead(status: 200, headers: big)))
        #expect(take.offset == 0)
    }

    @Test func aResumedSegmentedPartialIsNamedAsTheFreshOneWas() throws {
        let stored = PartialMetadata(
            url: Self.url.absoluteString, validator: .etag(Self.etag), totalBytes: 4000, remaining: [[1000, 2000]],
            location: "https://cdn.example.net/download?id=3", contentDisposition: "attachment; filename=report.pdf")
        var (machine, action) = Self.file(length: 4000, stored: stored)
        guard case .segment(let segments) = action else {
            Issue.record("expected segments")
            return
        }
        #expect(segments.contentDisposition == "attachment; filename=report.pdf")
        let finish = try #require(Self.finish(machine.segmentsEnded(.complete)))
        #expect(finish.contentDisposition == "attachment; filename=report.pdf")
    }

    @Test func aSegmentedPartialResumesItsSegmentsBeforeAnyRequest() throws {
        let stored = PartialMetadata(
            url: Self.url.absoluteString, validator: .etag(Self.etag), totalBytes: 4000, remaining: [[1000, 2000], [3000, 4000]],
            location: "https://cdn.example.net/a.iso")
        let started = Self.file(length: 4000, stored: stored, revalidating: .etag("\"old\""))
        var machine = started.0
        guard case .segment(let segments) = started.1 else {
            Issue.record("expected segments")
            return
        }
        #expect(!segments.prepares)
        #expect(segments.url.absoluteString == "https://cdn.example.net/a.iso")
        #expect(segments.remaining.map { [$0.0, $0.1] } == [[1000, 2000], [3000, 4000]])
        // Credentials stay with their origin.
        #expect(segments.headers.isEmpty)
        // Changed: from zero at the URL first asked for, revalidating the completed file.
        let request = try #require(Self.request(machine.segmentsEnded(.changed("changed"))))
        #expect(request.url == Self.url)
        #expect(request.resumeHeaders.map(\.0) == ["If-None-Match"])
    }

    // MARK: - Small bodies

    @Test(arguments: [
        // partial length, Content-Length, kept in memory
        (0, TransferMachine.smallBody, true),
        (0, TransferMachine.smallBody + 1, false),
        (50, 1000, false),  // a partial without validator: it is emptied first
    ] as [(Int64, Int64, Bool)])
    func aSmallBodyForAnEmptyFileWaitsInMemory(length: Int64, contentLength: Int64, inMemory: Bool) throws {
        var (machine, _) = Self.file(length: length)
        let take = try #require(
            Self.take(machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "\(contentLength)")]))))
        #expect(take.inMemory == inMemory)
        if inMemory {
            #expect(take.preparation == .none)
            #expect(machine.receivedBodyPart(Int(contentLength)) == .keep)
        } else {
            #expect(
                take.preparation
                    == .startOver(PartialMetadata(url: Self.url.absoluteString, totalBytes: contentLength), reserve: contentLength))
            #expect(machine.receivedBodyPart(Int(contentLength)) == .write(at: 0))
        }
        #expect(Self.finish(machine.requestEnded(error: nil))?.size == contentLength)
    }

    // MARK: - Size limits

    @Test func aDeclaredSizeOverTheMemoryLimitStopsAtTheHead() throws {
        var machine = TransferMachine(settings: Self.settings(expectedSize: 5000), destination: .memory(limit: 1000))
        _ = machine.start()
        #expect(machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "5000")])) == .stop)
        #expect(Self.error(machine.requestEnded(error: Self.cancelled))?.code == .tooLarge)
    }

    @Test func aDeclaredSizeOtherThanExpectedStopsAtTheHead() throws {
        var (machine, _) = Self.file(Self.settings(expectedSize: 1000))
        #expect(machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "999")])) == .stop)
        #expect(Self.error(machine.requestEnded(error: Self.cancelled))?.code == .sizeMismatch)
    }

    @Test func aBodyGrowingOverTheMemoryLimitIsDropped() throws {
        var machine = TransferMachine(settings: Self.settings(), destination: .memory(limit: 1000))
        _ = machine.start()
        let take = try #require(Self.take(machine.receivedHead(status: 200, headers: [:])))
        #expect(take.inMemory)
        #expect(machine.receivedBodyPart(600) == .keep)
        #expect(machine.receivedBodyPart(600) == .drop)
        #expect(machine.receivedBodyPart(600) == .discard)
        #expect(Self.error(machine.requestEnded(error: Self.cancelled))?.code == .tooLarge)
    }

    @Test func anActualSizeOtherThanExpectedRejectsTheContent() throws {
        var (machine, _) = Self.file(Self.settings(expectedSize: 1000))
        _ = try #require(Self.take(machine.receivedHead(status: 200, headers: [:])))
        #expect(machine.receivedBodyPart(900) == .write(at: 0))
        guard case .reject(let error) = machine.requestEnded(error: nil) else {
            Issue.record("a wrong size deletes the partial")
            return
        }
        #expect(error.code == .sizeMismatch)
    }

    @Test func aBodyShorterThanDeclaredFailsAsANetworkError() throws {
        var (machine, _) = Self.file()
        _ = machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "1000")]))
        _ = machine.receivedBodyPart(400)
        let error = try #require(Self.error(machine.requestEnded(error: nil)))
        #expect(error.code == .network)
        #expect(error.isRetryable)
        // And a transport error mid-body is the transport's.
        var (broken, _) = Self.file()
        _ = broken.receivedHead(status: 200, headers: Self.headers([("Content-Length", "1000")]))
        #expect(Self.error(broken.requestEnded(error: DownloadError(.timeout, "idle")))?.code == .timeout)
    }

    @Test func aWriteFailureEndsTheAttemptWithTheFirstError() throws {
        var (machine, _) = Self.file()
        _ = machine.receivedHead(status: 200, headers: Self.headers([("Content-Length", "1000")]))
        machine.failed(DownloadError(.diskFull, "full"))
        machine.failed(DownloadError(.fileSystem, "later"))
        #expect(machine.receivedBodyPart(10) == .discard)
        #expect(Self.error(machine.requestEnded(error: nil))?.code == .diskFull)
    }

    // MARK: - Redirects

    @Test func aRedirectIsFollowedAndItsBodyDiscarded() throws {
        var (machine, _) = Self.file()
        #expect(
            machine.receivedHead(status: 302, headers: Self.headers([("Location", "https://cdn.example.net/a.iso")]))
                == .discard)
        #expect(machine.receivedBodyPart(100) == .discard)
        let request = try #require(Self.request(machine.requestEnded(error: nil)))
        #expect(request.reason == .redirect)
        #expect(request.url.absoluteString == "https://cdn.example.net/a.iso")
        // Another origin: no credentials.
        #expect(request.headers.isEmpty)
        #expect(request.progress == nil)
        // The content then comes from there, and is named after it.
        _ = machine.receivedHead(status: 200, headers: [:])
        #expect(Self.finish(machine.requestEnded(error: nil))?.url.absoluteString == "https://cdn.example.net/a.iso")
    }

    @Test(arguments: [
        // Locations in turn, max redirects, allows downgrade, the error
        (["http://example.com/a.iso"], 10, false, DownloadError.Code.insecureRedirect),
        (["/b", "/files/a.iso"], 10, false, .redirectLoop),
        (["/b", "/c", "/d"], 2, false, .tooManyRedirects),
        (["ftp://example.com/a"], 10, false, .unusableRedirect),
    ] as [([String], Int, Bool, DownloadError.Code)])
    func aRedirectThatCannotBeFollowedFails(
        locations: [String], maxRedirects: Int, allowsDowngrade: Bool, code: DownloadError.Code
    ) throws {
        var (machine, _) = Self.file(Self.settings(maxRedirects: maxRedirects, allowsDowngrade: allowsDowngrade))
        var last: TransferMachine.EndAction?
        for location in locations {
            _ = machine.receivedHead(status: 301, headers: Self.headers([("Location", location)]))
            last = machine.requestEnded(error: nil)
            if Self.request(last!) == nil { break }
        }
        #expect(Self.error(try #require(last))?.code == code)
    }

    @Test func anInsecureRedirectIsFollowedWhenAllowed() throws {
        var (machine, _) = Self.file(Self.settings(allowsDowngrade: true))
        _ = machine.receivedHead(status: 307, headers: Self.headers([("Location", "http://example.com/a.iso")]))
        #expect(Self.request(machine.requestEnded(error: nil))?.url.scheme == "http")
    }

    // MARK: - Error statuses

    @Test(arguments: [
        // status, retryable
        (503, true), (429, true), (408, true), (500, true),
        (404, false), (403, false), (410, false),
    ])
    func anErrorStatusFailsRetryableOrNot(status: Int, retryable: Bool) throws {
        var (machine, _) = Self.file()
        #expect(machine.receivedHead(status: status, headers: Self.headers([("Retry-After", "7")])) == .discard)
        let error = try #require(Self.error(machine.requestEnded(error: nil)))
        #expect(error.code == .httpStatus)
        #expect(error.statusCode == status)
        #expect(error.isRetryable == retryable)
        #expect(error.retryAfter == .seconds(7))
    }

    @Test func aLongErrorBodyDropsTheConnection() throws {
        var (machine, _) = Self.file()
        _ = machine.receivedHead(status: 500, headers: [:])
        #expect(machine.receivedBodyPart(Int(TransferMachine.maxDiscardedBody)) == .discard)
        #expect(machine.receivedBodyPart(1) == .drop)
        // The status is what failed, not the drop.
        #expect(Self.error(machine.requestEnded(error: Self.cancelled))?.statusCode == 500)
    }

    @Test func noResponseFailsWithTheTransportError() throws {
        var (machine, _) = Self.file()
        #expect(Self.error(machine.requestEnded(error: DownloadError(.network, "refused")))?.message == "refused")
        var (silent, _) = Self.file()
        #expect(Self.error(silent.requestEnded(error: nil))?.code == .network)
    }

    // MARK: - Checksums

    @Test(arguments: [
        // carried digest bytes, status, digest
        (nil, 206, TransferMachine.Digest.none),
        (100, 206, .carried),
        (50, 206, .none),
        (50, 200, .fresh),
    ] as [(Int64?, Int, TransferMachine.Digest)])
    func aResumeContinuesTheDigestThatEndsWhereItStarts(carried: Int64?, status: Int, digest: TransferMachine.Digest)
        throws
    {
        var machine = Self.resuming(Self.settings(hashes: true, carried: carried))
        let headers =
            status == 206
            ? Self.headers([("Content-Range", "bytes 100-999/1000"), ("ETag", Self.etag)])
            : Self.headers([("Content-Length", "1000")])
        #expect(try #require(Self.take(machine.receivedHead(status: status, headers: headers))).digest == digest)
    }

    // MARK: - Thresholds

    @Test func theSegmentationThresholdFollowsConnectionsAndPacing() {
        #expect(TransferMachine.segmentationThreshold(connections: 1, configured: 16 << 20, pacedRequestSize: nil) == nil)
        #expect(TransferMachine.segmentationThreshold(connections: 4, configured: 16 << 20, pacedRequestSize: nil) == 16 << 20)
        let paced = RateSchedule.pacedDownloadThreshold(requestSize: 4096)
        #expect(TransferMachine.segmentationThreshold(connections: 1, configured: 16 << 20, pacedRequestSize: 4096) == paced)
    }
}

/// One ranged response of a segmented download.
@Suite("Transfer machine: segment responses (rules)")
struct TransferMachineSegmentTests {
    static let url = URL(string: "https://example.com/a.iso")!

    static func response(requestEnd: Int64 = 2000, sent: Validator? = nil) -> TransferMachine.SegmentResponse {
        TransferMachine.SegmentResponse(url: url, start: 1000, requestEnd: requestEnd, claimEnd: 2000, total: 4000, sent: sent)
    }

    @Test func aSegmentAsksForItsRangeUnderTheValidatorItWasFetchedUnder() {
        let response = Self.response(requestEnd: 1500, sent: .etag("\"v1\""))
        #expect(response.requestHeaders.map { "\($0.0): \($0.1)" } == ["Range: bytes=1000-1499", "If-Range: \"v1\""])
        // A mirror's first request: its size is checked, nothing to validate against yet
        #expect(Self.response(requestEnd: 1500).requestHeaders.map { "\($0.0): \($0.1)" } == ["Range: bytes=1000-1499"])
        // A segment at the content's start is still a range request, never a revalidation.
        let first = TransferMachine.SegmentResponse(url: Self.url, start: 0, requestEnd: 10, claimEnd: 10, total: 4000, sent: nil)
        #expect(first.requestHeaders.map { "\($0.0): \($0.1)" } == ["Range: bytes=0-9"])
        // Several ranges in one request (a delta download's), by the same rule.
        let several = ResumePlan.rangeHeaders([0..<10, 20..<30], validator: .lastModified("Tue, 01 Dec 2026 10:00:00 GMT"))
        #expect(several.map { "\($0.0): \($0.1)" } == [
            "Range: bytes=0-9,20-29", "If-Range: Tue, 01 Dec 2026 10:00:00 GMT",
        ])
    }

    @Test(arguments: [
        // status, Content-Range, accepted
        (206, "bytes 1000-1999/4000", true),
        (206, "bytes 0-999/4000", false),  // not where the segment starts
        (206, "bytes 1000-1999/5000", false),  // another total
        (206, "", false),
        (206, "bytes 1000-1999/*", false),  // no total to check
        (200, "", false),
        (204, "", false),
        (416, "bytes */4000", false),
    ])
    func aSegmentIsWrittenOnlyFromItsOwn206(status: Int, contentRange: String, accepted: Bool) {
        var response = Self.response(sent: .etag("\"v1\""))
        var headers = contentRange.isEmpty ? HTTPHeaders() : HTTPHeaders([("Content-Range", contentRange)])
        headers.add(name: "ETag", value: "\"v1\"")
        let action = response.receivedHead(status: status, headers: headers)
        #expect(action == (accepted ? TransferMachine.SegmentResponse.HeadAction.write : .stop))
        let ending = response.requestEnded(error: nil, finished: accepted, wroteSomething: accepted)
        if accepted {
            #expect(ending == .done)
        } else if case .changed = ending {
        } else {
            Issue.record("expected changed, got \(ending)")
        }
    }

    /// A 206 under another ETag than the one the range was asked under is another
    /// content, though its range is right: the same rule as a resumed download's.
    @Test func aSegmentOfAnotherETagIsAChangedContent() {
        var response = Self.response(sent: .etag("\"v1\""))
        let headers = HTTPHeaders([("Content-Range", "bytes 1000-1999/4000"), ("ETag", "\"v2\"")])
        #expect(response.receivedHead(status: 206, headers: headers) == .stop)
        #expect(response.requestEnded(error: nil, finished: false, wroteSomething: false)
            == .changed("\(Self.url.absoluteString): ETag changed from \"v1\" to \"v2\""))
        // A mirror's first request has no ETag to hold it to: its validator is learned.
        var first = Self.response()
        #expect(first.receivedHead(status: 206, headers: headers) == .write)
        #expect(first.validator == .etag("\"v2\""))
    }

    /// A redirect answering a segment fails it (the download's URL was resolved before it
    /// was split), as any status other than 206, 200 and 416 does.
    @Test(arguments: [302, 404, 503])
    func anotherStatusFailsTheSegment(status: Int) {
        var response = Self.response()
        let headers = HTTPHeaders([("Location", "https://example.com/b.iso")])
        #expect(response.receivedHead(status: status, headers: headers) == .stop)
        guard case .failed(let error) = response.requestEnded(error: nil, finished: false, wroteSomething: false) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.statusCode == status)
    }

    @Test func anErrorStatusFailsTheSegment() {
        var response = Self.response()
        #expect(response.receivedHead(status: 503, headers: [:]) == .stop)
        guard case .failed(let error) = response.requestEnded(error: nil, finished: false, wroteSomething: false) else {
            Issue.record("expected a failure")
            return
        }
        #expect(error.statusCode == 503)
        #expect(error.isRetryable)
    }

    @Test func aSegmentEndsDoneWhenWrittenStoppedOrPaced() {
        var full = Self.response()
        _ = full.receivedHead(status: 206, headers: HTTPHeaders([("Content-Range", "bytes 1000-1999/4000")]))
        #expect(full.requestEnded(error: nil, finished: false, wroteSomething: true) == .failed(
            DownloadError(.network, "a segment ended early", url: Self.url)))
        #expect(full.requestEnded(error: DownloadError(.network, "reset"), finished: false, wroteSomething: true)
            == .failed(DownloadError(.network, "reset")))
        full.stopped()
        #expect(full.requestEnded(error: DownloadError(.network, "cancelled"), finished: false, wroteSomething: true) == .done)
        // A paced request for part of the claim that ended well.
        var paced = Self.response(requestEnd: 1500)
        _ = paced.receivedHead(status: 206, headers: HTTPHeaders([("Content-Range", "bytes 1000-1499/4000")]))
        #expect(paced.requestEnded(error: nil, finished: false, wroteSomething: true) == .done)
        #expect(paced.requestEnded(error: nil, finished: false, wroteSomething: false) != .done)
        // A write failure outranks everything.
        paced.failed(DownloadError(.diskFull, "full"))
        #expect(paced.requestEnded(error: nil, finished: true, wroteSomething: true) == .failed(DownloadError(.diskFull, "full")))
    }

    /// The download's first response, kept as the first segment's: written from its first
    /// byte with no head of its own; cut at the claim's end (the rest of the content is
    /// other connections'), it is done; dropped before, it failed like any segment.
    @Test func anAdoptedFirstResponseWritesAtOnceAndIsDoneWhenCutAtItsEnd() {
        var adopted = TransferMachine.SegmentResponse.adopted(
            url: Self.url, claimEnd: 1000, total: 4000, validator: .etag("\"v\""))
        #expect(adopted.isWriting)
        #expect(adopted.start == 0 && adopted.requestEnd == 4000 && adopted.claimEnd == 1000)
        #expect(adopted.validator == .etag("\"v\""))
        // No second head is taken for it.
        var again = adopted
        #expect(again.receivedHead(status: 206, headers: HTTPHeaders([("Content-Range", "bytes 0-999/4000")])) == .stop)
        #expect(adopted.requestEnded(error: DownloadError(.network, "reset"), finished: false, wroteSomething: true)
            == .failed(DownloadError(.network, "reset")))
        #expect(adopted.requestEnded(error: nil, finished: true, wroteSomething: true) == .done)
        adopted.stopped()
        #expect(adopted.requestEnded(error: DownloadError(.cancelled, "cut"), finished: true, wroteSomething: true) == .done)
    }
}
