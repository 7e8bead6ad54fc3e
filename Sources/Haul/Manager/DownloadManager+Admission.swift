import Foundation
import Logging

/// Admission from the journal: this manager's owner token, claims of single downloads,
/// and queued jobs moved into memory a window at a time.
extension DownloadManager {
    /// This manager's owner token, taken on first use.
    package func ownerToken() throws(DownloadError) -> Int64 {
        guard let store else { return 0 }
        if me == 0 { me = try store.ownerToken() }
        return me
    }

    /// Tells the scheduler the store may hold work for this manager, and returns once the
    /// admission that starts (if any) has brought it into memory.
    package func admitFromStore() async {
        schedule(.storeMayHaveWork)
        await admissionFinished()
    }

    /// Returns once the admissions asked for so far have ended (at once when none is under
    /// way), or the manager has shut down.
    package func admissionFinished() async {
        let asked = admissionsAsked
        guard admissionsEnded < asked, !isShutDown, !admissionLoopEnded else { return }
        await withCheckedContinuation { continuation in
            admissionWaiters.append((after: asked, continuation: continuation))
        }
    }

    /// The admission loop, a part of the background work (held by ``run()`` or started on
    /// first use): carries out the scheduler's ``SchedulerMachine/Action/admit(limit:)``
    /// actions in turn, until the manager shuts down (its requests end) or the work is
    /// cancelled (which cancels the admission under way, too).
    ///
    /// When it ends, so does every wait for an admission: a ``run()`` cancelled while its
    /// journal listener waits in ``admitFromStore()`` for an admission the loop will no
    /// longer carry out would otherwise wait for its own shutdown, which comes after it.
    func admitting() -> @Sendable () async -> Void {
        let requests = admissionStream
        return { [weak self] in
            for await limit in requests {
                guard let self else { return }
                await self.admit(limit: limit)
            }
            await self?.admissionLoopStopped()
        }
    }

    /// The admission loop has ended, or the manager has shut down: the admissions asked
    /// for and not carried out never will be, so their waiters go on, and later ones
    /// do not wait.
    func admissionLoopStopped() {
        admissionLoopEnded = true
        let waiters = admissionWaiters
        admissionWaiters = []
        for waiter in waiters { waiter.continuation.resume() }
    }

    /// Moves up to `limit` queued jobs of this manager from the store into memory, then
    /// reports how many it found.
    func admit(limit: Int) async {
        func ended(found: Int, failed: Bool) {
            admissionsEnded += 1
            schedule(.admissionEnded(asked: limit, found: found, failed: failed))
            let ended = admissionsEnded
            guard admissionWaiters.contains(where: { $0.after <= ended }) else { return }
            let waiters = admissionWaiters
            admissionWaiters = waiters.filter { $0.after > ended }
            for waiter in waiters where waiter.after <= ended { waiter.continuation.resume() }
        }
        guard let store, !isShutDown else { return ended(found: 0, failed: false) }
        await store.flush()
        let claims: [ClaimedJob]
        do {
            claims = try await store.claimQueued(limit: limit)
        } catch {
            return ended(found: 0, failed: true)
        }
        // A window's jobs mostly share a directory: check each directory once per window.
        var checkedDirectories: Set<String> = []
        for claimed in claims { await take(claimed, as: nil, checkedDirectories: &checkedDirectories) }
        ended(found: claims.count, failed: false)
    }

    /// Queues a job claimed from the store here: as `made`, the request as this process
    /// made and validated it (credentials and all), when it has it; else as the stored row
    /// says, validated and with its credentials restored from the vault.
    func take(_ claimed: ClaimedJob, as made: ValidatedRequest?, checkedDirectories: inout Set<String>) async {
        guard let store, !isShutDown, jobs[claimed.id] == nil else { return }
        let record = claimed.record
        var validated: ValidatedRequest
        if let made {
            validated = made
        } else {
            guard let request = try? record.request(),
                let checked = try? ValidatedRequest(request, checkedDirectories: checkedDirectories)
            else {
                store.recordState(claimed.id, .failed, errorCode: "invalidRequest", error: "the journal entry is invalid")
                return
            }
            validated = checked
            do throws(DownloadError) {
                try vault.restore(&validated.request, from: record)
            } catch {
                // Never run without the credentials: leave it paused, and say why.
                store.recordState(claimed.id, .paused, errorCode: error.code.description, error: error.message)
                managerEvents.yield(Event(id: claimed.id, url: validated.request.url, event: .failed(error)))
                return
            }
        }
        if let paths = validated.paths, let other = jobsByPath[paths.partial] {
            // Two queued URLs would write the same file: the second one fails.
            store.recordState(
                claimed.id, .failed, errorCode: "duplicate", error: "\(record.id) would be saved to the same file as \(other)")
            return
        }
        if let paths = validated.paths { checkedDirectories.insert(paths.directoryPath) }
        if claimed.mayBeWritten {
            // Rare (a lease taken over): the partial gets a file of its own first.
            do throws(DownloadError) { try await detachPartial(of: claimed, paths: validated.paths) } catch {
                store.recordFailed(claimed.id, error)
                return
            }
            guard !isShutDown, jobs[claimed.id] == nil else { return }
        }
        let job = add(validated)
        job.journaled = claimed.progress.map(TransferOperation.JournaledProgress.init)
        enqueue(job)
    }
}
