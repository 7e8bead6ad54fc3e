import Foundation

/// The manager's record of one active download. Lives inside the manager actor.
final class Job {
    enum Phase {
        case queued
        case running(Task<Void, Never>)
        case paused
        /// Its host cannot be reached; it queues again when the host answers.
        case waiting
        /// Another live process runs it; this manager follows it from the journal.
        case elsewhere(Following)
    }

    /// What to do when a running transfer has been stopped.
    enum StopIntent: Equatable {
        case pause
        case requeue
        case cancel(DownloadError.CancellationReason)
    }

    let core: JobCore
    var request: DownloadRequest
    let paths: PartialPaths?
    /// The host and port, whose key is that of the per-host cap.
    let endpoint: HostReachability.Endpoint
    var phase: Phase = .queued
    var stopIntent: StopIntent?
    /// Bumped at each start, so a late report from an old transfer is ignored.
    var generation = 0
    /// When it last started, for `replaceOldest`.
    var startOrder: UInt64 = 0
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

    var isRunning: Bool {
        if case .running = phase { return true }
        return false
    }

    /// How another process's run of it is followed, if it is.
    var following: Following? {
        if case .elsewhere(let following) = phase { return following }
        return nil
    }
}
