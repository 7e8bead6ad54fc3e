// The rolling-checksum scan of a zsync seed (issue 45: "report the scan's MB/s").
//
//     HAUL_BENCHMARKS=1 swift build -c release --static-swift-stdlib --scratch-path .build-bench --product haul-zsync-scan
//     .build-bench/release/haul-zsync-scan [MIB] [BLOCK] [THREADS]
//
// Makes an old version of MIB MiB (default 256) of random bytes and a new one with 100
// bytes inserted and 1 KiB changed every 8 MiB, describes the new one as zsyncmake would
// (blocks of BLOCK bytes, default 2048, Hash-Lengths 2,3,5: what zsyncmake picks for files
// of this size), then scans the old one for its blocks: on one thread, then in THREADS
// parts (default: the cores) with a matcher each, merged. Prints each scan's time, MB/s of
// seed and the blocks found. Times are of the scan alone, in memory: no file I/O.

import Dispatch
import Foundation
import Haul

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let mebibytes = arguments.count > 0 ? arguments[0] : 256
let blockSize = arguments.count > 1 ? arguments[1] : 2048
let threads = arguments.count > 2 ? arguments[2] : ProcessInfo.processInfo.activeProcessorCount

func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { raw in
        let words = raw.bindMemory(to: UInt64.self)
        for index in words.indices {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            words[index] = state
        }
    }
    return bytes
}

let old = randomBytes(mebibytes << 20, seed: 0x5eed)
var target: [UInt8] = []
target.reserveCapacity(old.count + old.count / (8 << 20) * 100)
var offset = 0
var piece: UInt64 = 1
while offset < old.count {
    let end = min(offset + (8 << 20), old.count)
    target += old[offset..<end]
    if end < old.count {
        target += randomBytes(100, seed: piece)
        let changed = target.count - (4 << 20)
        target.replaceSubrange(changed..<changed + 1024, with: randomBytes(1024, seed: piece &* 31))
    }
    piece += 1
    offset = end
}

/// The seed and the results, read and written by the parts' threads: each part writes its
/// own slot only, and the caller reads them after `concurrentPerform` returns.
struct Shared: @unchecked Sendable {
    let seed: UnsafeRawBufferPointer
    let results: UnsafeMutableBufferPointer<BlockMatcher?>
}

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

let clock = ContinuousClock()
var describeTime = Duration.zero
let control = target.withUnsafeBytes { bytes in
    var control: ZsyncControl!
    describeTime = clock.measure {
        control = ZsyncControl.describing(
            bytes, blockSize: blockSize, sequenceMatches: 2, rsumBytes: 3, checksumBytes: 5, filename: "new.bin",
            modificationTime: nil, urls: ["new.bin"])
    }
    return control!
}
print("target \(target.count) bytes, \(control.table.count) blocks of \(blockSize); described in \(String(format: "%.2f", seconds(describeTime))) s")

func report(_ label: String, _ time: Duration, _ matcher: BlockMatcher) {
    let rate = Double(old.count) / seconds(time) / 1e6
    let missing = matcher.missingRanges().reduce(0) { $0 + $1.count }
    print(
        "\(label): \(String(format: "%.3f", seconds(time))) s, \(String(format: "%.0f", rate)) MB/s of seed; "
            + "\(matcher.foundCount) of \(control.table.count) blocks found, \(missing) bytes to fetch")
}

var single = BlockMatcher(control)
let singleTime = old.withUnsafeBytes { seed in clock.measure { single.scan(seed) } }
report("1 thread", singleTime, single)

let parts = max(1, threads)
let length = old.count
let partsTime = old.withUnsafeBytes { seed in
    clock.measure {
        let results = UnsafeMutableBufferPointer<BlockMatcher?>.allocate(capacity: parts)
        results.initialize(repeating: nil)
        defer { results.deallocate() }
        let shared = Shared(seed: seed, results: results)
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            var matcher = BlockMatcher(control)
            let start = length / parts * part
            let end = part == parts - 1 ? length : length / parts * (part + 1)
            matcher.scan(shared.seed, windows: start..<end)
            shared.results[part] = matcher
        }
        var merged = BlockMatcher(control)
        for matcher in results { if let matcher { merged.merge(matcher) } }
        single = merged
    }
}
report("\(parts) threads", partsTime, single)
