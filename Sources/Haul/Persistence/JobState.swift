/// Where a journaled download stands.
public enum JobState: String, Codable, Sendable, CaseIterable {
    /// Waiting for a slot.
    case queued
    /// Transferring.
    case running
    /// Stopped by a person, a signal or a full disk; the partial file is kept.
    case paused
    /// Its host cannot be reached; it resumes on its own when the host answers.
    case waiting
    /// Done and verified.
    case completed
    /// Failed for good; `haul retry` queues it again.
    case failed
    /// Cancelled; its partial file is gone.
    case cancelled

    /// Whether the job still has work to do.
    public var isUnfinished: Bool {
        switch self {
        case .queued, .running, .paused, .waiting: true
        case .completed, .failed, .cancelled: false
        }
    }
}
