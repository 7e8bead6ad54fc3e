/// A caller's handle on a download: its result, its events, and its controls.
///
/// Several handles can share one transfer when requests join. Cancelling the Swift task
/// that awaits ``result`` withdraws only that caller's interest; the transfer stops when
/// no handle wants it any more. ``cancel()`` stops it for everyone.
public final class DownloadHandle: Sendable {
    /// The download's ID: the request's, or for a URL that already named a download to
    /// another destination, `URL -> PATH` (see ``DownloadRequest/id``).
    public let id: DownloadID
    private let core: JobCore
    private let manager: DownloadManager
    private let subscriber: UInt64
    /// For a memory request that joined another download: its own result, with the bytes.
    private let copy: MemoryCopy?

    init(id: DownloadID, core: JobCore, manager: DownloadManager, subscriber: UInt64, copy: MemoryCopy? = nil) {
        self.id = id
        self.core = core
        self.manager = manager
        self.subscriber = subscriber
        self.copy = copy
    }

    /// The verified file or data, once the download completes.
    ///
    /// A memory request gets `data` even when it joined a file download: the bytes are
    /// read from the verified file.
    ///
    /// Waits through pauses and retries. If the awaiting task is cancelled, this caller's
    /// interest is withdrawn and the result throws ``DownloadError/Code/cancelled`` with
    /// the reason ``DownloadError/CancellationReason/noLongerWanted``. Once no caller
    /// wants the download it stops; its partial file is kept, so asking again resumes,
    /// unless the request's ``DownloadRequest/whenAbandoned`` says
    /// ``DownloadRequest/AbandonAction/deletePartial``.
    ///
    /// - Throws: A ``DownloadError`` saying why the download did not complete.
    public var result: DownloadResult {
        get async throws(DownloadError) {
            let core = self.core
            let manager = self.manager
            let subscriber = self.subscriber
            let outcome = await (copy?.result ?? core.result).wait {
                Task { await manager.withdraw(subscriber: subscriber, core: core) }
            }
            guard let outcome else { throw .cancelled(.noLongerWanted, id: core.id) }
            return try outcome.get()
        }
    }

    /// The download's events, in a fresh stream on every access.
    ///
    /// A stream first receives the download's current state: its latest `progress` and its
    /// last change of state (`queued`, `started`, `paused`, `networkLost`, …), in the order
    /// they happened. Then it receives every later event, none lost or repeated, however
    /// long after ``DownloadManager/download(_:)`` it was made.
    ///
    /// The stream finishes after `completed`, `failed` or `cancelled`. A stream made after
    /// the download ended yields only that last event, and finishes.
    public var events: AsyncStream<DownloadEvent> { core.events.makeStream() }

    /// The current progress.
    public var progress: DownloadProgress { core.meter.snapshot() }

    /// Pauses the download, keeping its partial file.
    public func pause() async { await manager.pause(core: core) }

    /// Resumes the download after a pause.
    public func resume() async { await manager.resume(core: core) }

    /// Cancels the download for every caller and deletes its partial file.
    public func cancel() async { await manager.cancel(core: core) }

    /// Changes the download's priority, while it is queued or running.
    public func setPriority(_ priority: DownloadPriority) async {
        await manager.setPriority(priority, core: core)
    }

    /// Changes the download's own speed limit, in bytes per second (`nil`: none), while it
    /// is queued or running. See ``DownloadManager/setRateLimit(_:for:)``.
    public func setRateLimit(_ bytesPerSecond: Int?) async {
        await manager.setRateLimit(bytesPerSecond, for: id)
    }
}
