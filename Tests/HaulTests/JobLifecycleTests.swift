@testable import Haul
import Testing

/// The job lifecycle, transition by transition, without sockets.
@Suite("Job lifecycle")
struct JobLifecycleTests {
    typealias Phase = JobLifecycle.Phase
    typealias Action = JobLifecycle.Action

    static let following = Following(holder: 1 << 40, owner: JournalOwner(pid: 7, host: "h"))

    /// A lifecycle brought to `phase` (and `intent`, for a running one) the way the
    /// manager would.
    static func make(_ phase: Phase, intent: JobLifecycle.StopIntent? = nil) -> JobLifecycle {
        var lifecycle = JobLifecycle()
        switch phase {
        case .queued: break
        case .running: _ = lifecycle.start()
        case .paused: _ = lifecycle.stop(.pause)
        case .waiting: _ = lifecycle.hostDown()
        case .elsewhere(let following): lifecycle.follow(following)
        case .finished: _ = lifecycle.stop(.cancel(.userRequested))
        }
        if let intent { _ = lifecycle.stop(intent) }
        #expect(lifecycle.phase == phase)
        return lifecycle
    }

    struct Stop: Sendable, CustomTestStringConvertible {
        var from: Phase
        var intent: JobLifecycle.StopIntent
        var to: Phase
        var actions: [Action]
        var testDescription: String { "\(from) + stop(\(intent)) → \(to)" }
    }

    @Test(arguments: [
        Stop(from: .queued, intent: .pause, to: .paused, actions: [.dequeue, .markPaused]),
        Stop(from: .queued, intent: .requeue, to: .queued, actions: []),
        Stop(from: .queued, intent: .cancel(.userRequested), to: .finished, actions: [.dequeue, .finishCancelled(.userRequested)]),
        Stop(from: .queued, intent: .cancel(.noLongerWanted), to: .finished, actions: [.dequeue, .finishCancelled(.noLongerWanted)]),
        Stop(from: .paused, intent: .pause, to: .paused, actions: []),
        Stop(from: .paused, intent: .cancel(.userRequested), to: .finished, actions: [.dequeue, .finishCancelled(.userRequested, wasPaused: true)]),
        Stop(from: .waiting, intent: .pause, to: .paused, actions: [.dequeue, .markPaused]),
        Stop(from: .waiting, intent: .cancel(.shutdown), to: .finished, actions: [.dequeue, .finishCancelled(.shutdown)]),
        Stop(from: .running, intent: .pause, to: .running, actions: [.cancelTransfer]),
        Stop(from: .running, intent: .cancel(.evicted), to: .running, actions: [.cancelTransfer]),
        Stop(from: .elsewhere(following), intent: .pause, to: .elsewhere(following), actions: [.forward(.pause)]),
        Stop(from: .elsewhere(following), intent: .cancel(.userRequested), to: .elsewhere(following), actions: [.forward(.cancel)]),
        Stop(from: .elsewhere(following), intent: .cancel(.shutdown), to: .finished, actions: [.detach(.shutdown)]),
        Stop(from: .elsewhere(following), intent: .cancel(.noLongerWanted), to: .finished, actions: [.detach(.noLongerWanted)]),
        Stop(from: .elsewhere(following), intent: .requeue, to: .elsewhere(following), actions: []),
        Stop(from: .finished, intent: .pause, to: .finished, actions: []),
    ])
    func stop(_ row: Stop) {
        var lifecycle = Self.make(row.from)
        #expect(lifecycle.stop(row.intent) == row.actions)
        #expect(lifecycle.phase == row.to)
    }

    @Test func aCancelOutranksAPauseAndTheFirstReasonWins() {
        var lifecycle = Self.make(.running, intent: .pause)
        #expect(lifecycle.stopIntent == .pause)
        #expect(lifecycle.stop(.cancel(.evicted)) == [.cancelTransfer])
        #expect(lifecycle.stop(.cancel(.userRequested)) == [])
        #expect(lifecycle.stop(.pause) == [])
        #expect(lifecycle.stopIntent == .cancel(.evicted))
        #expect(lifecycle.transferEnded(.interrupted) == [.finishCancelled(.evicted)])
    }

    struct Ended: Sendable, CustomTestStringConvertible {
        var intent: JobLifecycle.StopIntent?
        var ending: JobLifecycle.Ending
        var to: Phase
        var actions: [Action]
        var testDescription: String { "running(\(intent.map { "\($0)" } ?? "-")) + \(ending) → \(to)" }
    }

    @Test(arguments: [
        Ended(intent: nil, ending: .completed, to: .finished, actions: [.finishWithOutcome]),
        Ended(intent: .pause, ending: .completed, to: .finished, actions: [.finishWithOutcome]),
        Ended(intent: .cancel(.userRequested), ending: .completed, to: .finished, actions: [.finishWithOutcome]),
        Ended(intent: nil, ending: .failed, to: .finished, actions: [.finishWithOutcome]),
        Ended(intent: .cancel(.userRequested), ending: .failed, to: .finished, actions: [.finishCancelled(.userRequested)]),
        Ended(intent: .cancel(.evicted), ending: .interrupted, to: .finished, actions: [.finishCancelled(.evicted)]),
        Ended(intent: .cancel(.shutdown), ending: .waitingForNetwork, to: .finished, actions: [.finishCancelled(.shutdown)]),
        Ended(intent: .pause, ending: .interrupted, to: .paused, actions: [.markPaused]),
        Ended(intent: .pause, ending: .waitingForNetwork, to: .paused, actions: [.markPaused]),
        Ended(intent: nil, ending: .waitingForNetwork, to: .waiting, actions: [.wait(hostDown: true)]),
        Ended(intent: .requeue, ending: .waitingForNetwork, to: .waiting, actions: [.wait(hostDown: true)]),
        Ended(intent: .requeue, ending: .interrupted, to: .queued, actions: [.enqueue(record: true)]),
        Ended(intent: nil, ending: .interrupted, to: .queued, actions: [.enqueue(record: true)]),
    ])
    func transferEnded(_ row: Ended) {
        var lifecycle = Self.make(.running, intent: row.intent)
        #expect(lifecycle.transferEnded(row.ending) == row.actions)
        #expect(lifecycle.phase == row.to)
        #expect(lifecycle.stopIntent == nil)
    }

    @Test func aLateEndOfATransferThatIsNotRunningChangesNothing() {
        for phase in [Phase.queued, .paused, .waiting, .elsewhere(Self.following), .finished] {
            var lifecycle = Self.make(phase)
            #expect(lifecycle.transferEnded(.completed) == [])
            #expect(lifecycle.phase == phase)
        }
    }

    @Test func resume() {
        var paused = Self.make(.paused)
        #expect(paused.resume() == [.enqueue(record: true)])
        #expect(paused.phase == .queued)

        // A pause undone before the transfer ended: it queues again when it ends.
        var pausing = Self.make(.running, intent: .pause)
        #expect(pausing.resume() == [])
        #expect(pausing.stopIntent == .requeue)
        #expect(pausing.transferEnded(.interrupted) == [.enqueue(record: true)])

        // A cancel is not undone.
        var cancelling = Self.make(.running, intent: .cancel(.userRequested))
        #expect(cancelling.resume() == [])
        #expect(cancelling.stopIntent == .cancel(.userRequested))

        for phase in [Phase.queued, .waiting, .finished] {
            var lifecycle = Self.make(phase)
            #expect(lifecycle.resume() == [])
            #expect(lifecycle.phase == phase)
        }

        // Followed: only a download its process paused is asked to resume.
        var running = Self.make(.elsewhere(Self.following))
        #expect(running.resume() == [])
        var pausedThere = Self.following
        pausedThere.isPaused = true
        var followedPaused = Self.make(.elsewhere(pausedThere))
        #expect(followedPaused.resume() == [.forward(.resume)])
    }

    @Test func startOnlyFromTheQueue() {
        var queued = Self.make(.queued)
        #expect(queued.start() == [.startTransfer])
        #expect(queued.isRunning)
        for phase in [Phase.running, .paused, .waiting, .elsewhere(Self.following), .finished] {
            var lifecycle = Self.make(phase)
            #expect(lifecycle.start() == [])
            #expect(lifecycle.phase == phase)
        }
    }

    @Test func networkLossAndReturn() {
        var queued = Self.make(.queued)
        #expect(queued.hostDown() == [.dequeue, .wait(hostDown: false)])
        #expect(queued.phase == .waiting)
        #expect(queued.hostRestored() == [.announceRestored, .enqueue(record: true)])
        #expect(queued.phase == .queued)
        for phase in [Phase.running, .paused, .elsewhere(Self.following), .finished] {
            var lifecycle = Self.make(phase)
            #expect(lifecycle.hostDown() == [])
            #expect(lifecycle.hostRestored() == [])
            #expect(lifecycle.phase == phase)
        }
    }

    @Test func followingAndTakingOver() {
        var lifecycle = Self.make(.elsewhere(Self.following))
        var moved = Self.following
        moved.reportedBytes = 10
        lifecycle.updateFollowing(moved)
        #expect(lifecycle.phase == .elsewhere(moved))
        #expect(lifecycle.takeOver() == [.enqueue(record: false)])
        #expect(lifecycle.phase == .queued)
        #expect(lifecycle.takeOver() == [])

        var ended = Self.make(.elsewhere(Self.following))
        ended.finish()
        #expect(ended.phase == .finished)
    }

    typealias Reason = DownloadError.CancellationReason

    /// Which cancellations keep the partial, and what the store records of each.
    @Test(arguments: [
        (Reason.userRequested, false, DownloadRequest.AbandonAction.keepPartial,
         JobLifecycle.CancelledEnd(keepsPartial: false, change: .cancelled, errorCode: "cancelled", error: "cancelled")),
        (.evicted, false, .deletePartial,
         JobLifecycle.CancelledEnd(keepsPartial: true, change: .cancelled, errorCode: "evicted", error: "evicted")),
        (.noLongerWanted, false, .keepPartial, JobLifecycle.CancelledEnd(keepsPartial: true, change: .paused)),
        (.noLongerWanted, false, .deletePartial,
         JobLifecycle.CancelledEnd(
            keepsPartial: false, change: .cancelled, errorCode: "cancelled", error: "no longer wanted")),
        (.shutdown, false, .deletePartial,
         JobLifecycle.CancelledEnd(
            keepsPartial: true, change: .paused, errorCode: Journal.shutdownCode, error: "stopped with its process")),
        (.shutdown, true, .keepPartial, JobLifecycle.CancelledEnd(keepsPartial: true, change: .paused)),
    ] as [(Reason, Bool, DownloadRequest.AbandonAction, JobLifecycle.CancelledEnd)])
    func aCancellationsEnd(
        reason: Reason, wasPaused: Bool, whenAbandoned: DownloadRequest.AbandonAction, end: JobLifecycle.CancelledEnd
    ) {
        #expect(JobLifecycle.cancelledEnd(reason, wasPaused: wasPaused, whenAbandoned: whenAbandoned) == end)
    }

    @Test func aFullDiskPausesWhereAnyOtherFailureFails() {
        let full = DownloadError(.diskFull, "no space left")
        #expect(JobLifecycle.failedEnd(full) == .paused(errorCode: full.code.description, error: "no space left"))
        #expect(JobLifecycle.failedEnd(DownloadError(.httpStatus, "HTTP 404", statusCode: 404)) == .failed)
    }
}
