package import Foundation
/// Where a ``DownloadManager`` keeps its jobs durably, and through which the processes
/// sharing those jobs coordinate: the seam between scheduling and storage.
///
/// Two stores keep this contract in full: the SQLite journal (`JournalStore`, one
/// machine, processes proven alive by the kernel through ``OwnerLocks``) and the shared
/// queue on PostgreSQL (`PostgresJobStore` in `HaulPostgres`, many machines, leases).
/// Scheduling, admission, following and the transfer's checkpoints only ever see
/// `any JobStore`: no SQL, no database type and no transfer type crosses it, and how a
/// store tells live owners from dead ones stays inside it.
///
/// What every store guarantees (the tests' `StoreConformance` sequences check each, on both):
/// - **One owner per store.** A store instance acts for one owner, which it identifies
///   (``ownerToken()``) and proves alive its own way. A job is *held* by a live owner
///   that runs it or queued it and has yet to run it. Claims never take a held job; they
///   report it as a ``JobAttachment``. A job whose owner died (or whose lease expired) is
///   claimed like a free one: it is *taken over*.
/// - **Fencing.** Every write about a job (`record…`, ``confirmCompletion(_:bytes:)``)
///   names the owner and the claim (attempt) it was made under, and applies only while
///   that claim holds. A write the store refuses is reported: through
///   ``StoreSignal/lost(_:)`` for the fire-and-forget writes, by throwing
///   ``DownloadError/Code/runningElsewhere`` for ``confirmCompletion(_:bytes:)``.
/// - **Order.** The fire-and-forget writes and ``claim(_:force:)`` apply in the order
///   they were made through one store instance; ``flush()`` returns once everything made
///   before it is durable. The writes never block the caller: the transfer path makes them.
/// - **Durability.** ``recordCheckpoint(_:bytes:total:validator:bytesPerSecond:bootID:)``
///   only ever names bytes already on stable storage; the store must not lose a
///   checkpoint it acknowledged through ``flush()``.
/// - **Signals.** ``signals`` tells the manager when to look again (work, commands or
///   followed jobs may have changed) and which jobs it lost. A store that can be told of
///   changes (PostgreSQL's `LISTEN`) passes that on; one that cannot (SQLite, across
///   processes) polls, and only then.
/// - **No files.** A store keeps rows, never touches a partial file: it says when a job
///   was taken over from an owner that may still be writing (``ClaimedJob/mayBeWritten``)
///   and the manager deals with the file (see ``PartialPaths``).
///
/// The rows are ``JobRecord`` values: the whole job as the store keeps it.
package protocol JobStore: AnyObject, Sendable {
    // MARK: Owner

    /// The owner this store instance acts for, taken (with whatever proves it alive) on
    /// first use.
    func ownerToken() throws(DownloadError) -> Int64

    // MARK: Submitting and claiming

    /// Claims `job` for this owner, to run now: inserts it, or takes over the row with its
    /// ID unless another live owner holds it. Ordered after this store's earlier writes.
    ///
    /// An unfinished row for the same URL and partial file keeps its committed bytes; a
    /// completed one for the same URL, file, checksum and size keeps its completed file's
    /// details, so the transfer can revalidate it (unless `force`).
    ///
    /// The job keeps the ID ``JobIdentity`` gives it against the row its record's ID
    /// names, decided in the same transaction; the claim's record carries it.
    func claim(_ job: JobRecord, force: Bool) async throws(DownloadError) -> JobClaim

    /// Adds (or takes over) many jobs at once, all or nothing, queued for this owner, and
    /// claims up to `limit` queued jobs for it in the same call, by the rules of
    /// ``claimQueued(limit:)``: the caller runs those at once, from what it holds in
    /// memory, instead of reading them back. The rest wait for ``claimQueued(limit:)``
    /// (here or, for a shared store, in any owner). A store that keeps jobs per owner (the
    /// journal) claims the submitted jobs themselves, highest priority first; a shared
    /// queue claims whatever its order puts first, which may be another submitter's.
    /// `forcing` lists the IDs whose completed files are not to be revalidated. Jobs other
    /// live owners hold are left to them and returned. Each job keeps the ID
    /// ``JobIdentity`` gives it against the rows there and the jobs before it in `jobs`;
    /// those renamed so are listed in ``SubmittedJobs/renamed``.
    func submit(_ jobs: [JobRecord], forcing: Set<String>, claimingUpTo limit: Int) async throws(DownloadError)
        -> SubmittedJobs

    /// Queues for this owner every unfinished job no other live owner holds (those a
    /// person paused too, unless `keepingPaused`); returns how many, and the jobs other
    /// owners hold (asking their holders to resume those they have paused).
    func adoptUnfinished(keepingPaused: Bool) async throws(DownloadError) -> (count: Int, attachments: [JobAttachment])

    /// Claims up to `limit` queued jobs this owner may run, by priority (highest first)
    /// then age: free ones, and those of dead owners (taken over).
    func claimQueued(limit: Int) async throws(DownloadError) -> [ClaimedJob]

    // MARK: Coordination

    /// Commands other processes left for jobs this owner holds.
    func commands() async throws(DownloadError) -> [(id: DownloadID, command: JobLifecycle.Command)]

    /// The rows of `ids` that still exist, and the live owners other than this one, for
    /// following jobs other owners run.
    func watch(_ ids: [DownloadID]) async throws(DownloadError) -> JobWatch

    /// Applies `command` to job `id` directly when no live owner holds it, else leaves it
    /// for its holder (who hears of it through ``commands()``). Returns whether it applied
    /// directly: a job cancelled so has its partial file deleted by the caller, as the
    /// holder deletes it when it acts on the command.
    @discardableResult
    func leave(_ command: JobLifecycle.Command, for id: DownloadID) async throws(DownloadError) -> Bool

    /// When to look again, and which jobs this owner lost: one stream per store, for its
    /// manager. It ends at ``close()``.
    var signals: AsyncStream<StoreSignal> { get }

    // MARK: Fenced fire-and-forget writes

    /// Job `id` runs now.
    func recordStarted(_ id: DownloadID)
    /// Job `id` is in `change`'s state now, with the error that put it there, if any.
    func recordState(_ id: DownloadID, _ change: StateChange, errorCode: String?, error: String?)
    /// Job `id` failed with `error`. A store may decide to try it again later (the shared
    /// queue's retries with backoff); the journal records it as failed.
    func recordFailed(_ id: DownloadID, _ error: DownloadError)
    /// Job `id` completed: `bytes` bytes, `transferred` of them over the network in this
    /// run (the rest were resumed), or `unchanged` (a `304`: nothing fetched), saved at
    /// `path` (a file destination), from `finalURL`; `file` describes it for
    /// revalidation, when it had a validator. Gives up its ownership.
    func recordCompleted(
        _ id: DownloadID, bytes: Int64, transferred: Int64, unchanged: Bool, finalURL: String, path: String?,
        file: CompletedFile?)
    /// The first `bytes` bytes of job `id`'s partial file are on stable storage.
    func recordCheckpoint(
        _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?)
    /// Job `id` has made `attempts` retries.
    func recordAttempt(_ id: DownloadID, _ attempts: Int)
    /// Job `id`'s content is fetched from `location` now (`nil`: from its URL), with
    /// `mirrors`: a refreshed signed URL, or addresses a person changed.
    func recordSources(_ id: DownloadID, location: URL?, mirrors: [URL])
    /// Clears `command` once it has been acted on; a newer command left meanwhile stays.
    func clearCommand(_ command: JobLifecycle.Command, for id: DownloadID)
    /// Gives up every unfinished job this owner holds; running ones become paused (the
    /// journal) or available again (the shared queue), their partial files kept.
    func release()

    // MARK: Completion

    /// Asks whether this owner still holds job `id`, whose file (or object) of `bytes`
    /// bytes is durable and about to go into place. Refused, the transfer leaves its file
    /// where it is (``DownloadError/Code/runningElsewhere``, most often).
    ///
    /// Every transfer that ends with a file or an object to put into place asks, after its
    /// content is durable and before the rename (or the upload's completion), so that a
    /// run that lost its job never puts its file over a newer run's. It asks on the I/O
    /// pool, in the same hop as the `fsync`: the call never blocks, and answers at once
    /// when the store knows (the file is then renamed in that hop), or with a wait for the
    /// answer (``CompletionConfirmation/pending(_:)``, awaited off the pool, the rename a
    /// hop of its own). How a store knows is its own:
    /// - the shared queue, whose live workers can lose a job (a lease that expired),
    ///   refuses at once a job whose lease it knows is gone, and otherwise records the
    ///   completion, fenced on the lease, in one statement with the others that arrive
    ///   meanwhile: its answer is that statement's;
    /// - the journal, whose owners the kernel proves alive and who lose a job only by
    ///   dying or giving it up, answers at once from the jobs this owner claimed and has
    ///   not ended, given back or been refused a write about; its completion is written by
    ///   ``recordCompleted(_:bytes:transferred:unchanged:finalURL:path:file:)``, fenced on
    ///   the owner as every write is.
    func confirmCompletion(_ id: DownloadID, bytes: Int64) -> CompletionConfirmation

    /// Waits until every write made before this call is durable.
    func flush() async
    /// Flushes, then stops whatever the store runs for this manager and ends ``signals``.
    /// Called once, at shutdown.
    func close() async
}

/// What ``JobStore/confirmCompletion(_:bytes:)`` answers: at once, or once a wait is over
/// (as a future may be fulfilled already).
package enum CompletionConfirmation: Sendable {
    /// This owner holds the job: its file may go into place.
    case confirmed
    /// The store cannot confirm the job as this owner's (another owner took it over, most
    /// often): the file stays where it is.
    case refused(DownloadError)
    /// The answer is the outcome of `answer`, awaited off the I/O pool: it returns when
    /// the job is confirmed and throws when it is refused (the shared queue's statement).
    case pending(@Sendable () async throws(DownloadError) -> Void)

    /// Waits for the answer, if it is not known yet; throws a refusal.
    package func answer() async throws(DownloadError) {
        switch self {
        case .confirmed: return
        case .refused(let error): throw error
        case .pending(let answer): try await answer()
        }
    }
}

/// The states ``JobStore/recordState(_:_:errorCode:error:)`` records: those that no write of
/// their own records (a start is ``JobStore/recordStarted(_:)``, a completion
/// ``JobStore/recordCompleted(_:bytes:transferred:unchanged:finalURL:path:file:)``).
package enum StateChange: String, Sendable, CaseIterable {
    /// Queued behind the owner's slots again (its host answered again, a person resumed it).
    case queued
    /// Waiting for its host to answer.
    case waiting
    /// Stopped by a person, a shutdown or a full disk; its partial file is kept.
    case paused
    /// Cancelled or evicted.
    case cancelled
    /// Failed for good.
    case failed

    /// The job's state once the change is recorded.
    package var state: JobState {
        switch self {
        case .queued: .queued
        case .waiting: .waiting
        case .paused: .paused
        case .cancelled: .cancelled
        case .failed: .failed
        }
    }
}

/// What submitting jobs did (see ``JobStore/submit(_:forcing:claimingUpTo:)``).
package struct SubmittedJobs: Sendable {
    /// The jobs claimed for this owner in the same call, to run now.
    package var claimed: [ClaimedJob] = []
    /// The submitted jobs other live owners hold, left to them.
    package var attachments: [JobAttachment] = []
    /// The submitted jobs kept under another ID than their record's, by their index in
    /// the submission: a URL that names a download to another destination (see
    /// ``JobIdentity``).
    package var renamed: [(index: Int, id: String)] = []

    package init(claimed: [ClaimedJob] = [], attachments: [JobAttachment] = [], renamed: [(index: Int, id: String)] = []) {
        self.claimed = claimed
        self.attachments = attachments
        self.renamed = renamed
    }
}

/// What claiming one job found.
package enum JobClaim: Sendable {
    /// The job is this owner's now.
    case claimed(ClaimedJob)
    /// Another live owner holds the job.
    case heldElsewhere(JobAttachment)

    /// The ID the store keeps the job under (see ``JobIdentity``).
    package var id: DownloadID {
        switch self {
        case .claimed(let claimed): claimed.id
        case .heldElsewhere(let attachment): attachment.id
        }
    }
}

/// A job this owner claimed, with what the store knew of its files.
package struct ClaimedJob: Sendable {
    /// The row as claimed.
    package var record: JobRecord
    /// What the store knew of the job's partial or completed file; `nil` when it starts
    /// from nothing.
    package var progress: StoredProgress?
    /// The job was taken over from an owner that may still be alive and writing its
    /// partial file (a lease that expired: the owner may be stopped, not dead). Before
    /// resuming from that file, the manager gives it a file of its own
    /// (``PartialPaths/detachFromPreviousWriter()``).
    package var mayBeWritten: Bool = false

    package init(record: JobRecord, progress: StoredProgress?, mayBeWritten: Bool = false) {
        self.record = record
        self.progress = progress
        self.mayBeWritten = mayBeWritten
    }

    package var id: DownloadID { DownloadID(record.id) }
}

/// What a store knew of a job's files when this owner claimed it: a store's value, which
/// the transfer turns into its resume plan.
package struct StoredProgress: Sendable, Hashable {
    /// Bytes of the partial file known to be on stable storage.
    package var committed: Int64
    /// The machine boot during which they were recorded.
    package var bootID: String?
    /// The completed file of an earlier run of the same download, to revalidate instead
    /// of downloading again while it is unchanged.
    package var completedFile: CompletedFile?

    package init(committed: Int64, bootID: String?, completedFile: CompletedFile? = nil) {
        self.committed = committed
        self.bootID = bootID
        self.completedFile = completedFile
    }

    /// The progress `record` holds.
    package init(_ record: JobRecord) {
        self.init(committed: record.bytesCommitted, bootID: record.bootID, completedFile: record.completedFile())
    }

    /// How much of a partial file of `length` bytes the transfer trusts, by the rule of
    /// ``TransferOperation/JournaledProgress/trustedLength(of:currentBoot:)``.
    package func trustedLength(of length: Int64, currentBoot: String?) -> Int64 {
        TransferOperation.JournaledProgress(self).trustedLength(of: length, currentBoot: currentBoot)
    }
}

/// A job another live owner holds, which this one follows from the store.
package struct JobAttachment: Sendable {
    package var id: DownloadID
    /// The holder's owner token.
    package var holder: Int64
    package var owner: JournalOwner
    /// The row as it was found.
    package var record: JobRecord

    package init(id: DownloadID, holder: Int64, owner: JournalOwner, record: JobRecord) {
        self.id = id
        self.holder = holder
        self.owner = owner
        self.record = record
    }
}

/// What ``JobStore/watch(_:)`` found: the rows that still exist, and the live owners
/// other than the store's own.
package struct JobWatch: Sendable {
    package var rows: [DownloadID: JobRecord]
    package var live: [Int64: JournalOwner]

    package init(rows: [DownloadID: JobRecord], live: [Int64: JournalOwner]) {
        self.rows = rows
        self.live = live
    }
}

/// What a store tells its manager.
package enum StoreSignal: Sendable, Equatable {
    /// Look again: there may be work to claim, commands, or followed jobs that changed.
    case wake
    /// This owner no longer holds these jobs (a fenced write was refused, a lease was
    /// lost): stop them, keeping their partial files.
    case lost([DownloadID])
}
