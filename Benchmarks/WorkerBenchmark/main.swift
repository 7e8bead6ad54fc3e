// Claim-and-complete throughput of the shared queue on PostgreSQL, without transfers.
//
// For each worker count W: a fresh database with COUNT queued jobs; W workers, each with a
// connection pool and a `PostgresJobStore` of its own (what a `haul worker` process has),
// claim up to SLOTS jobs at a time (FOR UPDATE SKIP LOCKED, leases, attempt + 1) and confirm
// every claimed job's completion (the fenced, group-committed update a finished transfer
// makes before its rename, then the final URL), until the queue is empty. Reports jobs per
// second from the first claim to the last completion, and checks in the database that every
// job was completed once.
//
//     HAUL_BENCHMARKS=1 swift run -c release haul-worker-benchmark ADMIN_URL [COUNT] [SLOTS] [W ...]
//
// ADMIN_URL names a database the benchmark may create databases from, e.g.
// postgres://postgres@/postgres?host=/tmp/pg&port=5439 (Benchmarks/workers.sh starts such a
// cluster). The workers are tasks of this one process, each with its own pool: the database,
// not the process boundary, is what is measured.

import Foundation
import Haul
import HaulPostgres
import NIOPosix
import Logging
import PostgresNIO

let arguments = Array(CommandLine.arguments.dropFirst())
guard let adminText = arguments.first else {
    FileHandle.standardError.write(Data("usage: haul-worker-benchmark ADMIN_URL [COUNT] [SLOTS] [W ...]\n".utf8))
    exit(2)
}
let count = arguments.count > 1 ? Int(arguments[1]) ?? 20_000 : 20_000
let slots = arguments.count > 2 ? Int(arguments[2]) ?? 16 : 16
let workerCounts = arguments.count > 3 ? arguments[3...].compactMap { Int($0) } : [1, 2, 4, 8]
let admin = try QueueAddress(parsing: adminText, fromCommandLine: false)

/// A fresh database next to the admin one; its address.
func makeDatabase(_ name: String) async throws -> QueueAddress {
    let queue = PostgresQueue(address: admin)
    try await queue.withRunning {
        // The name is ours, not input: an identifier cannot be a bind parameter.
        try await queue.client.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name)"))
        try await queue.client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
    }
    return try QueueAddress(
        parsing: adminText.replacingOccurrences(of: "/postgres?", with: "/\(name)?"), fromCommandLine: false)
}

/// Runs `body` with `queue`'s pool running, then stops it.
func running<T: Sendable>(_ queue: PostgresQueue, _ body: @Sendable () async throws -> T) async throws -> T {
    try await queue.withRunning(body)
}

print("| workers | jobs | seconds | jobs/s | completed once |")
print("|---|---|---|---|---|")
for workers in workerCounts {
    let address = try await makeDatabase("haul_bench_w\(workers)")
    let setup = PostgresQueue(address: address)
    try await running(setup) {
        try await setup.migrate()
        var queued = 0
        while queued < count {
            let part = try (queued..<min(count, queued + 5_000)).map {
                try QueueRequest(url: URL(string: "http://127.0.0.1:9/empty/\($0)")!, id: "job-\($0)")
            }
            queued += try await setup.enqueue(part)
        }
    }
    let clock = ContinuousClock()
    let start = clock.now
    try await withThrowingTaskGroup(of: Int.self) { group in
        for index in 0..<workers {
            group.addTask {
                let queue = PostgresQueue(address: address)
                return try await running(queue) {
                    var owner: Int64 = 0
                    for try await id in try await queue.client.query(
                        "INSERT INTO haul_workers (host, pid) VALUES ('benchmark', \(Int32(index))) RETURNING id"
                    ).decode(Int64.self) { owner = id }
                    var settings = QueueWorker.Settings(directory: URL(fileURLWithPath: NSTemporaryDirectory()))
                    settings.slots = slots
                    settings.lease = .seconds(60)
                    let store: any JobStore = PostgresJobStore(
                        queue: queue, owner: owner, settings: settings,
                        logger: Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() }))
                    var done = 0
                    while true {
                        let claimed = try await store.claimQueued(limit: slots)
                        if claimed.isEmpty { break }
                        try await withThrowingTaskGroup(of: Void.self) { jobs in
                            for job in claimed {
                                jobs.addTask {
                                    try await store.confirmCompletion(job.id, bytes: 0).answer()
                                    store.recordCompleted(
                                        job.id, bytes: 0, transferred: 0, unchanged: false, finalURL: job.record.url,
                                        path: nil, file: nil)
                                }
                            }
                            try await jobs.waitForAll()
                        }
                        done += claimed.count
                    }
                    await store.close()
                    return done
                }
            }
        }
        var total = 0
        for try await done in group { total += done }
        precondition(total == count, "the workers completed \(total) of \(count)")
    }
    let seconds = (clock.now - start).timeInterval
    let check = PostgresQueue(address: address)
    let once = try await running(check) { () -> Bool in
        var completed = 0
        var attempts = 0
        for try await (n, a) in try await check.client.query(
            "SELECT count(*)::int8, coalesce(max(attempt), 0)::int8 FROM haul_jobs WHERE state = 'completed'"
        ).decode((Int64, Int64).self) {
            completed = Int(n)
            attempts = Int(a)
        }
        return completed == count && attempts == 1
    }
    print(
        "| \(workers) | \(count) | \(String(format: "%.2f", seconds)) | \(String(format: "%.0f", Double(count) / seconds)) | \(once ? "yes" : "NO") |"
    )
}
