package import Foundation
package import HaulPostgres

/// A job of the shared queue as the API shows it (`GET /api/v1/cluster/jobs`).
package struct ClusterJobView: Codable, Sendable, Equatable {
    /// The job's key: its ID (the URL, unless another was given).
    package var id: String
    /// `available`, `running`, `retryable`, `paused`, `completed`, `failed` or `cancelled`.
    package var state: String
    package var url: String
    /// The file's name in its worker's directory: the one given, else the URL's last part.
    package var name: String
    /// The queue's priority (higher first; 0 is normal).
    package var priority: Int
    /// Attempts made, and allowed.
    package var attempt: Int
    package var maxAttempts: Int
    /// Bytes the worker has committed (synced to its disk).
    package var bytes: Int64
    package var totalBytes: Int64?
    /// The worker that holds (or last held) it, and that worker's host while it is registered.
    package var worker: Int64?
    package var workerHost: String?
    package var error: String?
    package var errorCode: String?
    /// `pause` or `cancel` asked of its worker and not yet acted on.
    package var command: String?
    package var createdAt: Date
    package var updatedAt: Date
    /// When it may be claimed (a retry's backoff).
    package var scheduledAt: Date
    package var finishedAt: Date?
    package var leaseExpiresAt: Date?

    package init(_ details: QueueJobDetails) {
        let job = details.job
        id = job.id
        state = job.state
        url = job.url
        name = details.name ?? Self.lastComponent(of: job.url)
        priority = job.priority
        attempt = job.attempt
        maxAttempts = job.maxAttempts
        bytes = job.bytesCommitted
        totalBytes = job.totalBytes
        worker = job.leaseOwner
        workerHost = details.workerHost
        error = job.lastError
        errorCode = details.lastErrorCode
        command = details.command
        createdAt = details.createdAt
        updatedAt = details.updatedAt
        scheduledAt = job.scheduledAt
        finishedAt = details.finishedAt
        leaseExpiresAt = details.leaseExpiresAt
    }

    static func lastComponent(of url: String) -> String {
        guard let parsed = URL(string: url) else { return url }
        let last = parsed.lastPathComponent
        return last.isEmpty || last == "/" ? (parsed.host ?? url) : last
    }
}

/// A worker of the shared queue as the API shows it (`GET /api/v1/cluster/workers`).
package struct ClusterWorkerView: Codable, Sendable, Equatable {
    package var id: Int64
    package var host: String
    package var pid: Int32
    package var startedAt: Date
    package var heartbeatAt: Date
    /// Seconds since its last heartbeat, by the database's clock.
    package var heartbeatAge: Double
    /// `alive`, or `stale` when its last heartbeat is older than ``WorkerLiveness/staleAfter``.
    package var status: String
    /// Jobs it runs now, and the bytes they have committed.
    package var runningJobs: Int
    package var bytes: Int64

    package init(_ status: QueueWorkerStatus) {
        id = status.worker.id
        host = status.worker.host
        pid = status.worker.pid
        startedAt = status.worker.startedAt
        heartbeatAt = status.worker.heartbeatAt
        heartbeatAge = (status.heartbeatAge * 10).rounded() / 10
        self.status = WorkerLiveness.isAlive(heartbeatAge: status.heartbeatAge) ? "alive" : "stale"
        runningJobs = status.runningJobs
        bytes = status.bytesCommitted
    }
}

/// When a worker counts as alive: a plain rule on the age of its last heartbeat.
///
/// Workers beat every quarter of their lease (`haul worker --lease`, 30 s by default: every
/// 7.5 s) while they can reach the database. One whose last beat is older than
/// ``staleAfter`` has stopped without unregistering (killed, or cut off from the
/// database): its jobs go to other workers once their leases expire. A worker run with a
/// lease over 4 minutes beats less often than that and shows as stale between beats.
package enum WorkerLiveness {
    /// Seconds without a heartbeat after which a worker is stale.
    package static let staleAfter: Double = 60

    package static func isAlive(heartbeatAge: Double) -> Bool {
        heartbeatAge <= staleAfter
    }
}

/// The shared queue in a few numbers: `GET /api/v1/cluster`, and the `cluster` event.
package struct ClusterSummaryView: Codable, Sendable, Equatable {
    /// The queue's address, without any password.
    package var queue: String
    /// Jobs per state (every state, 0 for none).
    package var counts: [String: Int]
    package var total: Int
    /// Bytes committed by every job, and the sizes of those whose size is known.
    package var bytes: Int64
    package var totalBytes: Int64
    /// When a job last changed.
    package var lastChange: Date?
    /// Workers alive and stale (see ``WorkerLiveness``).
    package var workers: Int
    package var staleWorkers: Int
    /// Why the queue could not be read, when it could not (then the numbers are zero).
    package var error: String?

    package init(queue: String, summary: QueueSummary, workers: [QueueWorkerStatus]) {
        self.queue = queue
        counts = Dictionary(uniqueKeysWithValues: summary.counts.map { ($0.key.rawValue, $0.value) })
        total = summary.total
        bytes = summary.bytesCommitted
        totalBytes = summary.totalBytes
        lastChange = summary.lastChange
        let alive = workers.filter { WorkerLiveness.isAlive(heartbeatAge: $0.heartbeatAge) }.count
        self.workers = alive
        staleWorkers = workers.count - alive
        error = nil
    }

    /// The summary of a queue that could not be read.
    package init(queue: String, error: String) {
        self.init(queue: queue, summary: QueueSummary(), workers: [])
        self.error = error
    }
}
