import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Receives one ranged response of a segmented download and writes it at its offset.
///
/// The response must be a 206 whose `Content-Range` starts where the segment does and whose
/// total is the content's size; a 200 means the content changed (the `If-Range` validator
/// no longer matches) or the server stopped honouring ranges. The segment's end can shrink
/// while the response runs (another connection took half of it): the delegate writes up to
/// the end and then cancels the request.
final class SegmentDelegate: HTTPClientResponseDelegate, Sendable {
    typealias Response = Void

    enum Verdict: Sendable {
        /// A 206 for the segment: its body is being written.
        case accepted
        /// The content changed or ranges are no longer honoured: start over.
        case changed(String)
        /// An HTTP error status.
        case failed(DownloadError)
    }

    private struct State {
        var verdict: Verdict?
        var failure: DownloadError?
        var reachedEnd = false
        var eventLoop: (any EventLoop)?
    }

    private let claim: SegmentTable.Claim
    /// Where the request's range ends (exclusive): the claim's end, or sooner for a paced
    /// download.
    private let requestEnd: Int64
    private let table: SegmentTable
    private let file: PartialFile
    private let url: URL
    private let core: JobCore
    private let threadPool: NIOThreadPool
    private let onWrite: @Sendable (Int, ContinuousClock.Instant) throws -> Void
    private let state = NIOLockedValueBox(State())
    private let writer: BatchWriter

    /// - Parameter onWrite: Runs on the I/O pool after each write, with the byte count and
    ///   the time: the checkpointing hook.
    init(
        claim: SegmentTable.Claim, requestEnd: Int64, table: SegmentTable, file: PartialFile, url: URL, core: JobCore,
        threadPool: NIOThreadPool, onWrite: @escaping @Sendable (Int, ContinuousClock.Instant) throws -> Void
    ) {
        self.claim = claim
        self.requestEnd = requestEnd
        self.table = table
        self.file = file
        self.url = url
        self.core = core
        self.threadPool = threadPool
        self.onWrite = onWrite
        self.writer = BatchWriter(threadPool: threadPool) { batch in
            var position = batch.offset
            for part in batch.parts {
                try file.write(part, at: position)
                position += Int64(part.readableBytes)
            }
            table.wrote(claim.index, upTo: position)
            let now = ContinuousClock.now
            try onWrite(batch.bytes, now)
            core.received(batch.bytes, at: now)
        }
    }

    var verdict: Verdict? { state.withLockedValue { $0.verdict } }
    var failure: DownloadError? { state.withLockedValue { $0.failure } }
    /// Whether the delegate stopped the request itself: the segment was done, or a
    /// lowered limit asks for paced requests from here on.
    var reachedEnd: Bool { state.withLockedValue { $0.reachedEnd } }

    /// Writes what is still batched and waits until every write is done.
    func drained() async {
        guard let eventLoop = state.withLockedValue({ $0.eventLoop }) else { return }
        do {
            try await writer.flush(on: eventLoop).get()
        } catch {
            record(error)
        }
    }

    private func record(_ error: any Error) {
        let failure =
            (error as? DownloadError) ?? DownloadError(.fileSystem, "cannot write \(url.lastPathComponent): \(error)")
        state.withLockedValue { state in
            if state.failure == nil { state.failure = failure }
        }
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        core.charge(head, for: task, after: receive(head, task: task))
    }

    private func receive(_ head: HTTPResponseHead, task: HTTPClient.Task<Void>) -> EventLoopFuture<Void> {
        let status = Int(head.status.code)
        let verdict: Verdict
        switch status {
        case 206:
            let range = head.headers.first(name: "Content-Range").flatMap(ContentRange.init)
            if let range, range.range?.lowerBound == claim.start, range.total == table.total {
                verdict = .accepted
            } else {
                verdict = .changed("\(url.absoluteString): a segment's Content-Range does not match the request")
            }
        case 200, 416:
            verdict = .changed("\(url.absoluteString) changed or stopped honouring ranges (\(status))")
        default:
            verdict = .failed(
                TransferOperation.httpError(status: status, url: url, retryAfter: head.headers.first(name: "Retry-After")))
        }
        state.withLockedValue { state in
            state.verdict = verdict
            state.eventLoop = task.eventLoop
        }
        if case .accepted = verdict { return task.eventLoop.makeSucceededVoidFuture() }
        task.cancel()
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        guard case .accepted? = state.withLockedValue({ $0.verdict }) else {
            return task.eventLoop.makeSucceededVoidFuture()
        }
        let (offset, allowed) = table.reserve(claim.index, buffer.readableBytes)
        guard allowed > 0 else {
            stop(task)
            return task.eventLoop.makeSucceededVoidFuture()
        }
        let part = allowed == buffer.readableBytes ? buffer : buffer.getSlice(at: buffer.readerIndex, length: allowed)!
        let future = writer.add(part, at: offset, on: task.eventLoop)
        if allowed < buffer.readableBytes { stop(task) }
        let written = future.flatMapErrorThrowing { [weak self] error in
            self?.record(error)
            throw error
        }
        // The download's speed limits (shared by its segments) hold the next read back.
        guard let limited = core.throttle(part.readableBytes, on: task.eventLoop) else { return written }
        // A limit lowered while a long request runs: it stops here, and the rest of the
        // segment is asked for in paced steps (see `SegmentedTransfer`).
        if allowed == buffer.readableBytes, let size = core.pacedRequestSize,
            requestEnd - (offset + Int64(allowed)) > 2 * size
        {
            stop(task)
        }
        return written.and(limited).map { _ in }
    }

    private func stop(_ task: HTTPClient.Task<Void>) {
        state.withLockedValue { $0.reachedEnd = true }
        task.cancel()
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {}

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {}
}
