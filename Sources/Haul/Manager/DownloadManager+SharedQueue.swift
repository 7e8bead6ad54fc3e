/// What a shared-queue worker (`haul worker`, in `HaulPostgres`) needs of the manager: a
/// manager made with the queue's ``JobStore`` admits the jobs it leases through the usual
/// admission, runs them with the usual transfer, retries and verification, and hears
/// from the worker when to look for work and which jobs it no longer holds.
extension DownloadManager {
    /// Starts listening to the store's signals (see ``JobStore/signals``) and looks for
    /// work in it now.
    package func wake() async {
        guard !isShutDown else { return }
        // The first wake starts the polling fallback (and the network watchers).
        startBackgroundWork()
        await admitFromStore()
    }

    /// Stops the downloads of `ids` at once, keeping their partial files: this process no
    /// longer holds them (their leases were lost, or may be about to be), so another one
    /// may run them. Whatever the stop records is the store's to refuse.
    package func relinquish(_ ids: [DownloadID]) {
        for id in ids {
            guard let job = jobs[id], job.following == nil else { continue }
            stop(job, intent: .cancel(.evicted))
        }
    }

    /// The IDs of the downloads this manager runs or has queued.
    package var heldIDs: [DownloadID] {
        jobs.values.filter { $0.following == nil }.map(\.id)
    }
}

extension JobRecord {
    /// The record of `request`, as the manager's admission would make it: the request is
    /// checked, its partial file's path worked out. Throws for a memory destination.
    package static func make(for request: DownloadRequest) throws(DownloadError) -> JobRecord {
        guard let record = JobRecord(request: request, paths: try ValidatedRequest(request).paths) else {
            throw .invalid("\(request.id): a queued download needs a file or directory destination")
        }
        return record
    }
}
