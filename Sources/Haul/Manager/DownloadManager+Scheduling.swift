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

    /// Tells the scheduler what happened, and carries out what it decides (see
    /// ``SchedulerMachine``).
    func schedule(_ event: SchedulerMachine.Event) {
        for action in scheduler.handle(event) {
            switch action {
            case .start(let id, let connections):
                guard let job = jobs[id], job.lifecycle.phase == .queued else {
                    // Gone meanwhile (its end was recorded first): the slot is free again.
                    schedule(.transferEnded(id))
                    continue
                }
                perform(job.lifecycle.start(), for: job, connections: connections)
            case .evict(let id):
                if let job = jobs[id] { stop(job, intent: .cancel(.evicted)) }
            case .admit(let limit):
                admissionsAsked += 1
                admissionRequests.yield(limit)
                startBackgroundWork()
            }
        }
        checkIdle()
    }

    /// Carries out what the job's lifecycle asked for; `outcome` is the transfer's, when
    /// it has just ended.
    /// `connections` is what the scheduler granted a transfer it starts.
    func perform(
        _ actions: [JobLifecycle.Action], for job: Job, outcome: TransferOutcome? = nil, connections: Int = 1
    ) {
        for action in actions {
            switch action {
            case .startTransfer:
                startTransfer(job, connections: connections)
            case .cancelTransfer:
                job.task?.cancel()
                schedule(.stopping(job.id))
            case .dequeue:
                schedule(.withdrawn(job.id))
            case .enqueue(let journaled):
                job.core.emit(.queued)
                if journaled { record(job, .queued) }
                schedule(
                    .submitted(
                        job.id, host: job.endpoint.key, priority: job.request.priority,
                        connections: job.request.connections))
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

    func startTransfer(_ job: Job, connections: Int) {
        if let moved = job.core.location { job.request.location = moved }
        job.generation += 1
        let generation = job.generation
        let checkpointer = store.flatMap { store in
            job.hasRow ? Checkpointer(id: job.id, store: store, meter: job.core.meter) : nil
        }
        // A download into memory has no row: a write for it would be refused, and a refused
        // write tells the manager that another process holds the job (it stops it).
        if job.hasRow { store?.recordStarted(job.id) }
        let operation = TransferOperation(
            TransferOperation.Download(
                request: job.request, paths: job.paths, endpoint: job.endpoint, core: job.core,
                checkpointer: checkpointer, journaled: job.journaled, connections: connections),
            environment: TransferOperation.Environment(
                clients: clients, threadPool: threadPool, directorySync: directorySync, configuration: configuration,
                logger: logger, reachability: reachability, objectStore: objectStore, cache: cache))
        job.journaled = nil
        rateLimiter.began(
            job.id, host: job.endpoint.key,
            limit: job.request.maxBytesPerSecond ?? configuration.maxBytesPerSecondPerDownload)
        job.core.emit(.started)
        let id = job.id
        // A stream's transfer records it segment by segment (see `HLSJobTransfer`).
        let stream =
            job.request.stream == nil
            ? nil
            : HLSJobTransfer(operation, manager: self, eventLoopGroup: resources.eventLoopGroup, rateLimiter: rateLimiter)
        job.task = Task {
            let outcome = if let stream { await stream.run() } else { await operation.run() }
            self.transferEnded(id: id, generation: generation, outcome: outcome)
        }
    }

    func transferEnded(id: DownloadID, generation: Int, outcome: TransferOutcome) {
        guard let job = jobs[id], job.generation == generation, job.isRunning else { return }
        rateLimiter.ended(id)
        job.task = nil
        let ending: JobLifecycle.Ending =
            switch outcome {
            case .completed: .completed
            case .failed: .failed
            case .interrupted: .interrupted
            case .waitingForNetwork: .waitingForNetwork
            }
        // What the lifecycle does first (a requeue goes to the back of its line), then the
        // slot is free.
        perform(job.lifecycle.transferEnded(ending), for: job, outcome: outcome)
        if let answer = job.core.takeHostAnswer() { schedule(.answered(host: job.endpoint.key, answer)) }
        schedule(.transferEnded(id))
    }

    func stop(_ job: Job, intent: JobLifecycle.StopIntent) {
        perform(job.lifecycle.stop(intent), for: job)
        checkIdle()
    }

    func resume(_ job: Job) {
        perform(job.lifecycle.resume(), for: job)
    }

    func setPriority(_ priority: DownloadPriority, of job: Job) {
        guard job.request.priority != priority else { return }
        job.request.priority = priority
        if job.lifecycle.phase == .queued { schedule(.priorityChanged(job.id, priority)) }
    }

    // MARK: - Network loss

    func hostRestored(_ key: String) {
        for job in jobs.values where job.endpoint.key == key {
            perform(job.lifecycle.hostRestored(), for: job)
        }
    }

    // MARK: - Finishing

    func finishCancelled(_ job: Job, reason: DownloadError.CancellationReason, wasPaused: Bool = false) {
        let end = JobLifecycle.cancelledEnd(reason, wasPaused: wasPaused, whenAbandoned: job.request.whenAbandoned)
        if !end.keepsPartial, let paths = job.paths {
            PartialFile.remove(paths)
            if paths.object != nil, let store = objectStore {
                // A cancelled object's upload is aborted: its parts never linger in the bucket.
                let pool = threadPool
                let id = job.id
                uploadAborts[id] = Task {
                    await ObjectUpload.abandon(recordPath: paths.uploadRecord, client: store, threadPool: pool)
                    self.uploadAborts[id] = nil
                }
            }
        }
        record(job, end.change, errorCode: end.errorCode, error: end.error)
        finish(job, .failure(.cancelled(reason, id: job.id)), journaled: true)
    }

    /// Ends `job` with `outcome`, recording it in the journal unless `journaled` says it
    /// already is (or, for a download another process ran, is that process's to record).
    func finish(
        _ job: Job, _ outcome: Result<DownloadResult, DownloadError>, journaled: Bool = false, file: CompletedFile? = nil
    ) {
        job.lifecycle.finish()
        jobs[job.id] = nil
        receivedByEnded = Self.saturatingSum(receivedByEnded, job.core.meter.bytesTransferred)
        let limit = job.core.currentLimit
        rateLimiter.forget(job.id)
        if let paths = job.paths, jobsByPath[paths.partial] == job.id { jobsByPath[paths.partial] = nil }
        if scheduler.isQueued(job.id) { schedule(.withdrawn(job.id)) }
        switch outcome {
        case .success(let result):
            finished.completed += 1
            if result.isUnchanged { finished.unchanged += 1 }
            finished.completedBytes = Self.saturatingSum(finished.completedBytes, result.byteCount)
            finished.totalBytes = Self.saturatingSum(finished.totalBytes ?? 0, result.byteCount)
            if !journaled, job.hasRow {
                store?.recordCompleted(
                    job.id, bytes: result.byteCount, transferred: result.bytesTransferred, unchanged: result.isUnchanged,
                    finalURL: result.finalURL.absoluteString, path: result.savedAt, file: file)
            }
        case .failure(let error):
            finished.failed += 1
            if !journaled, job.hasRow {
                // In the same words as the event (JobCore.emit).
                let error = error.naming(download: job.request.url)
                switch JobLifecycle.failedEnd(error) {
                case .paused(let code, let message): record(job, .paused, errorCode: code, error: message)
                case .failed: store?.recordFailed(job.id, error)
                }
            }
        }
        job.core.finish(outcome, limit: limit)
        checkIdle()
    }

    func record(_ job: Job, _ change: StateChange, errorCode: String? = nil, error: String? = nil) {
        guard job.hasRow else { return }
        store?.recordState(job.id, change, errorCode: errorCode, error: error)
    }
}
