package import Haul

/// The controls of a long-running service (`haul serve`), which owns every job of its
/// journal: they act on a download wherever it is, in the manager's memory (through its
/// control API, `DownloadManager+Control.swift` in `Haul`) or only in the journal (queued
/// and not yet admitted, or finished).
extension DownloadManager {
    /// Applies `action` to each of `ids`; returns those it changed. IDs it does not know,
    /// and downloads already in a state the action does not change, are left out.
    package func apply(_ action: ServiceAction, to ids: [DownloadID]) async throws(DownloadError) -> [DownloadID] {
        let me = try ownerToken()
        var (changed, rest) = await applyInMemory(action, to: ids)
        if let journal, !changed.isEmpty {
            // The priority and speed limit of a job in memory are also the journal's, for
            // lists and restarts.
            let inMemory = changed
            switch action {
            case .priority(let priority):
                _ = try await threadPool.perform { () throws(DownloadError) in
                    try journal.setPriority(priority, of: inMemory, me: me)
                }
            case .rateLimit(let rate):
                _ = try await threadPool.perform { () throws(DownloadError) in
                    try journal.setRateLimit(rate, of: inMemory, me: me)
                }
            default:
                break
            }
        }
        // Rows only in the journal. One an admission is claiming right now is in memory once
        // it is done: wait for it, then act there.
        guard !rest.isEmpty, let journal else { return changed }
        await flushJournal()
        let pending = rest
        let inJournal = try await threadPool.perform { () throws(DownloadError) -> [DownloadID] in
            switch action {
            case .pause: return try journal.pauseQueued(pending)
            case .resume: return try journal.requeue(pending, from: [.paused], session: me, retrying: false)
            case .retry:
                return try journal.requeue(pending, from: [.paused, .failed, .cancelled], session: me, retrying: true)
            case .priority(let priority): return try journal.setPriority(priority, of: pending, me: me)
            case .rateLimit(let rate): return try journal.setRateLimit(rate, of: pending, me: me)
            case .sources(let first, let mirrors): return try journal.setSources(first, mirrors: mirrors, of: pending, me: me)
            case .cancel:
                var cancelled: [DownloadID] = []
                for id in pending {
                    let result = try journal.cancel(id)
                    if result == .applied || result == .requested { cancelled.append(id) }
                }
                return cancelled
            }
        }
        changed += inJournal
        // A row an admission was claiming meanwhile is in memory once it is done.
        rest.removeAll { inJournal.contains($0) }
        if !rest.isEmpty {
            await admissionFinished()
            let admitted = inMemory(rest)
            if !admitted.isEmpty { changed += try await apply(action, to: admitted) }
        }
        if action == .resume || action == .retry, !inJournal.isEmpty {
            await admitFromStore()
        }
        return changed
    }

    /// Removes downloads: running and queued ones are cancelled (their partial files
    /// deleted), and their journal rows deleted; with `deletingFiles`, completed files go
    /// too. Returns the IDs it removed.
    package func remove(_ ids: [DownloadID], deletingFiles: Bool) async throws(DownloadError) -> [DownloadID] {
        let me = try ownerToken()
        await stopForRemoval(ids)
        guard let journal else { return [] }
        return try await threadPool.perform { () throws(DownloadError) in
            try journal.remove(ids, deletingFiles: deletingFiles, me: me)
        }
    }
}
