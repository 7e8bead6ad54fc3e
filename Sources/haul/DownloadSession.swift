import Foundation
import Haul
import HaulCommandSupport
import Logging

/// One run of `haul get` or `haul resume`: feeds a journaled manager, shows its events,
/// waits until nothing is left to do or for SIGINT/SIGTERM, and works out the exit code.
///
/// How the manager is fed is the caller's business (`get` queues its URLs in batches,
/// `resume` adopts the journal's unfinished jobs). Nothing here keeps per-download state
/// for successful downloads beyond counters, so a run of a million URLs stays small.
struct DownloadSession: Sendable {
    /// The manager's configuration.
    let configuration: DownloadManager.Configuration
    /// Where downloads are recorded.
    let journal: Journal
    /// How to show progress.
    let mode: ProgressRenderer.Mode
    /// What to say when the feed queues nothing at all, such as "nothing to resume".
    var nothingToDo = "nothing to download"
    /// Programs run after each download ends; the run waits for them before it returns.
    var hooks = CompletionHooks()

    /// The exit code when nothing failed but downloads were left paused (by `haul pause` or a
    /// full disk), their partial files kept for `haul resume`: not a failure, not done.
    static let pausedExitCode: Int32 = 3

    /// The exit code after an interrupt: 128 + the signal's number (130 for SIGINT).
    static func exitCode(forSignal signal: Int32) -> Int32 { 128 + signal }

    /// Runs the downloads `feed` queues through an ``Intake``, until none is left or an
    /// interrupt; returns the exit code.
    ///
    /// `feed` runs on the calling task and should stop early once ``Intake/isStopped``.
    /// `followUp` runs each time the manager has nothing left to do: it may queue downloads
    /// that what ended calls for (the target of a control file), and returns how many; the
    /// run ends when it queues none.
    func run(feed: (Intake) async -> Void, followUp: (Intake) async -> Int = { _ in 0 }) async -> Int32 {
        let started = ContinuousClock.now
        let signals = SignalHandler(catching: [SIGINT, SIGTERM]) { signal in
            Console.err("\nhaul: interrupted again; exiting without waiting\n")
            exit(Self.exitCode(forSignal: signal))
        }
        defer { signals.stop() }

        let manager = DownloadManager(
            configuration: configuration, journal: journal, eventLoopGroup: ProcessResources.eventLoopGroup,
            threadPool: ProcessResources.threadPool)
        let journal = self.journal
        let renderer = ProgressRenderer(mode: mode) { id in (try? journal.job(id))?.name }
        let intake = Intake(manager: manager, renderer: renderer)
        // Hooks hear every end until the manager shuts down; a failed or late hook is said
        // on standard error.
        let hooks = self.hooks
        let hookEvents = hooks.isEmpty ? nil : manager.events(includingProgress: false)
        let hookRuns = Task {
            guard let hookEvents else { return }
            await hooks.run(
                hookEvents,
                logger: Logger(label: "haul.hooks") { label in
                    ServiceLogHandler(label: label, name: "haul", format: .text, level: .notice)
                })
        }

        // Quiet, only the tally listens, and it needs states and outcomes only. The events
        // are taken in batches: one wakeup for a burst, not one per event.
        let events = manager.eventBatches(includingProgress: mode != .quiet)
        let consumer = Task {
            var tally = Tally()
            while let batch = await events.next() {
                for event in batch {
                    if mode != .quiet { await renderer.handle(event) }
                    tally.record(event)
                }
            }
            return tally
        }
        let ticker: Task<Void, Never>? =
            mode == .live
            ? Task {
                while !Task.isCancelled {
                    await renderer.tick(manager.progress)
                    try? await Task.sleep(for: .milliseconds(100))
                }
            } : nil
        // On the first signal: stop feeding, pause everything (keeping the partial files;
        // the journal records them as paused) and shut down, which ends the waiting.
        let watcher = Task { () -> Int32? in
            for await signal in signals.received {
                // In a task of its own, so that cancelling the watcher cannot cut it short.
                await Task {
                    await intake.stop()
                    await manager.pauseAll()
                    await manager.shutdown()
                }.value
                return signal
            }
            return nil
        }

        await feed(intake)
        let queued = await intake.queued
        if queued > 0 {
            await manager.waitUntilIdle()
            while await !intake.isStopped, await followUp(intake) > 0 { await manager.waitUntilIdle() }
        }
        let rejections = await intake.rejections
        let problems = await intake.problems
        watcher.cancel()
        let interruption = await watcher.value
        await manager.shutdown()
        await hookRuns.value
        let tally = await consumer.value
        ticker?.cancel()
        await ticker?.value

        if queued == 0, rejections.count == 0, problems.isEmpty, interruption == nil {
            await renderer.nothing(nothingToDo)
            return 0
        }

        var failures = rejections
        failures.merge(tally.failures)
        var summary = ProgressRenderer.Summary()
        summary.completed = tally.completed
        summary.unchanged = tally.unchanged
        summary.bytes = tally.bytes
        summary.transferred = tally.transferred
        summary.reused = tally.reused
        summary.failed = failures.count
        summary.paused = tally.paused.count
        summary.elsewhere = tally.elsewhere
        summary.elapsed = ContinuousClock.now - started
        summary.interrupted = interruption != nil
        await renderer.finish(summary)

        // Each failure is said once: the event lines (or the live display) said the ones the
        // manager reported, so where those went to standard error's file too they are not
        // repeated; refusals before queueing have no event line.
        let shown = (mode == .lines || mode == .live) && Console.outputIsErrorOutput ? tally.failures : FailureLog()
        for failure in failures.entries where !shown.contains(id: failure.id) {
            Console.err("haul: failed: \(failure.id): \(failure.message)\n")
        }
        if failures.overflow > 0 {
            Console.err("haul: … and \(failures.overflow) more failures; 'haul list' shows them all\n")
        }
        for problem in problems { Console.err("haul: \(problem)\n") }
        if tally.diskFull {
            Console.err("haul: disk full: partial downloads kept; free some space and run 'haul resume'\n")
        }
        if let interruption {
            Console.err("haul: interrupted; partial downloads kept, run 'haul resume' (or the same command) to resume\n")
            return Self.exitCode(forSignal: interruption)
        }
        if failures.count > 0 || !problems.isEmpty { return 1 }
        if !tally.paused.isEmpty {
            let count = tally.paused.count
            Console.err(
                "haul: \(count) download\(count == 1 ? "" : "s") paused; partial downloads kept, run 'haul resume' to finish\n"
            )
            return Self.pausedExitCode
        }
        return 0
    }
}

/// What a feed uses to hand downloads to the manager and report those it could not queue.
actor Intake {
    /// The manager being fed.
    nonisolated let manager: DownloadManager
    private let renderer: ProgressRenderer
    /// Whether feeding should stop: after an interrupt, or after a journal failure.
    private(set) var isStopped = false
    /// How many downloads were queued.
    private(set) var queued = 0
    /// Downloads refused before they were queued.
    private(set) var rejections = FailureLog()
    /// Errors that stopped the feeding, without the `haul: ` prefix.
    private(set) var problems: [String] = []

    init(manager: DownloadManager, renderer: ProgressRenderer) {
        self.manager = manager
        self.renderer = renderer
    }

    /// Stops the feeding.
    func stop() { isStopped = true }

    /// Tells the display how many downloads the run has in all.
    func expect(_ count: Int) async { await renderer.expect(count) }

    /// Counts downloads queued by other means, such as ``DownloadManager/resumeUnfinished()``.
    func adopted(_ count: Int) async {
        queued += count
        await renderer.expect(queued + rejections.count)
    }

    /// Queues `requests` without handles; returns `false` when feeding should stop.
    ///
    /// A batch refused for one bad request is queued again one request at a time, so only
    /// the bad ones are reported as failed.
    @discardableResult
    func enqueue(_ requests: [DownloadRequest]) async -> Bool {
        guard !isStopped else { return false }
        do throws(DownloadError) {
            try await manager.enqueue(requests)
            queued += requests.count
            return true
        } catch where error.code == .invalidRequest {
            guard requests.count > 1 else {
                await reject(requests[0], code: error.code.description, message: error.message)
                return true
            }
        } catch {
            fail("cannot queue downloads: \(error.message)")
            return false
        }
        for request in requests {
            guard !isStopped else { return false }
            do throws(DownloadError) {
                try await manager.enqueue([request])
                queued += 1
            } catch where error.code == .invalidRequest {
                await reject(request, code: error.code.description, message: error.message)
            } catch {
                fail("cannot queue downloads: \(error.message)")
                return false
            }
        }
        return true
    }

    /// Queues `requests` that downloads which ended called for (see
    /// ``DownloadSession/run(feed:followUp:)``), counted in the display's total; returns how
    /// many were queued.
    func follow(_ requests: [DownloadRequest]) async -> Int {
        guard !requests.isEmpty else { return 0 }
        let before = queued
        await renderer.expect(queued + rejections.count + requests.count)
        await enqueue(requests)
        return queued - before
    }

    /// Reports a download that will not be queued.
    func reject(_ request: DownloadRequest, code: String, message: String) async {
        var name: String?
        if case .directory(_, let fixed) = request.destination { name = fixed }
        if case .file(let file) = request.destination { name = file.lastPathComponent }
        let shown = name ?? ProgressRenderer.displayName(for: request.url)
        rejections.add(id: request.id, message: message)
        await renderer.rejected(id: request.id, name: shown, code: code, message: message)
    }

    /// Records an error that stops the feeding.
    func fail(_ problem: String) {
        problems.append(problem)
        isStopped = true
    }
}

/// Failed downloads with their messages, in order, keeping at most ``limit`` of them.
struct FailureLog: Sendable {
    /// The most failures kept; more are only counted.
    static let limit = 10_000

    private(set) var entries: [(id: DownloadID, message: String)] = []
    private var ids: Set<DownloadID> = []
    /// Failures beyond ``limit``.
    private(set) var overflow = 0

    var count: Int { entries.count + overflow }

    /// Adds (or replaces) the failure of `id`.
    mutating func add(id: DownloadID, message: String) {
        if ids.contains(id) {
            if let index = entries.firstIndex(where: { $0.id == id }) { entries[index].message = message }
            return
        }
        guard entries.count < Self.limit else {
            overflow += 1
            return
        }
        ids.insert(id)
        entries.append((id, message))
    }

    /// Whether `id` failed (among the entries kept).
    func contains(id: DownloadID) -> Bool { ids.contains(id) }

    /// Forgets the failure of `id`: it ran again and completed.
    mutating func remove(id: DownloadID) {
        guard ids.remove(id) != nil else { return }
        entries.removeAll { $0.id == id }
    }

    /// Adds every failure of `other`.
    mutating func merge(_ other: FailureLog) {
        for entry in other.entries { add(id: entry.id, message: entry.message) }
        overflow += other.overflow
    }
}

/// What became of the downloads, from the manager's events: counters for successes, the
/// failures with their messages, and the downloads left paused.
struct Tally: Sendable {
    /// Downloads that completed with content fetched in this run (whole or resumed).
    var completed = 0
    /// Downloads that had completed before and whose server said they had not changed.
    var unchanged = 0
    /// The sizes of the files ``completed`` counts.
    var bytes: Int64 = 0
    /// Bytes received over the network by downloads that have ended.
    var transferredByEnded: Int64 = 0
    /// Bytes of the completed files that a resume found already there.
    var reused: Int64 = 0
    /// Bytes received so far by downloads that have not ended, from their progress.
    var moving: [DownloadID: Int64] = [:]
    var failures = FailureLog()
    /// Downloads whose last word was `paused` (or a shutdown, which keeps the partial).
    var paused: Set<DownloadID> = []
    /// Whether a download failed because the disk is full.
    var diskFull = false
    /// Downloads left to another process that runs them (`--no-wait`).
    var elsewhere = 0

    /// Bytes received over the network in this run, by every download.
    var transferred: Int64 { moving.values.reduce(transferredByEnded, +) }

    mutating func record(_ managerEvent: DownloadManager.Event) {
        let id = managerEvent.id
        switch managerEvent.event {
        case .queued, .started, .attached:
            paused.remove(id)
        case .paused:
            paused.insert(id)
        case .progress(let progress):
            if progress.transferredBytes > 0 { moving[id] = progress.transferredBytes }
        case .completed(let result):
            moving[id] = nil
            transferredByEnded += result.bytesTransferred
            if result.isUnchanged {
                unchanged += 1
            } else {
                completed += 1
                bytes += result.byteCount
                reused += max(0, result.byteCount - result.bytesTransferred)
            }
            failures.remove(id: id)
            paused.remove(id)
        case .failed(let error):
            if error.code == .diskFull { diskFull = true }
            if error.code == .runningElsewhere { elsewhere += 1 }
            failures.add(id: id, message: error.message)
            paused.remove(id)
        case .cancelled(let reason) where reason == .shutdown:
            // The shutdown at the end keeps paused downloads' partial files: still paused.
            paused.insert(id)
        case .cancelled(let reason):
            failures.add(id: id, message: "cancelled (\(reason.rawValue))")
            paused.remove(id)
        case .retrying, .sourceDropped, .networkLost, .networkRestored, .deltaPrepared:
            break
        }
        if managerEvent.event.isTerminal, let moved = moving.removeValue(forKey: id) {
            // A failed or paused download's bytes moved too (a completion counted its own).
            transferredByEnded += moved
        }
    }
}
