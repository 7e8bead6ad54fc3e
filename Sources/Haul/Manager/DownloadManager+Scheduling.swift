import Foundation
import Logging

/// The scheduler: the queue, slots and per-host caps, the transfer tasks, and the job
/// lifecycle's actions (see ``JobLifecycle``) carried out, down to each download's end.
extension DownloadManager {
    // MARK: - Scheduling

    /// Puts a new job in the queue.
    func enqueue(_ job: Job) {
        perform([.enqueue(record: false)], for: job)
    }

    func schedule() {
        guard !isShutDown else { return }
        while runningCount < slotLimit {
            guard let id = queue.dequeue(where: { hasHostCapacity(for: $0) }), let job = jobs[id] else { break }
            perform(job.lifecycle.start(), for: job)
        }
        if journalMayHaveWork, queue.count < configuration.admissionWindow / 2 {
            Task { await self.admit() }
        }
        checkIdle()
        guard configuration.overflowPolicy == .replaceOldest, runningCount >= slotLimit
        else { return }
        // Make room for every queued download that has no slot being freed for it yet.
        let stopping = jobs.values.filter { $0.isRunning && $0.lifecycle.stopIntent != nil }.count
        var deficit = queue.count - stopping
        let candidates = jobs.values.filter { $0.isRunning && $0.lifecycle.stopIntent == nil }.sorted {
            $0.startOrder < $1.startOrder
        }
        for job in candidates where deficit > 0 {
            stop(job, intent: .cancel(.evicted))
            deficit -= 1
        }
    }

    func hasHostCapacity(for id: DownloadID) -> Bool {
        guard let job = jobs[id] else { return true }
        return hostCounts[job.endpoint.key, default: 0] < perHostLimit
    }

    /// Carries out what the job's lifecycle asked for; `outcome` is the transfer's, when
    /// it has just ended.
    func perform(_ actions: [JobLifecycle.Action], for job: Job, outcome: TransferOutcome? = nil) {
        for action in actions {
            switch action {
            case .startTransfer:
                startTransfer(job)
            case .cancelTransfer:
                job.task?.cancel()
            case .dequeue:
                queue.remove(job.id)
            case .enqueue(let journaled):
                queue.enqueue(job.id, priority: job.request.priority)
                job.core.emit(.queued)
                if journaled { record(job, .queued) }
            case .markPaused:
                job.core.emit(.paused)
                record(job, .paused)
            case .announceRestored:
                job.core.emit(.networkRestored(host: job.endpoint.host))
            case .wait(let hostDown):
                job.core.emit(.networkLost(host: job.endpoint.host))
                record(job, .waiting)
                if hostDown {
                    for other in jobs.values where other.endpoint.key == job.endpoint.key {
                        perform(other.lifecycle.hostDown(), for: other)
                    }
                    Task { await self.reachability.markDown(job.endpoint) }
                }
            case .finishCancelled(let reason, let wasPaused):
                finishCancelled(job, reason: reason, wasPaused: wasPaused)
            case .finishWithOutcome:
                switch outcome {
                case .completed(let result, let file): finish(job, .success(result), file: file)
                case .failed(let error): finish(job, .failure(error))
                case .interrupted, .waitingForNetwork, nil: break
                }
            case .forward(let command):
                forward(job.id, command)
            case .detach(let reason):
                // The other process goes on; its partial file is its business.
                finish(job, .failure(.cancelled(reason, id: job.id)), journaled: true)
            }
        }
    }

    func startTransfer(_ job: Job) {
        job.generation += 1
        startCounter += 1
        job.startOrder = startCounter
        runningCount += 1
        hostCounts[job.endpoint.key, default: 0] += 1
        let generation = job.generation
        let checkpointer = store.flatMap { store in
            job.paths.map { _ in Checkpointer(id: job.id, store: store, meter: job.core.meter) }
        }
        store?.recordStarted(job.id)
        let operation = TransferOperation(
            request: job.request, paths: job.paths, clients: clients, threadPool: threadPool,
            configuration: configuration, core: job.core, logger: logger, checkpointer: checkpointer,
            journaled: job.journaled, reachability: reachability, endpoint: job.endpoint)
        job.journaled = nil
        rateLimiter.began(
            job.id, host: job.endpoint.key,
            limit: job.request.maxBytesPerSecond ?? configuration.maxBytesPerSecondPerDownload)
        job.core.emit(.started)
        let id = job.id
        job.task = Task {
            let outcome = await operation.run()
            self.transferEnded(id: id, generation: generation, outcome: outcome)
        }
    }

    func transferEnded(id: DownloadID, generation: Int, outcome: TransferOutcome) {
        guard let job = jobs[id], job.generation == generation, job.isRunning else { return }
        rateLimiter.ended(id)
        runningCount -= 1
        hostCounts[job.endpoint.key, default: 1] -= 1
        if hostCounts[job.endpoint.key] == 0 { hostCounts[job.endpoint.key] = nil }
        job.task = nil
        let ending: JobLifecycle.Ending =
            switch outcome {
            case .completed: .completed
            case .failed: .failed
            case .interrupted: .interrupted
            case .waitingForNetwork: .waitingForNetwork
            }
        perform(job.lifecycle.transferEnded(ending), for: job, outcome: outcome)
        schedule()
    }

    func stop(_ job: Job, intent: JobLifecycle.StopIntent) {
        perform(job.lifecycle.stop(intent), for: job)
        checkIdle()
    }

    func resume(_ job: Job) {
        let actions = job.lifecycle.resume()
        perform(actions, for: job)
        if actions.contains(where: { if case .enqueue = $0 { true } else { false } }) { schedule() }
    }

    func setPriority(_ priority: DownloadPriority, of job: Job) {
        guard job.request.priority != priority else { return }
        job.request.priority = priority
        if job.lifecycle.phase == .queued {
            queue.reprioritize(job.id, to: priority)
            schedule()
        }
    }

    // MARK: - Network loss

    func hostRestored(_ key: String) {
        for job in jobs.values where job.endpoint.key == key {
            perform(job.lifecycle.hostRestored(), for: job)
        }
        schedule()
    }

    // MARK: - Finishing

    func finishCancelled(_ job: Job, reason: DownloadError.CancellationReason, wasPaused: Bool = false) {
        // Eviction, shutdown and (unless the request says otherwise) abandonment keep the
        // partial so the download can resume later.
        let keepsPartial =
            reason == .evicted || reason == .shutdown
            || (reason == .noLongerWanted && job.request.whenAbandoned == .keepPartial)
        if !keepsPartial, let paths = job.paths { PartialFile.remove(paths) }
        if reason == .shutdown, !wasPaused {
            // Paused by the stop, not by a person: a service resumes it when it starts again.
            record(job, .paused, errorCode: Journal.shutdownCode, error: "stopped with its process")
        } else if reason == .shutdown || (reason == .noLongerWanted && keepsPartial) {
            record(job, .paused)
        } else {
            record(job, .cancelled, errorCode: reason == .evicted ? "evicted" : "cancelled", error: reason.rawValue)
        }
        finish(job, .failure(.cancelled(reason, id: job.id)), journaled: true)
    }

    /// Ends `job` with `outcome`, recording it in the journal unless `journaled` says it
    /// already is (or, for a download another process ran, is that process's to record).
    func finish(
        _ job: Job, _ outcome: Result<DownloadResult, DownloadError>, journaled: Bool = false, file: CompletedFile? = nil
    ) {
        job.lifecycle.finish()
        jobs[job.id] = nil
        let limit = job.core.currentLimit
        rateLimiter.forget(job.id)
        if let paths = job.paths, jobsByPath[paths.partial] == job.id { jobsByPath[paths.partial] = nil }
        queue.remove(job.id)
        switch outcome {
        case .success(let result):
            finished.completed += 1
            finished.completedBytes += result.byteCount
            finished.totalBytes = (finished.totalBytes ?? 0) + result.byteCount
            if !journaled {
                store?.recordCompleted(
                    job.id, bytes: result.byteCount, finalURL: result.finalURL.absoluteString, file: file)
            }
        case .failure(let error):
            finished.failed += 1
            if !journaled {
                // A full disk pauses the job in the journal: `haul resume` continues it.
                if error.code == .diskFull {
                    record(job, .paused, errorCode: error.code.description, error: error.message)
                } else if job.paths != nil {
                    store?.recordFailed(job.id, error)
                }
            }
        }
        job.core.finish(outcome, limit: limit)
        checkIdle()
    }

    func record(_ job: Job, _ state: JobState, errorCode: String? = nil, error: String? = nil) {
        guard job.paths != nil else { return }
        store?.recordState(job.id, state, errorCode: errorCode, error: error)
    }
}
