import Foundation
import NIOConcurrencyHelpers

/// Decides when a partial file is fsynced, and records in the journal how many of its
/// bytes are then safe. The journal never claims bytes the disk may not hold.
///
/// A checkpoint falls due when at least a second has passed and at least 8 MiB have been
/// written since the last one: at most one a second, and at most one per 8 MiB, so a fast
/// transfer pays for one fsync a second and a power cut loses at most the last second or
/// the last 8 MiB, whichever is more. (A process crash loses nothing: see
/// ``TransferOperation/JournaledProgress``.) The fsync and the record happen on the I/O
/// pool, after the write, never on the event loop.
final class Checkpointer: Sendable {
    static let interval: Duration = .seconds(1)
    static let byteInterval: Int64 = 8 << 20

    private struct State {
        var lastSync: ContinuousClock.Instant
        var unsynced: Int64 = 0
        var validator: String?
        var total: Int64?
    }

    let id: DownloadID
    private let store: any JobStore
    private let meter: ProgressMeter
    private let state: NIOLockedValueBox<State>

    init(id: DownloadID, store: any JobStore, meter: ProgressMeter) {
        self.id = id
        self.store = store
        self.meter = meter
        state = NIOLockedValueBox(State(lastSync: .now))
    }

    /// The content is fetched from `location` now (a refreshed signed URL), with `mirrors`.
    func relocated(to location: URL, mirrors: [URL]) {
        store.recordSources(id, location: location, mirrors: mirrors)
    }

    /// Records what the current response says about the content.
    func describe(validator: Validator?, total: Int64?) {
        state.withLockedValue { state in
            if let validator { state.validator = JobRecord.encode(validator: validator) }
            if let total { state.total = total }
        }
    }

    /// Counts `count` bytes written at `now`; returns whether a sync is due.
    func wrote(_ count: Int, at now: ContinuousClock.Instant) -> Bool {
        state.withLockedValue { state in
            state.unsynced += Int64(count)
            return state.unsynced >= Self.byteInterval && now - state.lastSync >= Self.interval
        }
    }

    /// Asks whether this process still holds the job, its `bytes` bytes durable and about
    /// to go into place (see ``JobStore/confirmCompletion(_:bytes:)``); never blocks.
    func confirmCompletion(bytes: Int64) -> CompletionConfirmation {
        store.confirmCompletion(id, bytes: bytes)
    }

    /// Records that retry number `retry` is about to start.
    func attempted(_ retry: Int) {
        store.recordAttempt(id, retry)
    }

    /// Records that the first `bytes` bytes of the partial are on stable storage.
    func synced(upTo bytes: Int64) {
        let (validator, total) = state.withLockedValue { state in
            state.unsynced = 0
            state.lastSync = .now
            return (state.validator, state.total)
        }
        store.recordCheckpoint(
            id, bytes: bytes, total: total, validator: validator, bytesPerSecond: meter.snapshot().bytesPerSecond,
            bootID: ProcessIdentity.bootID)
    }
}
