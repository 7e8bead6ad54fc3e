import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Receives the answer to one request for several ranges (claims of a segmented download,
/// see ``SegmentTable/claimMore(after:for:count:bytes:at:)``) and hands each claim's bytes to
/// a ``SegmentDelegate`` of its own, as if each had come in a `206` of its own: the same
/// writes, checkpoints, end game and verdicts as a claim fetched alone.
///
/// A server may answer such a request in three ways, all used:
/// - `206` with `multipart/byteranges`: each part's bytes go to the claim they belong to
///   (``MultipartByteranges``), in whatever order and grouping the server chose;
/// - `206` with one `Content-Range` (it joined the ranges, or served one of them): its bytes
///   go to the claims they cover;
/// - `200` with the whole content, from a server that takes fewer ranges than asked (nginx's
///   `max_ranges`) or none: the claims' bytes are taken as they pass, the request is stopped
///   after the last one, and the source is asked for one range per request from then on
///   (``answeredWhole``). A `200` whose validator is not the one sent in `If-Range` is a
///   changed content, as for any segment.
///
/// A claim whose bytes do not come in order from its start is left unfinished: it is given
/// back and fetched again.
final class MultiRangeDelegate: ResponseReceiver {
    /// The claims, sorted by offset, and each one's receiver.
    private let claims: [SegmentTable.Claim]
    private let parts: [SegmentDelegate]
    private let total: Int64
    /// The validator sent in `If-Range`, if any.
    private let sent: Validator?
    private let state: NIOLockedValueBox<State>

    private struct State {
        var mode: Mode = .awaitingHead
        /// The next offset each claim's bytes must come from.
        var expected: [Int64]
        /// Claims whose receivers stopped (their end reached), or whose bytes came out of order.
        var stopped: [Bool]
        var answeredWhole = false
    }

    private enum Mode {
        case awaitingHead
        /// The head went to every claim's receiver as it was (an error status, a changed
        /// content): nothing of the body is written.
        case passing
        case multipart(MultipartByteranges)
        /// The body is the content from `offset` on.
        case run(offset: Int64)
    }

    /// A claim's side of the request: stopping it stops only its share, and the request
    /// itself once it is the whole content and every claim is done.
    private struct PartTask: ResponseTask {
        let eventLoop: any EventLoop
        let stop: @Sendable () -> Void
        func cancel() { stop() }
    }

    /// - Parameters:
    ///   - parts: Each claim's receiver, in the order of `claims`.
    ///   - sent: The validator the request sent in `If-Range`.
    init(claims: [SegmentTable.Claim], parts: [SegmentDelegate], total: Int64, sent: Validator?) {
        precondition(claims.count == parts.count && !claims.isEmpty)
        self.claims = claims
        self.parts = parts
        self.total = total
        self.sent = sent
        state = NIOLockedValueBox(State(expected: claims.map(\.start), stopped: claims.map { _ in false }))
    }

    /// Whether the server sent its whole content rather than the ranges asked for.
    var answeredWhole: Bool { state.withLockedValue { $0.answeredWhole } }

    /// The validator of the response, once its head was accepted.
    var responseValidator: Validator? { parts[0].responseValidator }

    /// Writes what is still batched and says how each claim's share went, in the order of
    /// the claims; `error` is the transport's.
    func drained(error: DownloadError?) async -> [TransferMachine.SegmentResponse.Ending] {
        var endings: [TransferMachine.SegmentResponse.Ending] = []
        // Every claim's last bytes go to the disk at once, then each is awaited: one claim
        // after another, they cost a hop to the I/O pool and back each (128 a request).
        for part in parts { part.flush() }
        for part in parts { endings.append(await part.drained(error: error)) }
        return endings
    }

    func receivedHead(task: any ResponseTask, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let status = Int(head.status.code)
        let headers = head.headers
        var mode = Mode.passing
        var whole = false
        switch status {
        case 206:
            if let type = headers.first(name: "Content-Type"), let reader = MultipartByteranges(contentType: type) {
                mode = .multipart(reader)
            } else if let range = headers.first(name: "Content-Range").flatMap(ContentRange.init),
                let bytes = range.range, range.total == total
            {
                mode = .run(offset: bytes.lowerBound)
            } else {
                // Neither: no claim can be told its bytes. The source is asked for one range
                // at a time from now on, and these claims are fetched again.
                fail(DownloadError(.protocolViolation, "an answer to a request for several ranges could not be read"))
                state.withLockedValue {
                    $0.mode = .passing
                    $0.answeredWhole = true
                }
                task.cancel()
                return task.eventLoop.makeSucceededVoidFuture()
            }
        case 200:
            let shown = Validator(etag: headers.first(name: "ETag"), lastModified: headers.first(name: "Last-Modified"))
            let length = headers.first(name: "Content-Length").flatMap { Int64($0) }
            if sent == nil || shown == sent, length == nil || length == total {
                mode = .run(offset: 0)
                whole = true
            }
        default:
            break
        }
        state.withLockedValue {
            $0.mode = mode
            $0.answeredWhole = whole
        }
        var futures: [EventLoopFuture<Void>] = []
        for (index, part) in parts.enumerated() {
            let partHead: HTTPResponseHead
            if case .passing = mode {
                partHead = head
            } else {
                // Each claim sees the 206 it would have had on its own.
                var own = HTTPHeaders()
                for name in ["ETag", "Last-Modified"] {
                    if let value = headers.first(name: name) { own.add(name: name, value: value) }
                }
                let claim = claims[index]
                own.add(name: "Content-Range", value: "bytes \(claim.start)-\(claim.end - 1)/\(total)")
                partHead = HTTPResponseHead(version: head.version, status: .partialContent, headers: own)
            }
            futures.append(part.receivedHead(task: partTask(index, of: task), partHead))
        }
        return EventLoopFuture.andAllSucceed(futures, on: task.eventLoop)
    }

    func receivedBodyPart(task: any ResponseTask, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let runs: Result<[(offset: Int64, bytes: ByteBuffer)], DownloadError> = state.withLockedValue { state in
            switch state.mode {
            case .awaitingHead, .passing:
                return .success([])
            case .run(let offset):
                state.mode = .run(offset: offset + Int64(buffer.readableBytes))
                return .success([(offset, buffer)])
            case .multipart(var reader):
                do throws(DownloadError) {
                    let runs = try reader.read(buffer)
                    state.mode = .multipart(reader)
                    if let sent = reader.total, sent != total {
                        return .failure(
                            DownloadError(.protocolViolation, "its parts say the content is \(sent) bytes, not \(total)"))
                    }
                    return .success(runs)
                } catch {
                    return .failure(error)
                }
            }
        }
        let routed: [(offset: Int64, bytes: ByteBuffer)]
        switch runs {
        case .success(let runs):
            routed = runs
        case .failure(let error):
            fail(error)
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        }
        var futures: [EventLoopFuture<Void>] = []
        for run in routed { futures += route(run, task: task) }
        // A whole content is not read past the last claim.
        let done = state.withLockedValue { state -> Bool in
            guard state.answeredWhole, case .run(let offset) = state.mode else { return false }
            return offset >= claims[claims.count - 1].end || state.stopped.allSatisfy { $0 }
        }
        if done { task.cancel() }
        return futures.isEmpty
            ? task.eventLoop.makeSucceededVoidFuture() : EventLoopFuture.andAllSucceed(futures, on: task.eventLoop)
    }

    /// Hands each claim the bytes of `run` that are its own.
    private func route(_ run: (offset: Int64, bytes: ByteBuffer), task: any ResponseTask) -> [EventLoopFuture<Void>] {
        let end = run.offset + Int64(run.bytes.readableBytes)
        var futures: [EventLoopFuture<Void>] = []
        for (index, claim) in claims.enumerated() where claim.start < end && run.offset < claim.end {
            let lower = max(run.offset, claim.start)
            let upper = min(end, claim.end)
            let proceed = state.withLockedValue { state -> Bool in
                guard !state.stopped[index] else { return false }
                guard lower == state.expected[index] else {
                    // Out of order: this claim is left unfinished, and fetched again.
                    state.stopped[index] = true
                    return false
                }
                state.expected[index] = upper
                return true
            }
            guard proceed,
                let slice = run.bytes.getSlice(
                    at: run.bytes.readerIndex + Int(lower - run.offset), length: Int(upper - lower))
            else { continue }
            futures.append(parts[index].receivedBodyPart(task: partTask(index, of: task), slice))
        }
        return futures
    }

    private func partTask(_ index: Int, of task: any ResponseTask) -> PartTask {
        PartTask(eventLoop: task.eventLoop) { [state] in
            state.withLockedValue { $0.stopped[index] = true }
        }
    }

    /// Every claim not yet finished fails with `error`.
    private func fail(_ error: DownloadError) {
        for part in parts { part.fail(error) }
    }
}
