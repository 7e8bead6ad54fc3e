// Enqueues many URLs against the in-process fault server through a journaled
// DownloadManager and reports insert rate, time to first byte and peak RSS.
//
//     HAUL_BENCHMARKS=1 swift run -c release haul-queue-benchmark [COUNT] [--drain]
//
// COUNT defaults to 100000. Without --drain it stops after the first 1,000 downloads
// complete (enough to see steady state); with --drain it downloads everything.

import Foundation
import Haul
import HaulTestSupport

#if canImport(Glibc)
import Glibc
#endif

func peakRSSMegabytes() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_maxrss) / 1024  // kilobytes on Linux
}

let arguments = CommandLine.arguments.dropFirst()

// `throughput`: what the journal costs one large download (checkpoints fsync the partial
// once a second or every 8 MiB). Median of 3 runs each, with and without a journal.
if arguments.first == "throughput" {
    let size = 512 << 20
    let server = try await FaultServer.start()
    server.setFile("large", FaultServer.randomBytes(count: size, seed: 3))
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-tp-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    var rates: [String: [Double]] = [:]
    for round in 0..<3 {
        for journaled in [false, true] {
            let journal = journaled ? try Journal(path: root.appendingPathComponent("j\(round).sqlite").path) : nil
            let manager = DownloadManager(journal: journal)
            let target = root.appendingPathComponent("large-\(round)-\(journaled)")
            let start = ContinuousClock.now
            _ = try await manager.download(
                DownloadRequest(url: server.url("/files/large"), destination: .file(target))
            ).result
            let elapsed = ContinuousClock.now - start
            await manager.shutdown()
            try? FileManager.default.removeItem(at: target)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            rates[journaled ? "journal" : "no journal", default: []].append(Double(size) / seconds / 1e6)
        }
    }
    try? FileManager.default.removeItem(at: root)
    try await server.shutdown()
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    let plain = median(rates["no journal"]!)
    let journaled = median(rates["journal"]!)
    print(String(format: "throughput, 512 MiB, one connection: %.0f MB/s without journal, %.0f MB/s with (%.3fx)", plain, journaled, journaled / plain))
    exit(0)
}

let count = arguments.first.flatMap { Int($0) } ?? 100_000
let drain = arguments.contains("--drain")

let server = try await FaultServer.start()
server.setFile("small", FaultServer.randomBytes(count: 1024, seed: 7))
let root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-queue-bench-\(UUID().uuidString)")
let downloads = root.appendingPathComponent("files")
try FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: root) }

let journal = try Journal(path: root.appendingPathComponent("journal.sqlite").path)
var configuration = DownloadManager.Configuration()
configuration.maxConcurrentDownloads = 16
configuration.maxConnectionsPerHost = 16
let manager = DownloadManager(configuration: configuration, journal: journal)

let start = ContinuousClock.now
let events = manager.events
let watcher = Task { () -> (firstByte: Duration?, completed: Int) in
    var firstByte: Duration?
    var completed = 0
    for await event in events {
        switch event.event {
        case .progress(let progress) where progress.completedBytes > 0 && firstByte == nil:
            firstByte = ContinuousClock.now - start
        case .completed:
            completed += 1
            if !drain && completed == 1_000 { return (firstByte, completed) }
        default:
            break
        }
    }
    return (firstByte, completed)
}

var insertTime: Duration = .zero
let batch = 10_000
var next = 0
while next < count {
    let upper = min(count, next + batch)
    let requests = (next..<upper).map { index in
        DownloadRequest(
            url: server.url("/files/small?n=\(index)"), destination: .directory(downloads, name: "f\(index)"))
    }
    let before = ContinuousClock.now
    try await manager.enqueue(requests)
    insertTime += ContinuousClock.now - before
    next = upper
}
let enqueued = ContinuousClock.now - start
if drain { await manager.waitUntilIdle() }
let (firstByte, completed) = drain ? await { await manager.shutdown(); return await watcher.value }() : await watcher.value
let total = ContinuousClock.now - start
if !drain { await manager.shutdown() }
try await server.shutdown()

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}
print("queue benchmark: \(count) URLs")
print(String(format: "  rows inserted per second: %.0f (%.2f s in enqueue)", Double(count) / seconds(insertTime), seconds(insertTime)))
print(String(format: "  time to first byte:       %.3f s", firstByte.map(seconds) ?? -1))
print(String(format: "  all enqueued after:       %.2f s", seconds(enqueued)))
print(String(format: "  completed:                %d in %.2f s (%.0f files/s)", completed, seconds(total), Double(completed) / seconds(total)))
print(String(format: "  peak RSS:                 %.1f MB", peakRSSMegabytes()))
