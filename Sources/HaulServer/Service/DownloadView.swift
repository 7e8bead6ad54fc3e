package import Foundation
package import Haul

/// A download as the API shows it: its journal row, with what the manager knows now
/// (bytes not yet checkpointed, speed, connections) laid over it.
package struct DownloadView: Sendable, Codable, Equatable {
    package var id: String
    package var url: String
    package var name: String
    package var destination: String
    package var state: JobState
    /// `veryLow`, `low`, `normal`, `high` or `veryHigh`.
    package var priority: String
    package var bytes: Int64
    package var totalBytes: Int64?
    package var bytesPerSecond: Double
    package var connections: Int
    package var attempts: Int
    package var errorCode: String?
    package var error: String?
    package var createdAt: Date
    package var updatedAt: Date
    package var finishedAt: Date?
    /// For a completed download, the bytes the run that completed it fetched over the
    /// network (``JobSnapshot/bytesTransferred``).
    package var bytesTransferred: Int64?
    /// The run that completed it found the content unchanged (``JobSnapshot/isUnchanged``).
    package var unchanged: Bool

    package init(_ snapshot: JobSnapshot, live: LiveStatus? = nil) {
        id = snapshot.id.rawValue
        url = snapshot.url
        name = snapshot.name
        destination = snapshot.destination
        state = snapshot.state
        priority = Self.word(for: snapshot.priority)
        bytes = snapshot.bytes
        totalBytes = snapshot.totalBytes
        bytesPerSecond = snapshot.bytesPerSecond
        connections = 0
        attempts = snapshot.attempts
        errorCode = snapshot.errorCode
        error = snapshot.error
        createdAt = snapshot.createdAt
        updatedAt = snapshot.updatedAt
        finishedAt = snapshot.finishedAt
        bytesTransferred = snapshot.bytesTransferred
        unchanged = snapshot.isUnchanged
        if let live { apply(live) }
    }

    /// Lays the manager's live view over the row.
    package mutating func apply(_ live: LiveStatus) {
        state = live.state
        bytes = max(bytes, live.progress.completedBytes)
        totalBytes = live.progress.totalBytes ?? totalBytes
        bytesPerSecond = live.progress.bytesPerSecond
        connections = live.connections
        if live.state != .failed { errorCode = errorCode == Journal.shutdownCode ? nil : errorCode }
    }

    /// The download as a journal snapshot (what `haul list` prints).
    /// The view as the API announces a change that left the download in `state`: what
    /// the manager did next (start it, finish it) follows in later events.
    package func announced(as state: JobState) -> DownloadView {
        var view = self
        view.state = state
        view.bytesPerSecond = 0
        view.connections = 0
        if state.isUnfinished {
            view.finishedAt = nil
            view.errorCode = nil
            view.error = nil
        }
        if state != .completed {
            view.bytesTransferred = nil
            view.unchanged = false
        }
        return view
    }

    package var snapshot: JobSnapshot {
        JobSnapshot(
            id: DownloadID(id), url: url, state: state,
            priority: DownloadBatch.priorities[priority]?.rawValue ?? DownloadPriority.normal.rawValue, bytes: bytes,
            totalBytes: totalBytes, bytesPerSecond: bytesPerSecond, destination: destination, attempts: attempts,
            errorCode: errorCode, error: error, createdAt: createdAt, updatedAt: updatedAt, finishedAt: finishedAt,
            bytesTransferred: bytesTransferred, isUnchanged: unchanged)
    }

    /// The word for a priority, as inputs name it.
    package static func word(for priority: Int) -> String {
        DownloadBatch.priorities.first { $0.value.rawValue == priority }?.key ?? "normal"
    }
}

/// A download's progress, as the event stream sends it between state changes.
package struct ProgressView: Sendable, Codable, Equatable {
    package var id: String
    package var bytes: Int64
    package var totalBytes: Int64?
    package var bytesPerSecond: Double
    package var connections: Int
    /// The speed limit in effect, in bytes per second, if any.
    package var limit: Int?

    package init(
        id: String, bytes: Int64, totalBytes: Int64?, bytesPerSecond: Double, connections: Int, limit: Int? = nil
    ) {
        self.id = id
        self.bytes = bytes
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.connections = connections
        self.limit = limit
    }
}

/// The whole service's numbers: `GET /stats` and the event stream's `stats` tick.
package struct StatsView: Sendable, Codable, Equatable {
    package var bytesPerSecond: Double
    package var completedBytes: Int64
    package var totalBytes: Int64?
    /// Jobs per state, every state present.
    package var counts: [String: Int]
    /// Of the completed jobs, those whose last run found the content unchanged.
    package var unchanged: Int
    /// Bytes the service's downloads have fetched over the network since it started
    /// (``completedBytes`` also counts what was resumed, and unchanged files).
    package var transferredBytes: Int64
}
