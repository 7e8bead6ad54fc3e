/// Where a ``DownloadManager`` keeps its jobs durably, and through which the processes
/// sharing those jobs coordinate: the seam between scheduling and storage.
///
/// A manager made with a ``Journal`` talks to a ``JournalStore`` (the SQLite journal
/// and that manager's batching writer); a second store (PostgreSQL, say) implements this
/// protocol and nothing else. Scheduling, admission, following and the transfer's
/// checkpoints only ever see `any JobStore`: no SQL and no database types cross it.
///
/// What every store must guarantee, whatever it is built on:
/// - **Owners.** Each store instance takes one owner token (above `Int32.max`, never
///   reused) and can tell which other tokens belong to live processes. A job is *held*
///   by a live owner that runs it (`owner`) or queued it and has yet to admit it
///   (`session`): see ``JobRecord/isHeld(byOtherThan:live:)``. Claims never take a held
///   job; they report it as a ``JobAttachment`` instead.
/// - **Order.** The fire-and-forget writes (`record…`, ``clearCommand(_:for:)``,
///   ``release(owner:)``) and ``claim(_:owner:force:)`` apply in the order they were
///   made through one store instance; ``flush()`` returns once everything made before it
///   is durable. They never block the caller: the transfer path calls them.
/// - **Durability.** ``recordCheckpoint(_:bytes:total:validator:bytesPerSecond:bootID:)``
///   only ever names bytes already on stable storage; the store must not lose a
///   checkpoint it acknowledged through ``flush()``.
///
/// The rows are ``JobRecord`` values: the whole job as the journal keeps it.
package protocol JobStore: AnyObject, Sendable {
    // MARK: Owners

    /// This store instance's owner token, taken (with whatever proves it alive) on first use.
    func ownerToken() throws(DownloadError) -> Int64

    // MARK: Admission

    /// Claims `job` for `owner`: inserts it, or takes over the row with its ID unless
    /// another live process holds it. Ordered after this store's earlier writes.
    ///
    /// An unfinished row for the same URL and partial file keeps its committed bytes; a
    /// completed one for the same URL, file, checksum and size keeps its completed file's
    /// details, so the transfer can revalidate it (unless `force`).
    func claim(_ job: JobRecord, owner: Int64, force: Bool) async throws(DownloadError) -> JobClaim

    /// Adds or takes over many jobs at once for process `session`, all or nothing (as
    /// ``claim(_:owner:force:)`` does one, without taking ownership: they wait for
    /// ``claimQueued(limit:session:)``). `forcing` lists the IDs whose completed files are
    /// not to be revalidated. Returns the jobs other live processes hold, left to them.
    func insert(_ jobs: [JobRecord], session: Int64, forcing: Set<String>) async throws(DownloadError)
        -> [JobAttachment]

    /// Queues, for process `session`, every unfinished job no other live process holds;
    /// returns how many, and the jobs other processes hold (asking their holders to
    /// resume those they have paused).
    func adoptUnfinished(session: Int64, keepingPaused: Bool) async throws(DownloadError)
        -> (count: Int, attachments: [JobAttachment])

    /// Takes up to `limit` queued jobs of `session` that no process runs yet, by priority
    /// (highest first) then age, and marks them owned by it.
    func claimQueued(limit: Int, session: Int64) async throws(DownloadError) -> [JobRecord]

    // MARK: Coordination

    /// Commands (`pause`, `cancel`, `resume`) other processes left for jobs `owner` holds.
    func commands(for owner: Int64) async throws(DownloadError) -> [(id: DownloadID, command: String)]

    /// The rows of `ids` that still exist, and the live owners other than this instance,
    /// for following jobs other processes run.
    func watch(_ ids: [DownloadID]) async throws(DownloadError)
        -> (rows: [DownloadID: JobRecord], live: [Int64: JournalOwner])

    /// Applies `command` to job `id` directly when no live process holds it, else leaves
    /// it for its holder. Blocks: the manager calls it off its actor.
    func leave(_ command: JobLifecycle.Command, for id: DownloadID) throws(DownloadError)

    // MARK: Fire-and-forget writes

    /// Job `id` runs in process `owner` now.
    func recordStarted(_ id: DownloadID, owner: Int64)
    /// Job `id` is in `state` now, with the error that put it there, if any.
    func recordState(_ id: DownloadID, _ state: JobState, errorCode: String?, error: String?)
    /// Job `id` failed with `error`. A store may decide to try it again later (the shared
    /// queue's retries with backoff); the journal records it as failed.
    func recordFailed(_ id: DownloadID, _ error: DownloadError)
    /// Job `id` completed: `bytes` bytes, saved to `file`, from `finalURL`. Gives up its ownership.
    func recordCompleted(_ id: DownloadID, bytes: Int64, finalURL: String, file: CompletedFile?)
    /// The first `bytes` bytes of job `id`'s partial file are on stable storage.
    func recordCheckpoint(
        _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?)
    /// Job `id` has made `attempts` retries.
    func recordAttempt(_ id: DownloadID, _ attempts: Int)
    /// Clears `command` once it has been acted on; a newer command left meanwhile stays.
    func clearCommand(_ command: String, for id: DownloadID)
    /// Gives up ownership of every unfinished job `owner` holds; running ones become paused.
    func release(owner: Int64)

    // MARK: Fencing

    /// Whether a transfer must win ``confirmCompletion(_:bytes:)`` before it renames its file
    /// into place: true for a store whose jobs another process may take over while this one
    /// still runs them (a lease that expired).
    var fencesCompletion: Bool { get }
    /// Records job `id` as completed with `bytes` bytes if this process still holds it, and
    /// throws ``DownloadError/Code/runningElsewhere`` if it does not: the transfer then
    /// leaves its file where it is. Called only when ``fencesCompletion``.
    func confirmCompletion(_ id: DownloadID, bytes: Int64) async throws(DownloadError)

    /// Waits until every write made before this call is durable.
    func flush() async
    /// Flushes, then stops whatever the store runs for this manager. Called once, at shutdown.
    func close() async
}

extension JobStore {
    package func recordFailed(_ id: DownloadID, _ error: DownloadError) {
        recordState(id, .failed, errorCode: error.code.description, error: error.message)
    }

    package var fencesCompletion: Bool { false }

    package func confirmCompletion(_ id: DownloadID, bytes: Int64) async throws(DownloadError) {}
}

/// What claiming one job found.
package enum JobClaim: Sendable {
    /// The row is this process's now; `journaled` is what it knew of the job's partial
    /// or completed file.
    case claimed(journaled: TransferOperation.JournaledProgress?)
    /// Another live process holds the job.
    case heldElsewhere(JobAttachment)
}

/// A job another live process holds, which this one follows from the store.
package struct JobAttachment: Sendable {
    package var id: DownloadID
    /// The holder's owner token.
    package var holder: Int64
    package var owner: JournalOwner
    /// The row as it was found.
    package var record: JobRecord
}
