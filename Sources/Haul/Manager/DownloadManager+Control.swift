package import Foundation

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
    /// Fetch the content from `first` in place of the URL from now on (a fresh signed URL,
    /// say), with `mirrors` as its mirrors (`nil`: those it has). The download keeps its ID
    /// and its partial file; a running one stops and goes on from the new addresses where
    /// it stood (they must serve the same content: its validator is checked).
    case sources(first: URL, mirrors: [URL]?)
}

/// What a long-running service (`haul serve`, in `HaulServer`) needs of the manager to
/// control downloads by ID: their live status, the slot limits, and the changes it can only
/// make in memory. The service applies the same changes to the rows only in the journal
/// itself (`DownloadManager+Service.swift` there).
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
    package var limits: (slots: Int, perHost: Int, connections: Int) {
        (scheduler.limits.slots, scheduler.limits.perHost, scheduler.limits.connectionsGranted)
    }

    /// Changes how many downloads run at once, in all and per host, without a restart:
    /// more slots start queued downloads at once; fewer let running ones finish.
    package func setLimits(slots: Int?, perHost: Int?, connections: Int? = nil) {
        schedule(.limitsChanged(slots: slots, perHost: perHost, connections: connections))
    }

    /// Applies `action` to those of `ids` this manager holds in memory; returns those it
    /// changed, and those it left to the caller: not in memory, or followed from another
    /// process (a cancel). A pause returns once the transfers have stopped and their partial
    /// files are checkpointed, so what the store says next is true.
    package func applyInMemory(_ action: ServiceAction, to ids: [DownloadID]) async
        -> (changed: [DownloadID], elsewhere: [DownloadID])
    {
        var changed: [DownloadID] = []
        var elsewhere: [DownloadID] = []
        var stopping: [Task<Void, Never>] = []
        var restarting: [Job] = []
        for id in ids {
            guard let job = jobs[id] else {
                elsewhere.append(id)
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
                    elsewhere.append(id)
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
            case .sources(let first, let mirrors):
                guard job.lifecycle.phase != .finished, job.following == nil else {
                    elsewhere.append(id)
                    continue
                }
                let location = first == job.request.url ? nil : first
                job.request.location = location
                job.core.location = location
                if let mirrors { job.request.mirrors = mirrors }
                if job.hasRow { store?.recordSources(id, location: location, mirrors: job.request.mirrors) }
                // A running transfer stops (its partial checkpointed) and starts again from
                // the new addresses.
                if job.isRunning, let task = job.task {
                    stopping.append(task)
                    stop(job, intent: .pause)
                    restarting.append(job)
                }
                changed.append(id)
            }
        }
        for task in stopping { await task.value }
        for job in restarting { resume(job) }
        return (changed, elsewhere)
    }

    /// Cancels those of `ids` this manager runs or queues (not those it follows), after any
    /// admission under way, and returns once their transfers have stopped and every write
    /// they made is in the store: their rows can then be deleted.
    package func stopForRemoval(_ ids: [DownloadID]) async {
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
    }

    /// Those of `ids` this manager holds in memory.
    package func inMemory(_ ids: [DownloadID]) -> [DownloadID] {
        ids.filter { jobs[$0] != nil }
    }
}
