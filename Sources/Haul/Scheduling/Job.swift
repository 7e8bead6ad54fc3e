import Foundation

/// The manager's record of one active download. Lives inside the manager actor.
final class Job {
    let core: JobCore
    var request: DownloadRequest
    let paths: PartialPaths?
    /// Whether the job has a row in the manager's store: a file or object destination,
    /// journaled (an HLS stream's segments fetched through the manager are not,
    /// ``DownloadRequest/isJournaled``). Nothing is recorded for a job without one: a write
    /// for a row that is not there would be refused, and a refused write tells the manager
    /// that another process holds the job (it stops it).
    var hasRow: Bool { paths != nil && request.isJournaled }
    /// The host and port, whose key is that of the per-host cap.
    let endpoint: HostReachability.Endpoint
    /// Where it stands (see ``JobLifecycle``).
    var lifecycle = JobLifecycle()
    /// The transfer's task while it runs.
    var task: Task<Void, Never>?
    /// Bumped at each start, so a late report from an old transfer is ignored.
    var generation = 0
    /// Handles that still want the result.
    var subscribers: Set<UInt64> = []
    /// Why a followed download, rebuilt from the journal, cannot be taken over here: its
    /// credentials are neither in the journal nor in this manager's vault.
    var credentialsError: DownloadError?
    /// What the journal knew of the partial file before this process started the job.
    var journaled: TransferOperation.JournaledProgress?

    init(core: JobCore, request: DownloadRequest, paths: PartialPaths?, endpoint: HostReachability.Endpoint) {
        self.core = core
        self.request = request
        self.paths = paths
        self.endpoint = endpoint
    }

    var id: DownloadID { request.id }

    var isRunning: Bool { lifecycle.isRunning }

    /// How another process's run of it is followed, if it is.
    var following: Following? {
        if case .elsewhere(let following) = lifecycle.phase { return following }
        return nil
    }
}
