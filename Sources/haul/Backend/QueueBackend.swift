import ArgumentParser
import Foundation
import Haul
import HaulPostgres

/// The backend that works on the shared queue on PostgreSQL (issue 14): `haul get` adds
/// jobs for `haul worker` to run, and `list`, `pause`, `cancel` and `retry` work on the
/// queue's jobs. Downloads do not run in this process.
struct QueueBackend: CommandBackend {
    let address: QueueAddress

    func close() async {}

    /// The queue's request for `entry` (with `-o` and `--checksum` applied), or the usage
    /// error that refuses it; `haul get` asks this of every entry before any is queued.
    static func request(for entry: InputEntry, headers: [(name: String, value: String)]) throws -> QueueRequest {
        do {
            var request = try QueueRequest(
                url: entry.url, name: entry.name, expectedSize: entry.expectedSize, checksum: entry.checksum?.description,
                headers: headers, mirrors: entry.mirrors, pieces: entry.pieces)
            request.stream = entry.stream
            return request
        } catch {
            throw ValidationError("\(error.message); nothing was queued")
        }
    }

    /// Runs `body` with the queue's connection pool running.
    private func with<T: Sendable>(_ body: @Sendable (PostgresQueue) async throws -> T) async throws -> T {
        let queue = PostgresQueue(address: address)
        return try await queue.withRunning {
            try await queue.migrate()
            return try await body(queue)
        }
    }

    // MARK: - Downloads

    /// Adds every entry in one transaction (all or nothing) and says how many were new.
    func get(_ batch: GetBatch) async throws -> Int32 {
        var requests: [QueueRequest] = []
        requests.reserveCapacity(batch.scan.count)
        try await batch.entries { entry in
            requests.append(try Self.request(for: entry, headers: batch.headers))
            return true
        }
        let wanted = requests
        let added = try await with { queue in try await queue.enqueue(wanted) }
        Console.out("queued \(added) of \(wanted.count) (\(wanted.count - added) already in the queue)\n")
        return 0
    }

    // MARK: - Jobs

    /// One line per job: state, attempt/attempts, bytes[/total], ID and the last error.
    func list(_ request: ListRequest) async throws {
        let jobs = try await with { queue in try await queue.jobs() }
        for job in jobs {
            let size = job.totalBytes.map { "\(job.bytesCommitted)/\($0)" } ?? "\(job.bytesCommitted)"
            var line = "\(job.state)\t\(job.attempt)/\(job.maxAttempts)\t\(size)\t\(job.id)"
            if let error = job.lastError { line += "\t" + error }
            Console.out(line + "\n")
        }
    }

    /// `ACTION: N job(s)`. The queue takes IDs only (see ``BackendChoice/check(_:)``);
    /// retry without IDs retries every failed job.
    func control(_ action: ControlAction, _ target: ControlTarget) async throws {
        let ids: [String]
        if case .ids(let given) = target { ids = given } else { ids = [] }
        let count = try await with { queue in
            switch action {
            case .pause: try await queue.pause(ids)
            case .cancel: try await queue.cancel(ids)
            case .retry: try await queue.retry(ids)
            }
        }
        Console.out("\(action.name): \(count) job(s)\n")
    }
}
