import Logging

/// What the manager does with its ``JobStore`` beyond calling it: listening to its
/// signals, and turning a claim into a job ready to run (its resume plan, and its partial
/// file taken from an owner that may still write it).
extension DownloadManager {
    /// The loop that acts on the store's signals until the store closes: looks again on
    /// ``StoreSignal/wake``, stops the jobs it lost on ``StoreSignal/lost(_:)``. It does not
    /// keep the manager alive.
    func listening(to store: any JobStore) -> @Sendable () async -> Void {
        { [weak self] in
            for await signal in store.signals {
                guard let self else { return }
                switch signal {
                case .wake: await self.pollJournal()
                case .lost(let ids): await self.relinquish(ids)
                }
            }
        }
    }

    /// Gets `claimed`'s job ready to run: its partial detached first when the claim says
    /// another owner may still write it. Returns what the transfer resumes from.
    func takeUp(_ claimed: ClaimedJob, paths: PartialPaths?) async throws(DownloadError)
        -> TransferOperation.JournaledProgress?
    {
        if claimed.mayBeWritten { try await detachPartial(of: claimed, paths: paths) }
        return claimed.progress.map(TransferOperation.JournaledProgress.init)
    }

    /// Gives a job taken over from an owner that may still be writing its partial file a
    /// copy of its own (see ``PartialPaths/detachFromPreviousWriter()``), on the I/O pool.
    func detachPartial(of claimed: ClaimedJob, paths: PartialPaths?) async throws(DownloadError) {
        guard let paths else { return }
        let copied = try await threadPool.perform { () throws(DownloadError) in try paths.detachFromPreviousWriter() }
        for path in copied {
            logger.debug("took over a partial file with a copy of it", metadata: ["id": "\(claimed.id)", "path": "\(path)"])
        }
    }
}

extension TransferOperation.JournaledProgress {
    /// The resume plan for what a store knew of the job's files.
    init(_ progress: StoredProgress) {
        self.init(committed: progress.committed, bootID: progress.bootID, completedFile: progress.completedFile)
    }
}
