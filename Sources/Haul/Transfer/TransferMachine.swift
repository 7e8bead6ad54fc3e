import Foundation
import NIOHTTP1

/// One attempt of a download as a plain value: which request to send, what each response
/// means (resume, segments, small bodies, size limits, redirects, errors), and what the
/// attempt ends with. No I/O: ``TransferOperation`` sends the requests and
/// ``TransferDelegate`` carries out the actions on the event loop and the I/O pool.
///
/// ```
///          start: a segmented partial resumes its segments first
///   idle ──────────────────────────────────────────────────► segmenting ── segments ended:
///     │ start                                                     ▲          complete ──► finished
///     ▼                                                           │          changed ──► send from 0 ─┐
///   awaitingHead ◄─────── send: redirect followed, restart from 0 ─┼──────────────────────────────────┘
///     │ head                                      ▲                │
///     ├── 2xx to keep ──────► receiving ──────────┼── end ──► finished (finish, or fail: short, size)
///     │                         │ failure,        │
///     │                         ▼ memory limit    │
///     ├── 3xx, 4xx, 5xx, ───► discarding ─────────┴── end ──► finished (fail, complete, not modified)
///     │   206 mismatch, 416,    (body counted, dropped past 64 KiB)
///     │   304, size limits
///     └── fresh 200, big enough, Accept-Ranges, validator: split ─► segmenting
/// ```
///
/// Each event returns the one action the caller must carry out:
/// - ``start()`` → ``EndAction``: the first request, or the segments of a segmented partial.
/// - ``receivedHead(status:headers:)`` → ``HeadAction``: take the body (and how), discard
///   it, stop the request, or split the content (the response goes on as the first
///   segment's).
/// - ``receivedBodyPart(_:)`` → ``BodyAction``: write it at an offset, keep it in memory,
///   discard it, or drop the connection. Allocation-free: it runs for every body part.
/// - ``failed(_:)``: the I/O failed (a write, a reservation); the attempt ends with it.
/// - ``requestEnded(error:)`` and ``segmentsEnded(_:)`` → ``EndAction``: the next request,
///   segments, the finished content to verify and commit, or the error.
///
/// The rules themselves live in ``ResumePlan`` (200 vs 206 vs 416, `Content-Range`,
/// validators), ``RedirectFollower`` (loops, limits, insecure redirects), ``ContentRange``
/// and ``Validator``; retrying is ``RetrySchedule``'s business, from the error returned.
struct TransferMachine: Sendable {
    /// Where the body goes.
    enum Destination: Hashable, Sendable {
        /// The partial file.
        case file
        /// Memory, up to `limit` bytes.
        case memory(limit: Int)
    }

    /// What the attempt starts from.
    struct Settings: Sendable {
        /// The URL asked for.
        var url: URL
        /// Which headers each hop carries, and whether `https` → `http` is followed.
        var policy: RedirectPolicy
        var maxRedirects: Int
        /// The size the request said to expect, if any.
        var expectedSize: Int64?
        /// Whether the content is hashed while it arrives (the request has a checksum).
        var hashes: Bool = false
        /// The byte count of the digest carried from the previous attempt, if any.
        var carriedDigestBytes: Int64? = nil
        /// A fresh 200 of at least this many bytes that supports ranges is fetched in
        /// segments; `nil` never segments (see ``segmentationThreshold(connections:configured:pacedRequestSize:)``).
        var segmentationThreshold: Int64? = nil
        /// Whether resuming without a validator is allowed.
        var allowsBlindResume: Bool = false
        /// The URL the partial's sidecar records as its source: the request's own, also
        /// when ``url`` is a fresh one that replaced it (see ``URLRefreshRule``).
        var recordedURL: URL? = nil
        /// Whether a segmented partial resumes from the location its sidecar stored (the
        /// URL after redirects); not once that URL expired.
        var usesStoredLocation = true
        /// Whether the download is a delta download (``DownloadRequest/delta``), whose
        /// seeded partial's sidecar has no validator.
        var isDelta = false
    }

    /// What the partial file held when the attempt began.
    struct Partial: Sendable {
        /// Its length (bytes that can be trusted).
        var length: Int64
        /// Its sidecar, if it describes the same URL.
        var stored: PartialMetadata?
        /// The machine boot now, to trust a segmented sidecar's unsynced progress.
        var currentBoot: String?
        /// A completed file of an earlier run to revalidate, when nothing is resumed.
        var revalidating: Validator?
        /// The conditional header fields that revalidate a cached response, when no
        /// completed file is revalidated.
        var conditions: [HeaderField] = []
    }

    // MARK: - Actions

    /// A request to send.
    struct Request: Sendable {
        /// Why it is sent.
        enum Reason: Hashable, Sendable {
            case first
            case redirect
            /// The partial could not be trusted: from zero, over the same file.
            case restart(String)
            /// A segmented download found the content changed: the partial and its sidecar
            /// are emptied first, then it goes over one connection from zero.
            case segmentsChanged(String)
        }

        var reason: Reason
        var url: URL
        /// The hop's headers, chosen by the redirect policy.
        var headers: [RedirectPolicy.Header]
        /// The resume headers (`Range`, `If-Range`, revalidation), which replace any of the hop's.
        var resumeHeaders: [(String, String)]
        /// The progress meter starts again from here, if set.
        var progress: (completed: Int64, total: Int64?)?
    }

    /// A segmented download to run.
    struct Segments: Sendable {
        var url: URL
        var total: Int64
        /// The content's validator; `nil` for a delta download's seeded partial, whose
        /// sources' validators are learned from their first answers.
        var validator: Validator?
        /// The ranges `[start, end)` still missing.
        var remaining: [(Int64, Int64)]
        /// The sidecar's content.
        var metadata: PartialMetadata
        /// Whether the file must first be emptied, reserved and given `metadata` (a fresh
        /// download), rather than resumed as it is.
        var prepares: Bool
        /// The headers for `url`, chosen by the redirect policy.
        var headers: [RedirectPolicy.Header]
        /// The `Content-Disposition` the finish will name the file by: the first
        /// response's, for a fresh download; the one its sidecar kept, for a resumed one
        /// (which sends no such request).
        var contentDisposition: String? = nil
        /// Whether the first response came over HTTP/2: the other segments would be streams
        /// of its connection (or of its one sibling, ``HTTP2Placement``), which bring more
        /// only from a server that limits each request (see ``SplitRule/probes``).
        var multiplexed = false
    }

    /// The content is all there: verify its checksum and commit it.
    struct Finish: Hashable, Sendable {
        /// Its size (already checked against the expected size).
        var size: Int64
        var validator: Validator?
        /// The `Content-Disposition` of the response, for the file name.
        var contentDisposition: String?
        /// The URL it came from, after redirects.
        var url: URL
    }

    /// What to do at the end of a request, of segments, or at the start.
    enum EndAction: Sendable {
        case send(Request)
        case segment(Segments)
        case finish(Finish)
        /// The completed file being revalidated is current.
        case notModified(url: URL)
        /// The attempt failed; the retry rules decide what follows.
        case fail(DownloadError)
        /// The content is not what was asked for: the partial is deleted, and the attempt fails.
        case reject(DownloadError)
    }

    /// What the file needs before a body is written to it.
    enum Preparation: Hashable, Sendable {
        /// Nothing (memory, or a small body kept in memory until the commit).
        case none
        /// A resume: grow the file for the rest.
        case reserve(Int64)
        /// From zero: empty the file, save `metadata`, record 0 bytes synced, reserve `reserve`.
        case startOver(PartialMetadata, reserve: Int64?)
    }

    /// Which digest hashes the body.
    enum Digest: Hashable, Sendable {
        case none
        /// A new one: the body starts at byte 0.
        case fresh
        /// The one carried from the previous attempt, which covers everything before the body.
        case carried
    }

    /// How to take a body that is kept.
    struct Take: Hashable, Sendable {
        /// Where the body starts in the content, and the content's full size if known.
        var offset: Int64
        var total: Int64?
        var preparation: Preparation
        var digest: Digest
        /// Kept in memory (a memory download, or a small body for an empty file).
        var inMemory: Bool
        /// What the journal records of the content.
        var checkpointValidator: Validator?
    }

    enum HeadAction: Hashable, Sendable {
        case take(Take)
        /// Read the body and drop it (an error's or a redirect's).
        case discard
        /// Stop the request: its body is not wanted (a restart, a failure).
        case stop
        /// The content is fetched in segments: the response goes on as the first segment's
        /// (see ``ResponseHandover``), or is stopped where it cannot be handed over.
        case split
    }

    enum BodyAction: Hashable, Sendable {
        /// Write the part to the file at this offset.
        case write(at: Int64)
        /// Keep the part in memory.
        case keep
        case discard
        /// Stop the request.
        case drop
    }

    // MARK: - State

    /// A body being taken.
    struct Receiving: Hashable, Sendable {
        var offset: Int64
        var received: Int64 = 0
        var total: Int64?
        /// `nil` for a file; the memory limit for a body kept in memory (`Int.max` for a
        /// small body, framed by its `Content-Length`).
        var memoryLimit: Int?
    }

    /// How a response whose body is not kept ends the request.
    enum Verdict: Hashable, Sendable {
        case redirect(status: Int, location: String)
        case restart(String)
        case complete(total: Int64)
        case notModified
        case fail(DownloadError)
    }

    enum State: Sendable {
        case idle
        case awaitingHead
        case receiving(Receiving)
        /// A body being read and thrown away (`discarded` bytes so far) before `then`.
        case discarding(discarded: Int64, then: Verdict)
        case segmenting(Segments)
        case finished
    }

    /// Bodies up to this size for an empty file are kept in memory and written once at the
    /// commit: no sidecar, no reservation.
    static let smallBody: Int64 = 64 << 10
    /// The largest discarded body read before the connection is dropped instead.
    static let maxDiscardedBody: Int64 = 64 << 10

    /// What the attempt starts from. Kept in a box that every copy of the machine shares (it
    /// travels into the delegate and back): one retain per copy, not one per field.
    var settings: Settings { box.settings }
    private let box: SettingsBox

    private final class SettingsBox: Sendable {
        let settings: Settings
        init(_ settings: Settings) { self.settings = settings }
    }
    private(set) var state: State = .idle
    private(set) var plan: ResumePlan
    private var redirects: RedirectFollower
    private let destination: Destination
    /// Whether the partial holds no byte (nothing to empty; a small body may wait in memory).
    private var partialIsEmpty: Bool
    /// Segments are tried for the first response from zero only.
    private var segmentation: Int64?
    /// Whether the response to the request in flight may be split (``HeadAction/split``).
    var maySplit: Bool { segmentation != nil }
    /// Whether the plan was already restarted from zero once.
    private var restarted = false
    /// The segmented partial to resume, consumed by ``start()``.
    private var resumableSegments: Segments?
    /// The total the progress meter first shows.
    private let knownTotal: Int64?
    /// The validator and `Content-Disposition` of the last response.
    private var validator: Validator?
    private var contentDisposition: String?
    /// The headers of the last response that carried the content (a 2xx) or said it had
    /// not changed (a 304): what a cache stores, or merges into what it stored.
    private(set) var contentHead: (status: Int, headers: HTTPHeaders)?

    init(settings: Settings, destination: Destination, partial: Partial? = nil) {
        self.box = SettingsBox(settings)
        self.destination = destination
        self.redirects = RedirectFollower(
            url: settings.url, policy: settings.policy, maxRedirects: settings.maxRedirects, subject: .download)
        var length = partial?.length ?? 0
        var stored = partial?.stored
        // (A delta download's partial, seeded before any request, has no validator yet: its
        // sources show theirs in their first answers, as mirrors do.)
        if length > 0, let metadata = stored, let remaining = metadata.ranges(currentBoot: partial?.currentBoot),
            metadata.validator != nil || settings.isDelta, let total = metadata.totalBytes
        {
            let location = settings.usesStoredLocation ? metadata.location.flatMap(URL.init(string:)) : nil
            let url = location ?? settings.url
            resumableSegments = Segments(
                url: url, total: total, validator: metadata.validator, remaining: remaining, metadata: metadata,
                prepares: false, headers: settings.policy.headers(for: url),
                contentDisposition: metadata.contentDisposition)
            // Should the content have changed, the download starts from zero.
            length = 0
            stored = nil
        }
        plan = ResumePlan(existingBytes: length, stored: stored, allowsBlindResume: settings.allowsBlindResume)
        if plan.offset == 0 {
            plan.revalidating = partial?.revalidating
            if plan.revalidating == nil { plan.conditions = partial?.conditions ?? [] }
        }
        partialIsEmpty = length == 0
        segmentation = plan.offset == 0 ? settings.segmentationThreshold : nil
        if case .memory = destination { segmentation = nil }
        knownTotal = stored?.totalBytes ?? settings.expectedSize
    }

    /// The threshold from which a download is segmented: the configured one when more than
    /// one connection is allowed, and the paced one for a download limited to a low rate
    /// (fetched in paced steps once larger than a read of the socket).
    static func segmentationThreshold(connections: Int, configured: Int64, pacedRequestSize: Int64?) -> Int64? {
        var threshold = connections > 1 ? configured : nil
        if let pacedRequestSize {
            let paced = RateSchedule.pacedDownloadThreshold(requestSize: pacedRequestSize)
            threshold = min(threshold ?? paced, paced)
        }
        return threshold
    }

    // MARK: - Events

    /// The attempt begins: the first request, or the segments of a segmented partial.
    mutating func start() -> EndAction {
        guard case .idle = state else { preconditionFailure("a transfer machine started twice") }
        if let segments = resumableSegments {
            resumableSegments = nil
            state = .segmenting(segments)
            return .segment(segments)
        }
        return send(.first, progress: (plan.offset, knownTotal))
    }

    /// A response's head came, over HTTP/2 when `multiplexed`.
    mutating func receivedHead(status: Int, headers: HTTPHeaders, multiplexed: Bool = false) -> HeadAction {
        guard case .awaitingHead = state else { return .stop }
        let header = { (name: String) in headers.first(name: name) }
        let action = plan.evaluate(status: status, header: header)
        validator = Validator(etag: header("ETag"), lastModified: header("Last-Modified"))
        contentDisposition = header("Content-Disposition")
        switch action {
        case .write, .notModified: contentHead = (status, headers)
        default: break
        }
        switch action {
        case .write(let offset, let truncate, let total):
            if var segments = segments(status: status, action: action, headers: headers) {
                segments.multiplexed = multiplexed
                state = .segmenting(segments)
                return .split
            }
            if case .memory(let limit) = destination, let total, total > Int64(limit) {
                return stop(
                    .tooLarge, "\(settings.url.absoluteString) is \(total) bytes, over the \(limit)-byte memory limit")
            }
            if let expected = settings.expectedSize, let total, total != expected {
                return stop(
                    .sizeMismatch, "\(settings.url.absoluteString) is \(total) bytes but \(expected) were expected")
            }
            var take = Take(
                offset: offset, total: total, preparation: .none, digest: .none, inMemory: false,
                checkpointValidator: validator ?? plan.validator)
            if settings.hashes {
                if truncate || offset == 0 {
                    take.digest = .fresh
                } else if settings.carriedDigestBytes == offset {
                    take.digest = .carried
                }
            }
            var receiving = Receiving(offset: offset, total: total)
            switch destination {
            case .memory(let limit):
                take.inMemory = true
                receiving.memoryLimit = limit
            case .file:
                if !truncate {
                    take.preparation = total.map { .reserve($0) } ?? .none
                } else if partialIsEmpty, offset == 0, let total, total <= Self.smallBody {
                    // Framed by its Content-Length, so at most `smallBody` bytes; an
                    // interrupted small download simply starts again.
                    take.inMemory = true
                    receiving.memoryLimit = .max
                } else {
                    let metadata = PartialMetadata(
                        url: (settings.recordedURL ?? settings.url).absoluteString, validator: validator, totalBytes: total)
                    take.preparation = .startOver(metadata, reserve: total)
                }
            }
            state = .receiving(receiving)
            return .take(take)
        case .restart(let reason):
            // The body is not the content asked for: not read.
            state = .discarding(discarded: 0, then: .restart(reason))
            return .stop
        case .complete(let total):
            state = .discarding(discarded: 0, then: .complete(total: total))
        case .notModified:
            state = .discarding(discarded: 0, then: .notModified)
        case .redirect(let location):
            state = .discarding(discarded: 0, then: .redirect(status: status, location: location))
        case .fail(let status, let retryAfter):
            let error = TransportErrors.httpError(status: status, url: redirects.url, retryAfter: retryAfter)
            state = .discarding(discarded: 0, then: .fail(error))
        }
        return .discard
    }

    /// A part of `count` bytes of the body came.
    mutating func receivedBodyPart(_ count: Int) -> BodyAction {
        switch state {
        case .receiving(var receiving):
            if let limit = receiving.memoryLimit {
                guard receiving.received + Int64(count) <= Int64(limit) else {
                    state = .discarding(
                        discarded: 0,
                        then: .fail(
                            DownloadError(
                                .tooLarge, "\(settings.url.absoluteString) is over the \(limit)-byte memory limit")))
                    return .drop
                }
                receiving.received += Int64(count)
                state = .receiving(receiving)
                return .keep
            }
            let offset = receiving.offset + receiving.received
            receiving.received += Int64(count)
            state = .receiving(receiving)
            return .write(at: offset)
        case .discarding(let discarded, let verdict):
            let total = discarded + Int64(count)
            state = .discarding(discarded: total, then: verdict)
            return total > Self.maxDiscardedBody ? .drop : .discard
        case .segmenting:
            return .discard
        case .idle, .awaitingHead, .finished:
            return .drop
        }
    }

    /// The I/O failed (a write, a reservation): the attempt ends with `error`, the first
    /// one reported.
    mutating func failed(_ error: DownloadError) {
        switch state {
        case .discarding(_, .fail), .finished:
            return
        case .discarding(let discarded, _):
            state = .discarding(discarded: discarded, then: .fail(error))
        case .idle, .awaitingHead, .receiving, .segmenting:
            state = .discarding(discarded: 0, then: .fail(error))
        }
    }

    /// The request ended, with `error` if the transport failed (or the request was stopped).
    mutating func requestEnded(error: DownloadError?) -> EndAction {
        let url = redirects.url
        switch state {
        case .awaitingHead:
            return fail(error ?? DownloadError(.network, "the request ended without a response", url: url))
        case .receiving(let receiving):
            if let error { return fail(error) }
            let size = receiving.offset + receiving.received
            if let total = receiving.total, size != total {
                return fail(
                    DownloadError(.network, "the connection ended after \(size) of \(total) bytes", url: redirects.url))
            }
            return finish(size: size)
        case .discarding(_, let verdict):
            switch verdict {
            case .fail(let failure):
                return fail(failure)
            case .complete(let total):
                return finish(size: total)
            case .notModified:
                state = .finished
                return .notModified(url: url)
            case .redirect(let status, let location):
                do {
                    try redirects.follow(status: status, location: location)
                } catch {
                    return fail(error)
                }
                return send(.redirect, progress: nil)
            case .restart(let reason):
                guard !restarted, plan.offset > 0 else {
                    return fail(DownloadError(.protocolViolation, reason, url: url))
                }
                restarted = true
                plan = .fresh
                return send(.restart(reason), progress: (0, settings.expectedSize))
            }
        case .segmenting(let segments):
            // The request was handed over to the segments, or stopped after its head (its
            // error is that stop).
            return .segment(segments)
        case .idle, .finished:
            preconditionFailure("a request ended that the transfer machine did not send")
        }
    }

    /// The segments ended: complete, or the content changed under them.
    mutating func segmentsEnded(_ outcome: SegmentedTransfer.Outcome) -> EndAction {
        guard case .segmenting(let segments) = state else {
            preconditionFailure("segments ended that the transfer machine did not start")
        }
        switch outcome {
        case .complete:
            validator = segments.validator
            contentDisposition = segments.contentDisposition
            return finish(size: segments.total, url: segments.url)
        case .changed(let reason):
            // Once more from zero, over one connection, from the URL first asked for (the
            // partial is emptied first). A resumed segmented partial sent no request yet:
            // its plan still revalidates a completed file, if there is one.
            segmentation = nil
            partialIsEmpty = true
            if segments.prepares { plan = .fresh }
            redirects = RedirectFollower(
                url: settings.url, policy: settings.policy, maxRedirects: settings.maxRedirects, subject: .download)
            return send(.segmentsChanged(reason), progress: (0, settings.expectedSize))
        }
    }

    // MARK: - Helpers

    private mutating func send(_ reason: Request.Reason, progress: (Int64, Int64?)?) -> EndAction {
        state = .awaitingHead
        return .send(
            Request(
                reason: reason, url: redirects.url, headers: redirects.headers, resumeHeaders: plan.requestHeaders,
                progress: progress))
    }

    private mutating func stop(_ code: DownloadError.Code, _ message: String) -> HeadAction {
        state = .discarding(discarded: 0, then: .fail(DownloadError(code, message)))
        return .stop
    }

    private mutating func fail(_ error: DownloadError) -> EndAction {
        state = .finished
        return .fail(error)
    }

    private mutating func finish(size: Int64, url: URL? = nil) -> EndAction {
        state = .finished
        if let expected = settings.expectedSize, expected != size {
            return .reject(
                DownloadError(
                    .sizeMismatch,
                    "size check failed: the server sent \(size) bytes, not the expected \(expected); nothing was kept"))
        }
        return .finish(
            Finish(size: size, validator: validator, contentDisposition: contentDisposition, url: url ?? redirects.url))
    }

    /// The segments a fresh 200 qualifies for: big enough, `Accept-Ranges: bytes`, and a
    /// validator to keep the segments to one version of the content.
    private func segments(status: Int, action: ResumePlan.Action, headers: HTTPHeaders) -> Segments? {
        guard let threshold = segmentation, status == 200, case .write(0, _, let total?) = action, total >= threshold,
            headers[canonicalForm: "Accept-Ranges"].contains(where: { $0.lowercased() == "bytes" }),
            let validator
        else { return nil }
        let url = redirects.url
        let metadata = PartialMetadata(
            url: (settings.recordedURL ?? settings.url).absoluteString, validator: validator, totalBytes: total,
            remaining: [[0, total]],
            location: url.absoluteString, contentDisposition: contentDisposition)
        return Segments(
            url: url, total: total, validator: validator, remaining: [(0, total)], metadata: metadata, prepares: true,
            headers: redirects.policy.headers(for: url), contentDisposition: contentDisposition)
    }
}

extension TransferMachine {
    /// One ranged response of a segmented download, as a plain value: whether its head
    /// is the segment asked for (judged by ``ResumePlan``, the rules of every response to a
    /// range request), and what the request ended with.
    ///
    /// ```
    ///   awaitingHead ── 206 at the start, same total ──► writing ── stopped ──► reachedEnd
    ///        │ 200, 416, 206 mismatch (changed);                │ a write failed
    ///        ▼ other statuses (failed)                          ▼
    ///     refused                                             failed
    /// ```
    ///
    /// The segment's bytes are placed by ``SegmentTable``, shared by the connections;
    /// ``SegmentDelegate`` carries the actions out.
    struct SegmentResponse: Sendable {
        /// How the request went, for the worker that sent it.
        enum Ending: Hashable, Sendable {
            /// The claim (or the paced part of it asked for) is done.
            case done
            /// The content changed or ranges are no longer honoured: start over.
            case changed(String)
            case failed(DownloadError)

            /// How one request for several ranges ended, from how each of its shares did:
            /// changed if any share says so (the content is not the one the ranges were
            /// asked of: every share starts over), else the first failure, else done.
            static func combining(_ endings: [Ending]) -> Ending {
                if let changed = endings.first(where: { if case .changed = $0 { true } else { false } }) {
                    return changed
                }
                return endings.first { if case .failed = $0 { true } else { false } } ?? .done
            }
        }

        enum HeadAction: Hashable, Sendable {
            /// Write the body at the segment's offsets.
            case write
            /// Stop the request.
            case stop
        }

        enum State: Hashable, Sendable {
            case awaitingHead
            case writing
            /// The delegate stopped the request itself: the segment was done, or a lowered
            /// limit asks for paced requests from here on.
            case reachedEnd
            case refused(Ending)
            case failed(DownloadError)
        }

        /// The URL the segments come from.
        let url: URL
        /// Where the claim starts, and where the request's range ends (exclusive): the
        /// claim's end, or sooner for a paced download.
        let start: Int64
        let requestEnd: Int64
        let claimEnd: Int64
        /// The content's size.
        let total: Int64
        /// The validator the range is asked for under (`If-Range`): the one the content was
        /// fetched under; `nil` for a mirror's first request, whose size is checked and
        /// whose validator is sent from then on.
        let sent: Validator?
        private(set) var state: State = .awaitingHead
        /// The validator of a `206` accepted for writing (a mirror's, learned from its first
        /// response; see ``SourceSet``).
        private(set) var validator: Validator?

        init(url: URL, start: Int64, requestEnd: Int64, claimEnd: Int64, total: Int64, sent: Validator?) {
            self.url = url
            self.start = start
            self.requestEnd = requestEnd
            self.claimEnd = claimEnd
            self.total = total
            self.sent = sent
        }

        /// The first response of the download (a `200` of the whole content, whose head
        /// qualified it for segments), kept as the first segment's, which ends at
        /// `claimEnd`: writing from its first byte (see ``ResponseHandover``).
        static func adopted(url: URL, claimEnd: Int64, total: Int64, validator: Validator?) -> SegmentResponse {
            var response = SegmentResponse(
                url: url, start: 0, requestEnd: total, claimEnd: claimEnd, total: total, sent: validator)
            response.state = .writing
            response.validator = validator
            return response
        }

        /// Whether the body is being written.
        var isWriting: Bool { state == .writing }

        /// The rules its request and response follow: the range `[start, requestEnd)` of
        /// a content of `total` bytes, under the validator ``sent``.
        var plan: ResumePlan { ResumePlan(range: start..<requestEnd, validator: sent, total: total) }

        /// The headers that ask for the segment: its range, and `If-Range` with the
        /// validator it is asked for under.
        var requestHeaders: [(String, String)] { plan.requestHeaders }

        /// The response's head came: by ``ResumePlan``'s rules, a 206 must start where the
        /// segment does, give the content's total and (with an ETag sent) keep its ETag;
        /// a 200 or 416, or a 206 that does not, means the content changed or ranges
        /// stopped working; other statuses fail the request.
        mutating func receivedHead(status: Int, headers: HTTPHeaders) -> HeadAction {
            guard state == .awaitingHead else { return .stop }
            switch plan.evaluate(status: status, header: { headers.first(name: $0) }) {
            case .write(_, truncate: false, let given) where given == total:
                state = .writing
                validator = Validator(etag: headers.first(name: "ETag"), lastModified: headers.first(name: "Last-Modified"))
                return .write
            case .write(_, truncate: false, let given?):
                state = .refused(.changed("\(url.absoluteString): its content is \(given) bytes, not \(total)"))
            case .write(_, truncate: false, nil):
                state = .refused(.changed("\(url.absoluteString): a segment's Content-Range does not match the request"))
            case .write(_, truncate: true, _), .complete, .notModified:
                state = .refused(.changed("\(url.absoluteString) changed or stopped honouring ranges (\(status))"))
            case .restart(let reason):
                state = .refused(.changed("\(url.absoluteString): \(reason)"))
            case .redirect, .fail:
                state = .refused(
                    .failed(
                        TransportErrors.httpError(
                            status: status, url: url, retryAfter: headers.first(name: "Retry-After"))))
            }
            return .stop
        }

        /// The delegate stopped the request itself (the segment is done, or paced).
        mutating func stopped() {
            if state == .writing { state = .reachedEnd }
        }

        /// A write failed: the request ends with the first such error.
        mutating func failed(_ error: DownloadError) {
            if case .failed = state { return }
            state = .failed(error)
        }

        /// The request ended, with `error` if the transport failed; `finished` says the
        /// table holds the whole claim, `wroteSomething` that the table moved past its start.
        func requestEnded(error: DownloadError?, finished: Bool, wroteSomething: Bool) -> Ending {
            switch state {
            case .failed(let failure):
                return .failed(failure)
            case .refused(let ending):
                return ending
            case .reachedEnd:
                return .done
            case .awaitingHead, .writing:
                if finished { return .done }
                // A request for part of the claim that ended well, having written something.
                if requestEnd < claimEnd, error == nil, wroteSomething { return .done }
                return .failed(error ?? DownloadError(.network, "a segment ended early", url: url))
            }
        }
    }
}
