import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// Receives one HTTP response on its event loop and streams a 2xx body to the sink.
///
/// The head decides, through ``ResumePlan``, whether the body is written, and where.
/// Bodies of errors and redirects never touch the disk. File writes run on the I/O
/// thread pool; the future handed back to AsyncHTTPClient completes when the write is
/// done, which is the back-pressure that keeps memory flat.
final class TransferDelegate: HTTPClientResponseDelegate, Sendable {
    typealias Response = Void

    /// Where body bytes go.
    enum Sink: Sendable {
        case file(PartialFile, PartialPaths)
        case memory(limit: Int)
    }

    /// What the delegate saw, read by the transfer once the request has ended.
    struct Outcome: Sendable {
        var status: Int?
        var headers = HTTPHeaders()
        var action: ResumePlan.Action?
        /// Bytes of this response's body that reached the sink.
        var bytesWritten: Int64 = 0
        /// An error the delegate raised itself (write failure, size limits).
        var failure: DownloadError?
        /// The body of a memory download, or a small file body not yet written to the file.
        var body: ByteBuffer?
        /// A digest covering the content from byte 0 to the end of what was written,
        /// or `nil` when the file must be hashed from disk.
        var digest: ContentDigest?
        /// Set when the response qualified for a segmented download: the request was
        /// stopped after the head and nothing was written.
        var segmentable: Segmentable?
    }

    /// What a segmented download needs from the first response.
    struct Segmentable: Sendable {
        var total: Int64
        var validator: Validator
    }

    private struct State {
        var outcome = Outcome()
        var nextOffset: Int64 = 0
        var lastWrite: EventLoopFuture<Void>?
        /// Batches the body's writes (file sinks), made when the head says to write.
        var writer: BatchWriter?
        /// Whether a small body for a file is kept in ``Outcome/body`` instead, to be
        /// written in one go when the transfer commits it.
        var collects = false
        var eventLoop: (any EventLoop)?
    }

    private let plan: ResumePlan
    private let sink: Sink
    private let requestURL: URL
    private let expectedSize: Int64?
    private let algorithm: Checksum.Algorithm?
    private let carriedDigest: ContentDigest?
    private let core: JobCore
    private let threadPool: NIOThreadPool
    private let checkpointer: Checkpointer?
    /// When set, a fresh 200 of at least this many bytes that supports ranges is not
    /// read but reported as ``Outcome/segmentable``.
    private let segmentationThreshold: Int64?
    /// Whether the partial file is known to be empty (so a fresh body needs no truncation).
    private let partialIsEmpty: Bool
    private let state = NIOLockedValueBox(State())

    /// Bodies up to this size get no resume metadata and no disk reservation.
    static let smallBody: Int64 = 64 << 10

    /// The largest error body read before the connection is dropped instead.
    private static let maxDiscardedBody: Int64 = 64 * 1024

    init(
        plan: ResumePlan,
        sink: Sink,
        requestURL: URL,
        expectedSize: Int64?,
        algorithm: Checksum.Algorithm?,
        carriedDigest: ContentDigest?,
        core: JobCore,
        threadPool: NIOThreadPool,
        checkpointer: Checkpointer?,
        segmentationThreshold: Int64? = nil,
        partialIsEmpty: Bool = false
    ) {
        self.segmentationThreshold = segmentationThreshold
        self.partialIsEmpty = partialIsEmpty
        self.plan = plan
        self.sink = sink
        self.requestURL = requestURL
        self.expectedSize = expectedSize
        self.algorithm = algorithm
        self.carriedDigest = carriedDigest
        self.core = core
        self.threadPool = threadPool
        self.checkpointer = checkpointer
    }

    /// What happened, once the request has ended and ``drained()`` has returned.
    var outcome: Outcome { state.withLockedValue { $0.outcome } }

    /// Writes what is still batched and waits for every write to finish, so the file may
    /// be synced or closed.
    func drained() async {
        let (last, writer, eventLoop) = state.withLockedValue { ($0.lastWrite, $0.writer, $0.eventLoop) }
        _ = try? await last?.get()
        if let writer, let eventLoop {
            do {
                try await writer.flush(on: eventLoop).get()
            } catch {
                state.withLockedValue { state in
                    if state.outcome.failure == nil {
                        state.outcome.failure =
                            (error as? DownloadError)
                            ?? DownloadError(.fileSystem, "cannot write \(self.requestURL.lastPathComponent): \(error)")
                    }
                }
            }
        }
    }

    /// The writer for a file body: each batch is written, hashed, checkpointed and counted
    /// on the I/O pool.
    private func makeWriter(file: PartialFile, digest: ContentDigest?) -> BatchWriter {
        let (core, checkpointer, state) = (self.core, self.checkpointer, self.state)
        return BatchWriter(threadPool: threadPool) { batch in
            var position = batch.offset
            for part in batch.parts {
                try file.write(part, at: position)
                digest?.update(part)
                position += Int64(part.readableBytes)
            }
            // One clock read per batch, shared by the checkpointer and the progress meter.
            let now = ContinuousClock.now
            if let checkpointer, checkpointer.wrote(batch.bytes, at: now) {
                try file.sync()
                checkpointer.synced(upTo: position)
            }
            state.withLockedValue { $0.outcome.bytesWritten += Int64(batch.bytes) }
            core.received(batch.bytes, at: now)
        }
    }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        core.charge(head, for: task, after: receive(head, task: task))
    }

    private func receive(_ head: HTTPResponseHead, task: HTTPClient.Task<Void>) -> EventLoopFuture<Void> {
        let status = Int(head.status.code)
        let action = plan.evaluate(status: status) { head.headers.first(name: $0) }
        if let segmentationThreshold, status == 200, case .write(0, _, let total?) = action,
            total >= segmentationThreshold,
            head.headers[canonicalForm: "Accept-Ranges"].contains(where: { $0.lowercased() == "bytes" }),
            let validator = Validator(
                etag: head.headers.first(name: "ETag"), lastModified: head.headers.first(name: "Last-Modified"))
        {
            state.withLockedValue { state in
                state.outcome.status = status
                state.outcome.headers = head.headers
                state.outcome.segmentable = Segmentable(total: total, validator: validator)
            }
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        }
        var early: DownloadError?
        var digest: ContentDigest?
        if case .write(let offset, let truncate, let total) = action {
            if let expectedSize, let total, total != expectedSize {
                early = DownloadError(
                    .sizeMismatch,
                    "\(requestURL.absoluteString) is \(total) bytes but \(expectedSize) were expected")
            }
            if case .memory(let limit) = sink, let total, total > Int64(limit) {
                early = DownloadError(
                    .tooLarge, "\(requestURL.absoluteString) is \(total) bytes, over the \(limit)-byte memory limit")
            }
            if let algorithm {
                if truncate || offset == 0 {
                    digest = ContentDigest(algorithm)
                } else if let carriedDigest, carriedDigest.byteCount == offset {
                    digest = carriedDigest
                }
            }
            core.meter.reset(completed: offset, total: total)
            checkpointer?.describe(
                validator: Validator(
                    etag: head.headers.first(name: "ETag"), lastModified: head.headers.first(name: "Last-Modified"))
                    ?? plan.validator,
                total: total)
        }
        state.withLockedValue { state in
            state.outcome.status = status
            state.outcome.headers = head.headers
            state.outcome.action = action
            state.outcome.failure = early
            state.outcome.digest = digest
            if case .write(let offset, _, _) = action {
                state.nextOffset = offset
                state.eventLoop = task.eventLoop
                if case .file(let file, _) = sink {
                    if case .write(0, true, let total?) = action, partialIsEmpty, total <= Self.smallBody {
                        state.collects = true
                    } else {
                        state.writer = makeWriter(file: file, digest: digest)
                    }
                }
            }
        }
        if early != nil {
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        }
        switch action {
        case .restart:
            // The body is not the content we asked for; don't read it.
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        case .write(_, let truncate, let total) where !truncate:
            guard case .file(let file, _) = sink, let total else { return task.eventLoop.makeSucceededVoidFuture() }
            let future = threadPool.runIfActive(eventLoop: task.eventLoop) {
                try file.reserve(upTo: total)
            }
            return recordingFailure(of: future, task: task)
        case .write(_, _, let total?) where partialIsEmpty && total <= Self.smallBody:
            // A small body into an empty file: kept in memory and written when the file is
            // committed, with nothing to reserve and no resume metadata (an interrupted
            // small download simply starts again, losing at most 64 KiB).
            return task.eventLoop.makeSucceededVoidFuture()
        case .write(_, _, let total):
            guard case .file(let file, let paths) = sink else { return task.eventLoop.makeSucceededVoidFuture() }
            let metadata = PartialMetadata(
                url: requestURL.absoluteString,
                validator: Validator(etag: head.headers.first(name: "ETag"),
                                     lastModified: head.headers.first(name: "Last-Modified")),
                totalBytes: total)
            let checkpointer = self.checkpointer
            let future = threadPool.runIfActive(eventLoop: task.eventLoop) {
                try file.truncate(to: 0)
                try metadata.save(to: paths.metadata)
                checkpointer?.synced(upTo: 0)
                if let total { try file.reserve(upTo: total) }
            }
            return recordingFailure(of: future, task: task)
        default:
            return task.eventLoop.makeSucceededVoidFuture()
        }
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let count = buffer.readableBytes
        enum Step {
            case discard
            case dropConnection
            case write(offset: Int64)
            case stored
        }
        let step: Step = state.withLockedValue { state in
            guard state.outcome.failure == nil, state.outcome.segmentable == nil, case .write = state.outcome.action else {
                state.outcome.bytesWritten += Int64(count)
                return state.outcome.bytesWritten > Self.maxDiscardedBody ? .dropConnection : .discard
            }
            if state.collects {
                // Framed by its Content-Length, so at most `smallBody` bytes.
                state.outcome.body.setOrWriteImmutableBuffer(buffer)
                state.outcome.bytesWritten += Int64(count)
                return .stored
            }
            switch sink {
            case .memory(let limit):
                let size = (state.outcome.body?.readableBytes ?? 0) + count
                guard size <= limit else {
                    state.outcome.failure = DownloadError(
                        .tooLarge, "\(requestURL.absoluteString) is over the \(limit)-byte memory limit")
                    return .dropConnection
                }
                state.outcome.body.setOrWriteImmutableBuffer(buffer)
                state.outcome.bytesWritten += Int64(count)
                return .stored
            case .file:
                let offset = state.nextOffset
                state.nextOffset += Int64(count)
                return .write(offset: offset)
            }
        }
        switch step {
        case .discard:
            return task.eventLoop.makeSucceededVoidFuture()
        case .dropConnection:
            task.cancel()
            return task.eventLoop.makeSucceededVoidFuture()
        case .stored:
            if let digest = state.withLockedValue({ $0.outcome.digest }) { digest.update(buffer) }
            core.received(count, at: .now)
            return core.throttle(count, on: task.eventLoop) ?? task.eventLoop.makeSucceededVoidFuture()
        case .write(let offset):
            guard let writer = state.withLockedValue({ $0.writer }) else {
                return task.eventLoop.makeSucceededVoidFuture()
            }
            let written = recordingFailure(of: writer.add(buffer, at: offset, on: task.eventLoop), task: task, isWrite: true)
            // The speed limits hold the next read back, not this write.
            guard let allowed = core.throttle(count, on: task.eventLoop) else { return written }
            return written.and(allowed).map { _ in }
        }
    }

    func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {}

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {}

    /// Remembers `future` as the last write, and turns its failure into the transfer's
    /// failure so the request stops.
    private func recordingFailure(of future: EventLoopFuture<Void>, task: HTTPClient.Task<Void>, isWrite: Bool = false)
        -> EventLoopFuture<Void>
    {
        if !isWrite { state.withLockedValue { $0.lastWrite = future } }
        return future.flatMapErrorThrowing { [state] error in
            let failure =
                (error as? DownloadError)
                ?? DownloadError(.fileSystem, "cannot write \(self.requestURL.lastPathComponent): \(error)")
            state.withLockedValue { $0.outcome.failure = failure }
            throw failure
        }
    }
}
