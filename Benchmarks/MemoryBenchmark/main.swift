// Downloads COUNT (default 5,000) files of 16 KiB from the in-process fault server through
// a DownloadManager without a journal, 16 in flight, into memory (`.memory(limit:)`) and
// to files in a temporary directory, alternating for ROUNDS (default 3) rounds of each, and
// prints the median files/s of each and their ratio. The goal: memory at least as
// fast as files (ratio at least 1.0).
//
//     HAUL_BENCHMARKS=1 swift run -c release haul-memory-benchmark [COUNT] [ROUNDS]
//
// The server runs in the same process, on its own event loops, as in the queue benchmark:
// both destinations pay for it alike.

import Foundation
import Haul
import HaulTestSupport

let arguments = CommandLine.arguments.dropFirst()
let count = arguments.first.flatMap { Int($0) } ?? 5_000
let rounds = arguments.dropFirst().first.flatMap { Int($0) } ?? 3
let size = 16 << 10

let server = try await FaultServer.start()
server.setFile("small", FaultServer.randomBytes(count: size, seed: 5))
let root = FileManager.default.temporaryDirectory.appendingPathComponent("haul-memory-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)

var configuration = DownloadManager.Configuration()
configuration.maxConcurrentDownloads = 16
configuration.maxConnectionsPerHost = 16

enum Destination: String, CaseIterable {
    case memory, files
}

/// Seconds to download `count` files to `destination` with a fresh manager; checks sizes.
@MainActor
func measure(_ destination: Destination, round: Int) async throws -> Double {
    let directory = root.appendingPathComponent("\(destination)-\(round)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    let manager = DownloadManager(configuration: configuration)
    let start = ContinuousClock.now
    var handles: [DownloadHandle] = []
    handles.reserveCapacity(count)
    for index in 0..<count {
        // A distinct URL per file and round, so nothing joins an earlier download.
        let url = server.url("/files/small?r=\(round)&n=\(index)")
        let target: DownloadDestination =
            destination == .memory ? .memory(limit: 1 << 20) : .directory(directory, name: "f\(index)")
        handles.append(try await manager.download(DownloadRequest(url: url, destination: target)))
    }
    var bytes: Int64 = 0
    for handle in handles {
        let result = try await handle.result
        bytes += destination == .memory ? Int64(result.data?.count ?? 0) : result.byteCount
    }
    let elapsed = ContinuousClock.now - start
    await manager.shutdown()
    try? FileManager.default.removeItem(at: directory)
    guard bytes == Int64(count * size) else {
        throw BenchmarkFailure("\(destination): got \(bytes) bytes, expected \(count * size)")
    }
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

struct BenchmarkFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// One warm-up of each, not counted, then alternating rounds.
var seconds: [Destination: [Double]] = [:]
for destination in Destination.allCases { _ = try await measure(destination, round: -1) }
for round in 0..<rounds {
    for destination in Destination.allCases {
        let time = try await measure(destination, round: round)
        seconds[destination, default: []].append(time)
        print("round \(round + 1), \(destination.rawValue): " + String(format: "%.2f s (%.0f files/s)", time, Double(count) / time))
    }
}
try? FileManager.default.removeItem(at: root)
try await server.shutdown()

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
let memory = Double(count) / median(seconds[.memory]!)
let files = Double(count) / median(seconds[.files]!)
print("memory benchmark: \(count) x 16 KiB, 16 in flight, medians of \(rounds) rounds")
print(String(format: "  memory: %.0f files/s", memory))
print(String(format: "  files:  %.0f files/s", files) + " (in \(root.deletingLastPathComponent().path))")
print(String(format: "  memory / files: %.2fx", memory / files))
