import Foundation
import Logging

/// Downloads another live process runs: followed from the journal (see ``Following``),
/// taken over when that process dies, and controlled through commands left for it.
extension DownloadManager {
    // MARK: - Downloads other processes run

    /// Follows `job`, which another live process holds, from the journal; or, when the
    /// configuration says not to follow, fails it at once naming that process.
    func follow(_ job: Job, _ attachment: JobAttachment) {
        guard configuration.followsOtherProcesses else {
            let error = DownloadError(
                .runningElsewhere,
                "\(job.id) is being downloaded by \(attachment.owner); wait for it, or run without --no-wait to follow it")
            finish(job, .failure(error), journaled: true)
            return
        }
        var following = Following(holder: attachment.holder, owner: attachment.owner)
        let record = attachment.record
        job.core.meter.reset(completed: record.bytesCommitted, total: record.totalBytes)
        following.reportedBytes = record.bytesCommitted
        job.lifecycle.follow(following)
        job.core.emit(.attached(attachment.owner))
        if record.state == .paused, record.command == nil {
            following.isPaused = true
            job.lifecycle.updateFollowing(following)
            job.core.emit(.paused)
        }
    }

    /// Follows the download of `request` that another live process holds, unless one
    /// with its ID is active here already; returns whether it does.
    @discardableResult
    func follow(request: DownloadRequest, _ attachment: JobAttachment) -> Bool {
        guard jobs[request.id] == nil, let validated = try? ValidatedRequest(request) else { return false }
        follow(add(validated), attachment)
        return true
    }

    /// Brings every followed download up to date with the journal.
    func pollFollowed() async {
        guard let store else { return }
        let followed = jobs.values.compactMap { $0.following == nil ? nil : $0.id }
        guard !followed.isEmpty, let watch = try? await store.watch(followed) else { return }
        let (rows, live) = (watch.rows, watch.live)
        for id in followed {
            guard let job = jobs[id], var following = job.following else { continue }
            let action = following.evaluate(row: rows[id], live: live, me: me)
            job.lifecycle.updateFollowing(following)
            switch action {
            case .none:
                break
            case .progress(let progress):
                job.core.meter.reset(completed: progress.completedBytes, total: progress.totalBytes)
                job.core.emit(.progress(progress))
            case .paused:
                job.core.emit(.paused)
                checkIdle()
            case .resumed:
                job.core.emit(.started)
            case .completed(let path, let size, let finalURL):
                // An object is recorded completed once stored; a file is checked for.
                let object = path.hasPrefix("s3://") ? try? S3Location(parsing: path) : nil
                guard object != nil || CompletedFile.attributes(path: path)?.size == size else {
                    await takeOver(job)
                    continue
                }
                job.core.meter.reset(completed: size, total: size)
                let result = DownloadResult(
                    id: id, fileURL: object?.address ?? URL(fileURLWithPath: path), data: nil,
                    finalURL: URL(string: finalURL) ?? job.request.url, byteCount: size, bytesTransferred: 0)
                finish(job, .success(result), journaled: true)
            case .failed(let code, let message):
                let error = DownloadError(DownloadError.Code(named: code) ?? .network, message)
                finish(job, .failure(error), journaled: true)
            case .cancelled:
                finish(job, .failure(.cancelled(.userRequested, id: id)), journaled: true)
            case .takeOver:
                await takeOver(job)
            }
        }
    }

    /// Claims a followed download whose holder died (or whose row is gone) and runs it
    /// here, from its partial file.
    func takeOver(_ job: Job) async {
        guard let store, var record = JobRecord(request: job.request, paths: job.paths) else { return }
        if let missing = job.credentialsError {
            // Never run without its credentials; the journal keeps the job for whoever has them.
            finish(job, .failure(missing), journaled: true)
            return
        }
        vault.deposit(job.request, into: &record)
        guard let claim = try? await store.claim(record, force: false),
            jobs[job.id] === job, job.following != nil
        else { return }
        switch claim {
        case .claimed(let claimed):
            logger.debug("took over a download whose process died", metadata: ["id": "\(job.id)"])
            let journaled: TransferOperation.JournaledProgress?
            do throws(DownloadError) { journaled = try await takeUp(claimed, paths: job.paths) } catch {
                finish(job, .failure(error))
                return
            }
            guard jobs[job.id] === job, job.following != nil else { return }
            job.journaled = journaled
            perform(job.lifecycle.takeOver(), for: job)
        case .heldElsewhere(let attachment):
            // Somebody else was quicker: follow them.
            job.lifecycle.follow(Following(holder: attachment.holder, owner: attachment.owner))
            job.core.emit(.attached(attachment.owner))
        }
    }

    /// Leaves a command for the process that runs a followed download (pause, cancel,
    /// resume), without waiting for it. A cancellation the store carried out at once (its
    /// holder had gone meanwhile) leaves the partial file to this manager, as any
    /// cancellation of its own does.
    func forward(_ id: DownloadID, _ command: JobLifecycle.Command) {
        guard let store else { return }
        let paths = command == .cancel ? jobs[id]?.paths : nil
        let threadPool = self.threadPool
        Task {
            guard (try? await store.leave(command, for: id)) == true, let paths else { return }
            try? await threadPool.perform { () throws(DownloadError) in PartialFile.remove(paths) }
        }
    }
}
