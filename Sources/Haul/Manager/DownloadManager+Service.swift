import Foundation

/// Where a download the manager holds in memory stands right now: fresher than its
/// journal row, whose bytes are only those already made durable.
package struct LiveStatus: Sendable, Equatable {
    package var state: JobState
    package var progress: DownloadProgress
    /// Connections it transfers over now (0 unless running).
    package var connections: Int
}

/// A change the service applies to downloads by ID.
package enum ServiceAction: Sendable, Equatable {
    /// Pause: running or queued ones stop, keeping their partial files.
    case pause
    /// Resume paused ones.
    case resume
    /// Queue failed, cancelled or paused ones again, with fresh attempts.
    case retry
    /// Cancel unfinished ones, deleting their partial files; the rows stay, as cancelled.
    case cancel
    case priority(DownloadPriority)
    /// Set the download's own speed limit, in bytes per second (`nil`: none).
    case rateLimit(Int?)
}

/// The controls of a long-running service (`haul serve`), which owns every job of its
/// journal: they act on a download wherever it is, in this manager's memory or only in the
/// journal (queued and not yet admitted, or finished).
extension DownloadManager {
    /// What the manager knows now of those of `ids` it holds in memory.
    package func liveStatus(of ids: [DownloadID]) -> [DownloadID: LiveStatus] {
        var statuses: [DownloadID: LiveStatus] = [:]
        for id in ids {
            if let job = jobs[id], let status = liveStatus(of: job) { statuses[id] = status }
        }
        return statuses
    }

    func liveStatus(of job: Job) -> LiveStatus? {
        let state: JobState
        switch job.lifecycle.phase {
        case .queued: state = .queued
        case .running:
            // Pausing: the transfer is stopping, with its partial file kept.
            if case .pause = job.lifecycle.stopIntent { state = .paused } else { state = .running }
        case .paused: state = .paused
        case .waiting: state = .waiting
        case .elsewhere(let following): state = following.isPaused ? .paused : .running
        case .finished: return nil
        }
        var progress = job.core.meter.snapshot()
        if state != .running { progress.bytesPerSecond = 0 }
        return LiveStatus(
            state: state, progress: progress, connections: state == .running ? max(1, job.core.connections) : 0)
    }

    /// The slot limits in force: the configuration's, until ``setLimits(slots:perHost:)``.
    package var limits: (slots: Int, perHost: Int) { (scheduler.limits.slots, scheduler.limits.perHost) }

    /// Changes how many downloads run at once, in all and per host, without a restart:
    /// more slots start queued downloads at once; fewer let running ones finish.
    package func setLimits(slots: Int?, perHost: Int?) {
        schedule(.limitsChanged(slots: slots, perHost: perHost))
    }

    /// Applies `action` to each of `ids`; returns those it changed. IDs it does not know,
    /// and downloads already in a state the action does not change, are left out.
    package func apply(_ action: ServiceAction, to ids: [DownloadID]) async throws(DownloadError) -> [DownloadID] {
        let me = try ownerToken()
        var changed: [DownloadID] = []
        var rest: [DownloadID] = []
        var stopping: [Task<Void, Never>] = []
        for id in ids {
            guard let job = jobs[id] else {
                rest.append(id)
                continue
            }
            let before = job.lifecycle.phase
            switch action {
            case .pause:
                if job.isRunning, job.following == nil, let task = job.task { stopping.append(task) }
                stop(job, intent: .pause)
                if job.lifecycle.phase != before || job.lifecycle.stopIntent != nil { changed.append(id) }
            case .resume, .retry:
                resume(job)
                if job.lifecycle.phase != before { changed.append(id) }
            case .cancel:
                guard job.following == nil else {
                    rest.append(id)
                    continue
                }
                stop(job, intent: .cancel(.userRequested))
                changed.append(id)
            case .priority(let priority):
                setPriority(priority, of: job)
                changed.append(id)
            case .rateLimit(let rate):
                guard job.lifecycle.phase != .finished else { continue }
                job.request.maxBytesPerSecond = rate
                if job.task != nil {
                    rateLimiter.setLimit(rate ?? configuration.maxBytesPerSecondPerDownload, for: id)
                }
                changed.append(id)
            }
        }
        // A pause returns once the transfers have stopped and their partial files are
        // checkpointed, so what the journal says next is true.
        for task in stopping { await task.value }
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
        await store?.flush()
        let pending = rest
        let inJournal = try await threadPool.perform { () throws(DownloadError) -> [DownloadID] in
            switch action {
            case .pause: return try journal.pauseQueued(pending)
            case .resume: return try journal.requeue(pending, from: [.paused], session: me, retrying: false)
            case .retry:
                return try journal.requeue(pending, from: [.paused, .failed, .cancelled], session: me, retrying: true)
            case .priority(let priority): return try journal.setPriority(priority, of: pending, me: me)
            case .rateLimit(let rate): return try journal.setRateLimit(rate, of: pending, me: me)
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
        let missed = rest.filter { !inJournal.contains($0) }
        if !missed.isEmpty {
            await admissionFinished()
            let admitted = missed.filter { jobs[$0] != nil }
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
        // A row being admitted is stopped in memory, not deleted under the admission.
        await admissionFinished()
        var stopping: [Task<Void, Never>] = []
        for id in ids {
            guard let job = jobs[id], job.following == nil else { continue }
            if job.isRunning, let task = job.task { stopping.append(task) }
            stop(job, intent: .cancel(.userRequested))
        }
        // Their last journal writes land before their rows go.
        for task in stopping { await task.value }
        await store?.flush()
        guard let journal else { return [] }
        return try await threadPool.perform { () throws(DownloadError) in
            try journal.remove(ids, deletingFiles: deletingFiles, me: me)
        }
    }
}
