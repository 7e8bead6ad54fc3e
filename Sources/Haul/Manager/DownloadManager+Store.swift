import Logging

/// What the manager does with its ``JobStore`` beyond calling it: listening to its
/// signals, and turning a claim into a job ready to run (its resume plan, and its partial
/// file taken from an owner that may still write it).
extension DownloadManager {
    /// Acts on the store's signals until it closes: looks again on ``StoreSignal/wake``,
    /// stops the jobs it lost on ``StoreSignal/lost(_:)``.
    static func listen(to store: any JobStore, manager: DownloadManager) -> Task<Void, Never> {
        Task { [weak manager] in
            for await signal in store.signals {
                guard let manager else { return }
                switch signal {
                case .wake: await manager.pollJournal()
                case .lost(let ids): await manager.relinquish(ids)
                }
            }
        }
    }

    /// Gets `claimed`'s job ready to run from its partial file: when the job was taken
    /// over from an owner that may still be writing that file, gives this process a copy of
    /// its own (see ``PartialPaths/detachFromPreviousWriter()``). Returns the resume plan.
    func takeUp(_ claimed: ClaimedJob, paths: PartialPaths?) async throws(DownloadError)
        -> TransferOperation.JournaledProgress?
    {
        if claimed.mayBeWritten, let paths {
            let copied = try await threadPool.perform { () throws(DownloadError) in try paths.detachFromPreviousWriter() }
            for path in copied {
                logger.debug("took over a partial file with a copy of it", metadata: ["id": "\(claimed.id)", "path": "\(path)"])
            }
        }
        return claimed.progress.map(TransferOperation.JournaledProgress.init)
    }
}

extension TransferOperation.JournaledProgress {
    /// The resume plan for what a store knew of the job's files.
    init(_ progress: StoredProgress) {
        self.init(committed: progress.committed, bootID: progress.bootID, completedFile: progress.completedFile)
    }
}
