import Foundation

/// The manager's record of one active download. Lives inside the manager actor.
final class Job {
    enum Phase {
        case queued
        case running(Task<Void, Never>)
        case paused
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
    /// `host:port`, the key of the per-host cap.
    let hostKey: String
    var phase: Phase = .queued
    var stopIntent: StopIntent?
    /// Bumped at each start, so a late report from an old transfer is ignored.
    var generation = 0
    /// When it last started, for `replaceOldest`.
    var startOrder: UInt64 = 0
    /// Handles that still want the result.
    var subscribers: Set<UInt64> = []

    init(core: JobCore, request: DownloadRequest, paths: PartialPaths?, hostKey: String) {
        self.core = core
        self.request = request
        self.paths = paths
        self.hostKey = hostKey
    }

    var id: DownloadID { request.id }

    var isRunning: Bool {
        if case .running = phase { return true }
        return false
    }
}
