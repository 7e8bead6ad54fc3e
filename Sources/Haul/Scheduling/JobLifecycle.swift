/// A download's lifecycle as a plain value: where it stands, what stopping it was meant
/// to do, and, for each thing that happens to it, the actions the manager must carry out.
/// No I/O: the manager executes the actions (``DownloadManager`` does the queueing,
/// journal writes, events and tasks).
///
/// ```
///            start            ended: completed / failed / cancel intent
///   queued ────────► running ───────────────────────────────────────► finished
///     ▲  │ host down   │ │ stop(pause) + ended   stop(cancel) while not running
///     │  ▼             │ ▼                        ─────────────────────────────► finished
///   waiting ◄──────────┘ paused ── resume ──► queued
///     (ended: waitingForNetwork)   (running + pause, then resume: requeue)
///   elsewhere: another process runs it; stop and resume are forwarded to it, or detach.
/// ```
///
/// A cancel outranks a pause, and the first cancel reason wins.
package struct JobLifecycle: Hashable, Sendable {
    enum Phase: Hashable, Sendable {
        case queued
        case running
        case paused
        /// Its host cannot be reached; it queues again when the host answers.
        case waiting
        /// Another live process runs it; this manager follows it from the journal.
        case elsewhere(Following)
        /// Completed, failed or cancelled: the manager has forgotten it.
        case finished
    }

    /// What to do when a running transfer has been stopped.
    enum StopIntent: Hashable, Sendable {
        case pause
        /// A pause undone before the transfer ended: queue it again.
        case requeue
        case cancel(DownloadError.CancellationReason)
    }

    /// How a transfer ended, as far as the lifecycle cares.
    enum Ending: Hashable, Sendable {
        case completed
        case failed
        /// The task was cancelled (pause, cancel, eviction); the partial is intact.
        case interrupted
        /// The host could not be reached, nor probed.
        case waitingForNetwork
    }

    /// A command for another process that runs the download.
    package enum Command: String, Hashable, Sendable {
        case pause, cancel, resume
    }

    enum Action: Hashable, Sendable {
        /// Take a slot and start the transfer.
        case startTransfer
        /// Cancel the running transfer's task; its end is reported later.
        case cancelTransfer
        /// Take it out of the queue.
        case dequeue
        /// Put it (back) in the queue and say `queued`; `record` also writes `queued` to the
        /// journal.
        case enqueue(record: Bool)
        /// Say `paused` and record it.
        case markPaused
        /// Say `networkRestored`.
        case announceRestored
        /// Say `networkLost`, record `waiting`; `hostDown` also marks the host down and
        /// moves its other queued downloads to waiting.
        case wait(hostDown: Bool)
        /// End it as cancelled for `reason` (partial kept or deleted by the reason and the
        /// request's abandon choice); `wasPaused` says a person had paused it.
        case finishCancelled(DownloadError.CancellationReason, wasPaused: Bool = false)
        /// End it with the transfer's result (success or failure).
        case finishWithOutcome
        /// Leave `command` in the journal for the process that runs it.
        case forward(Command)
        /// Stop following it here; the other process goes on.
        case detach(DownloadError.CancellationReason)
    }

    private(set) var phase: Phase
    private(set) var stopIntent: StopIntent?

    init(phase: Phase = .queued) {
        self.phase = phase
    }

    var isRunning: Bool { phase == .running }

    // MARK: - Transitions

    /// A slot is free for it.
    mutating func start() -> [Action] {
        guard phase == .queued else { return [] }
        phase = .running
        stopIntent = nil
        return [.startTransfer]
    }

    /// Someone wants it paused, requeued or cancelled.
    mutating func stop(_ intent: StopIntent) -> [Action] {
        switch phase {
        case .running:
            // A cancel outranks a pause; the first cancel reason wins.
            if case .cancel = stopIntent { return [] }
            stopIntent = intent
            return [.cancelTransfer]
        case .queued, .paused, .waiting:
            switch intent {
            case .pause:
                if phase == .paused { return [] }
                phase = .paused
                return [.dequeue, .markPaused]
            case .requeue:
                return []
            case .cancel(let reason):
                let wasPaused = phase == .paused
                phase = .finished
                return [.dequeue, .finishCancelled(reason, wasPaused: wasPaused)]
            }
        case .elsewhere:
            switch intent {
            case .pause: return [.forward(.pause)]
            case .cancel(.userRequested): return [.forward(.cancel)]
            case .cancel(let reason):
                phase = .finished
                return [.detach(reason)]
            case .requeue: return []
            }
        case .finished:
            return []
        }
    }

    /// Someone wants it to go on.
    mutating func resume() -> [Action] {
        switch phase {
        case .paused:
            phase = .queued
            return [.enqueue(record: true)]
        case .running:
            if stopIntent == .pause { stopIntent = .requeue }
            return []
        case .elsewhere(let following):
            return following.isPaused ? [.forward(.resume)] : []
        case .queued, .waiting, .finished:
            return []
        }
    }

    /// The running transfer ended.
    mutating func transferEnded(_ ending: Ending) -> [Action] {
        guard phase == .running else { return [] }
        let intent = stopIntent
        stopIntent = nil
        switch (ending, intent) {
        case (.completed, _):
            phase = .finished
            return [.finishWithOutcome]
        case (_, .cancel(let reason)):
            phase = .finished
            return [.finishCancelled(reason)]
        case (.failed, _):
            phase = .finished
            return [.finishWithOutcome]
        case (.interrupted, .pause), (.waitingForNetwork, .pause):
            phase = .paused
            return [.markPaused]
        case (.waitingForNetwork, _):
            phase = .waiting
            return [.wait(hostDown: true)]
        case (.interrupted, .requeue), (.interrupted, nil):
            phase = .queued
            return [.enqueue(record: true)]
        }
    }

    /// Another download found its host down while this one waited in the queue.
    mutating func hostDown() -> [Action] {
        guard phase == .queued else { return [] }
        phase = .waiting
        return [.dequeue, .wait(hostDown: false)]
    }

    /// Its host answers again.
    mutating func hostRestored() -> [Action] {
        guard phase == .waiting else { return [] }
        phase = .queued
        return [.announceRestored, .enqueue(record: true)]
    }

    /// Another live process runs it (from now on).
    mutating func follow(_ following: Following) {
        phase = .elsewhere(following)
        stopIntent = nil
    }

    /// The other process's run of it moved on (see ``Following``).
    mutating func updateFollowing(_ following: Following) {
        guard case .elsewhere = phase else { return }
        phase = .elsewhere(following)
    }

    /// It ended while followed (completed, failed or cancelled there).
    mutating func finish() {
        phase = .finished
        stopIntent = nil
    }

    /// A followed download is taken over, to run here.
    mutating func takeOver() -> [Action] {
        guard case .elsewhere = phase else { return [] }
        phase = .queued
        return [.enqueue(record: false)]
    }
}

// MARK: - Ends

extension JobLifecycle {
    /// How a cancelled download ends: whether its partial file stays for a later resume,
    /// and what the store records of it.
    struct CancelledEnd: Hashable, Sendable {
        var keepsPartial: Bool
        var change: StateChange
        var errorCode: String?
        var error: String?
    }

    /// The end of a download cancelled for `reason` (`wasPaused`: a person had paused it
    /// before) whose request chose `whenAbandoned`. Eviction, shutdown and (unless the
    /// request says otherwise) abandonment keep the partial so the download can resume
    /// later, and record it as paused; a shutdown that was not a person's pause says so,
    /// for a service to resume it when it starts again.
    static func cancelledEnd(
        _ reason: DownloadError.CancellationReason, wasPaused: Bool, whenAbandoned: DownloadRequest.AbandonAction
    ) -> CancelledEnd {
        let keepsPartial =
            reason == .evicted || reason == .shutdown || (reason == .noLongerWanted && whenAbandoned == .keepPartial)
        if reason == .shutdown, !wasPaused {
            return CancelledEnd(
                keepsPartial: true, change: .paused, errorCode: Journal.shutdownCode, error: "stopped with its process")
        }
        if reason == .shutdown || (reason == .noLongerWanted && keepsPartial) {
            return CancelledEnd(keepsPartial: true, change: .paused)
        }
        return CancelledEnd(
            keepsPartial: keepsPartial, change: .cancelled, errorCode: reason == .evicted ? "evicted" : "cancelled",
            error: reason.rawValue)
    }

    /// What the store records of a download that failed with a file destination.
    enum FailedEnd: Hashable, Sendable {
        /// Paused, with the error, to continue by a resume (a full disk: `haul resume` once
        /// there is room).
        case paused(errorCode: String, error: String)
        /// Failed (the store decides whether it is tried again later).
        case failed
    }

    /// The record of a download that failed with `error`.
    static func failedEnd(_ error: DownloadError) -> FailedEnd {
        error.code == .diskFull ? .paused(errorCode: error.code.description, error: error.message) : .failed
    }
}
