import Logging
import NIOConcurrencyHelpers

/// Sends a multipart object's parts while its segmented download still runs: each part as
/// soon as its bytes are all in the staged file (and, with piece checksums, have passed
/// their check), so the upload overlaps the download instead of following it.
///
/// The segments report each write (``wrote(around:missing:isVerified:)``, on the I/O pool);
/// ``PartReadiness`` says which parts that completed, and a task uploads them,
/// ``DownloadManager/ObjectStorage/uploadConcurrency`` at a time, through
/// ``ObjectUpload/send(part:plan:into:)``, which records each finished part in the upload's
/// sidecar. Nothing here makes the object visible: once the download is verified,
/// ``ObjectUpload/run(beforeCommit:)`` sends whatever parts are left and completes the
/// upload, so a stream that stopped early (the store refused a part, the download was
/// paused) costs only time, never correctness.
///
/// The bytes a part is read from are never written again while the stream runs: segments
/// write each byte once, a bad piece is fetched again only before it passes (and a part
/// waits for its pieces), and a download that starts over stops the stream and abandons its
/// upload first (``TransferOperation``).
final class PartStream: Sendable {
    private let upload: ObjectUpload
    private let plan: MultipartPlan
    private let readiness: NIOLockedValueBox<PartReadiness>
    private let numbers: AsyncStream<Int>
    private let continuation: AsyncStream<Int>.Continuation
    private let runner: NIOLockedValueBox<Task<Void, Never>?> = NIOLockedValueBox(nil)
    private let logger: Logger

    /// A stream for `upload`, or `nil` when its object goes in one `PUT` (or its size is
    /// unknown): such an object is sent whole, after the download.
    init?(upload: ObjectUpload, logger: Logger) {
        guard let plan = try? upload.plan(), let readiness = PartReadiness(plan: plan) else { return nil }
        self.upload = upload
        self.plan = plan
        self.readiness = NIOLockedValueBox(readiness)
        (numbers, continuation) = AsyncStream.makeStream(of: Int.self)
        self.logger = logger
    }

    /// Starts the upload (the sidecar's, as far as the store confirms it, or a new one) and
    /// sends parts as they are reported ready, until ``finish()`` or ``stop()``.
    func start() {
        let task = Task { [upload, plan, readiness, numbers, logger] in
            do throws(DownloadError) {
                let record = try await upload.begin(plan: plan)
                let held = Set(record.withLockedValue { $0.parts.map(\.number) })
                readiness.withLockedValue { $0.held(held) }
                try await Self.send(numbers, skipping: held, width: upload.settings.uploadConcurrency) {
                    number throws(DownloadError) in
                    try await upload.send(part: number, plan: plan, into: record)
                }
            } catch {
                // The parts left are sent after the download, where an error is the download's.
                logger.debug(
                    "parts not sent during the download", metadata: ["object": "\(upload.location)", "error": "\(error)"])
            }
        }
        runner.withLockedValue { $0 = task }
    }

    /// The segments wrote `range` (widened to whole pieces, with piece checksums); `missing`
    /// is what the file still lacks and `isVerified` whether bytes have passed their piece
    /// checks. Parts this completes are queued for upload. Called on the I/O pool.
    func wrote(around range: Range<Int64>, missing: [(Int64, Int64)], isVerified: ((Range<Int64>) -> Bool)?) {
        let ready = readiness.withLockedValue { $0.ready(around: range, missing: missing, isVerified: isVerified) }
        for number in ready { continuation.yield(number) }
    }

    /// Waits for the parts queued so far to be sent: the download is complete. Cancelling
    /// the waiting task (a pause, a cancel) stops the stream.
    func finish() async {
        continuation.finish()
        guard let task = runner.withLockedValue({ $0 }) else { return }
        await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// Stops sending (parts in flight are cancelled) and waits for the stream to end: the
    /// download stopped, or starts over.
    func stop() async {
        let task = runner.withLockedValue { $0 }
        task?.cancel()
        continuation.finish()
        await task?.value
    }

    /// Runs `body` for each number of `numbers` not in `skipping`, `width` at a time, until
    /// `numbers` ends; the first error ends it.
    private static func send(
        _ numbers: AsyncStream<Int>, skipping: Set<Int>, width: Int,
        _ body: @escaping @Sendable (Int) async throws(DownloadError) -> Void
    ) async throws(DownloadError) {
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var running = 0
                for await number in numbers where !skipping.contains(number) {
                    if running >= max(1, width) {
                        try await group.next()
                        running -= 1
                    }
                    group.addTask { try await body(number) }
                    running += 1
                }
                try await group.waitForAll()
            }
        } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(.cancelled, "interrupted")
        }
    }
}
