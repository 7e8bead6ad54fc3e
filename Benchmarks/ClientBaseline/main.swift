// The floor under Haul's cost per file: a plain loop on AsyncHTTPClient, the client Haul
// is built on, fetching every URL of a list, PARALLEL (default 16) at a time, with nothing
// else: no journal, no fsync, no events, no retries. What Haul spends beyond this on the
// same list is Haul's own per-file work.
//
//     HAUL_BENCHMARKS=1 swift build -c release --static-swift-stdlib --product haul-client-baseline
//     .build/release/haul-client-baseline LIST OUTDIR [PARALLEL]
//
// (Built as `scripts/install.sh` builds Haul, with the standard library linked in: a
// dynamic build of Haul takes 57-60 ms to start and finish one small file, a static one 40.)
//
// READ_TIMEOUT=SECONDS gives the client a read timeout, as Haul's idle timeout does.
//
// MODE says how bodies are kept:
// - `onehop` (the default): each body is collected in memory, then written with one hop
//   to a thread pool that opens a temporary file, writes, closes and renames it into
//   place: the lightest file writing that still never shows a partial file.
// - `batch`: the same writing, but the bodies that arrive while a hop is under way go
//   together in the next one (one hop for many files).
// - `journal`: `batch`, with the least a journal that loses nothing must do: every URL is
//   a row of an SQLite journal (WAL, `synchronous = NORMAL`, as Haul's) before it is
//   fetched, inserted 1,000 to a transaction; each file is fsynced before its rename; after
//   each batch of renames, one directory fsync, then one transaction marks the batch's
//   rows completed (an UPDATE each). Nothing else: no claim, no progress, no events.
//   JOURNAL=PATH (default OUTDIR/../baseline-journal.sqlite, removed first).
// - `memory`: bodies are only collected, never written: the client's own cost.
// - `delegate`: AsyncHTTPClient's own `FileDownloadDelegate` (several pool hops per file).
//
// `Benchmarks/compare.sh` runs it as the `ahc-memory`, `ahc-1hop` and `ahc-journal` rows of workload 3
// when AHC_BIN=path/to/haul-client-baseline is set; CA_FILE=PEM trusts that authority for
// https URLs. Exits 1 on any failure or non-200 status.

import AsyncHTTPClient
import Foundation
import GRDB
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: haul-client-baseline LIST OUTDIR [PARALLEL]\n".utf8))
    exit(2)
}
let parallel = arguments.count > 3 ? Int(arguments[3]) ?? 16 : 16
let urls = try String(contentsOfFile: arguments[1], encoding: .utf8).split(separator: "\n").map(String.init)
let output = arguments[2]

var configuration = HTTPClient.Configuration()
configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(
    idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: parallel)
// As Haul's clients: no request spans.
configuration.tracing.tracer = nil
// READ_TIMEOUT=SECONDS sets the client's read timeout (Haul's idle timeout), to measure
// what the client's timers cost per request.
if let seconds = ProcessInfo.processInfo.environment["READ_TIMEOUT"].flatMap(Int64.init) {
    configuration.timeout = HTTPClient.Configuration.Timeout(connect: .seconds(30), read: .seconds(seconds))
}
if let bundle = ProcessInfo.processInfo.environment["CA_FILE"], !bundle.isEmpty {
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.trustRoots = .file(bundle)
    configuration.tlsConfiguration = tls
}
let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)

let mode = ProcessInfo.processInfo.environment["MODE"] ?? "onehop"
guard ["onehop", "batch", "journal", "memory", "delegate"].contains(mode) else {
    FileHandle.standardError.write(
        Data("haul-client-baseline: MODE is onehop, batch, journal, memory or delegate\n".utf8))
    exit(2)
}
/// The `journal` mode's journal: one row per URL, its index the row's ID.
let journal: DatabasePool? = try {
    guard mode == "journal" else { return nil }
    let path =
        ProcessInfo.processInfo.environment["JOURNAL"]
        ?? (output as NSString).deletingLastPathComponent + "/baseline-journal.sqlite"
    for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) }
    var configuration = Configuration()
    configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
    let pool = try DatabasePool(path: path, configuration: configuration)
    try pool.write { db in
        try db.execute(
            sql: "CREATE TABLE jobs (id INTEGER PRIMARY KEY, url TEXT NOT NULL, path TEXT NOT NULL, state INTEGER NOT NULL, size INTEGER)"
        )
    }
    var start = 0
    while start < urls.count {
        let end = min(start + 1000, urls.count)
        try pool.write { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO jobs (id, url, path, state) VALUES (?, ?, ?, 0)")
            for index in start..<end {
                try insert.execute(arguments: [index, urls[index], output + "/" + fileName(of: urls[index])])
            }
        }
        start = end
    }
    return pool
}()

@Sendable func fileName(of url: String) -> String { url.split(separator: "/").last.map(String.init) ?? "index" }
let pool = NIOThreadPool(numberOfThreads: 8)
pool.start()

/// Fetches the URL at `index` into OUTDIR/<last path component>, as MODE says.
@Sendable func fetch(_ index: Int) async throws {
    let url = urls[index]
    let name = fileName(of: url)
    switch mode {
    case "delegate":
        let delegate = try FileDownloadDelegate(path: output + "/" + name)
        let response = try await client.execute(request: try HTTPClient.Request(url: url), delegate: delegate).get()
        guard response.head.status == .ok else { throw Failure("\(url): \(response.head.status)") }
    default:
        let response = try await client.execute(request: try HTTPClient.Request(url: url)).get()
        guard response.status == .ok, let body = response.body else { throw Failure("\(url): \(response.status)") }
        let path = output + "/" + name
        switch mode {
        case "onehop": try await pool.runIfActive { try writeAtomically(body, to: path) }
        case "batch": try await batches.write(body, to: path)
        case "journal": try await batches.write(body, to: path, row: index)
        default: return
        }
    }
}

/// Bodies waiting for the next pool hop, written together.
final class Batches: Sendable {
    typealias Pending = (body: ByteBuffer, path: String, row: Int?, done: CheckedContinuation<Void, any Error>)
    private let state = NIOLockedValueBox<(pending: [Pending], hopping: Bool)>(([], false))

    /// Writes `body` to `path` in the next hop; with a journal `row`, syncs it first and
    /// marks the row completed once the batch's renames are durable.
    func write(_ body: ByteBuffer, to path: String, row: Int? = nil) async throws {
        try await withCheckedThrowingContinuation { continuation in
            let start = state.withLockedValue { state -> Bool in
                state.pending.append((body, path, row, continuation))
                if state.hopping { return false }
                state.hopping = true
                return true
            }
            if start { pool.submit { _ in self.drain() } }
        }
    }

    /// On a pool thread: writes what is pending, then what came meanwhile, until nothing is.
    private func drain() {
        while true {
            let batch = state.withLockedValue { state -> [Pending] in
                defer { state.pending = [] }
                if state.pending.isEmpty { state.hopping = false }
                return state.pending
            }
            if batch.isEmpty { return }
            guard let journal else {
                for item in batch {
                    do {
                        try writeAtomically(item.body, to: item.path)
                        item.done.resume()
                    } catch {
                        item.done.resume(throwing: error)
                    }
                }
                continue
            }
            do {
                for item in batch { try writeAtomically(item.body, to: item.path, syncing: true) }
                let directory = open(output, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                guard directory >= 0, fsync(directory) == 0 else { throw Failure("fsync \(output): errno \(errno)") }
                close(directory)
                try journal.write { db in
                    let complete = try db.cachedStatement(sql: "UPDATE jobs SET state = 2, size = ? WHERE id = ?")
                    for item in batch { try complete.execute(arguments: [item.body.readableBytes, item.row]) }
                }
                for item in batch { item.done.resume() }
            } catch {
                for item in batch { item.done.resume(throwing: error) }
            }
        }
    }
}
let batches = Batches()

/// Opens a temporary file beside `path`, writes `body`, closes it and renames it into place.
@Sendable func writeAtomically(_ body: ByteBuffer, to path: String, syncing: Bool = false) throws {
    let temporary = path + ".part"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw Failure("open \(temporary): errno \(errno)") }
    var written = 0
    let ok = body.withUnsafeReadableBytes { bytes -> Bool in
        while written < bytes.count {
            let n = write(fd, bytes.baseAddress! + written, bytes.count - written)
            if n <= 0 { return false }
            written += n
        }
        return true
    }
    let synced = !syncing || fsync(fd) == 0
    close(fd)
    guard ok, synced else { throw Failure("write \(temporary): errno \(errno)") }
    guard rename(temporary, path) == 0 else { throw Failure("rename \(temporary): errno \(errno)") }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

var failed = false
do {
    try await withThrowingTaskGroup(of: Void.self) { group in
        var pending = urls.indices.makeIterator()
        for _ in 0..<parallel {
            guard let index = pending.next() else { break }
            group.addTask { try await fetch(index) }
        }
        while try await group.next() != nil {
            if let index = pending.next() { group.addTask { try await fetch(index) } }
        }
    }
} catch {
    FileHandle.standardError.write(Data("haul-client-baseline: \(error)\n".utf8))
    failed = true
}
try await client.shutdown().get()
exit(failed ? 1 : 0)
