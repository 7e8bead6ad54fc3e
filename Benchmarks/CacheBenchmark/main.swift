// haul-cache-benchmark: a list of small images fetched twice (a first pass, then a second
// over the same list), through Haul's cache or through URLSession with a URLCache of the
// same sizes. Used by Benchmarks/cache.sh, which serves the list with nginx and counts from
// its access log what reached the server in each pass.
//
//     haul-cache-benchmark haul|urlsession BASE_URL LIST_FILE CACHE_DIR [IN_FLIGHT]
//
// LIST_FILE holds one path per line. Before each pass a marker request
// (`BASE_URL/marker-pass-N`, a 404) goes out, so the log can be split by pass. Prints one
// JSON object: each pass's seconds and where its answers came from (Haul's
// `DownloadResult.source`), the process's peak RSS and its RSS after the passes, and for
// Haul the latency of a memory hit (`ResponseCache.freshDataInMemory`), of a disk hit (a
// new manager on the same directory, `ResponseCache.freshData`), and of a whole
// `download(_:)` answered from memory (medians, in microseconds).

import Foundation
import Haul

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

let arguments = CommandLine.arguments
guard arguments.count >= 5, arguments[1] == "haul" || arguments[1] == "urlsession", let base = URL(string: arguments[2])
else {
    FileHandle.standardError.write(
        Data("usage: haul-cache-benchmark haul|urlsession BASE_URL LIST_FILE CACHE_DIR [IN_FLIGHT]\n".utf8))
    exit(2)
}
let paths = try String(contentsOfFile: arguments[3], encoding: .utf8).split(separator: "\n").map(String.init)
let urls = paths.map { URL(string: base.absoluteString + $0)! }
let cacheDirectory = URL(fileURLWithPath: arguments[4], isDirectory: true)
let inFlight = arguments.count > 5 ? Int(arguments[5]) ?? 16 : 16
/// The same sizes for both: 32 MiB in memory, 100 MB on disk.
let memoryLimit = 32 << 20
let diskLimit = 100_000_000

func seconds(since start: ContinuousClock.Instant) -> Double {
    let elapsed = ContinuousClock.now - start
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
}

/// Resident and peak resident memory, in bytes (Linux: /proc/self/status).
func memory() -> (rss: Int, peak: Int) {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
        return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
    }
    return (field("VmRSS"), field("VmHWM"))
}

/// Runs `body` for every URL, at most `inFlight` at once; returns the outcomes' counts.
func runPass(_ body: @escaping @Sendable (URL) async -> String) async -> [String: Int] {
    await withTaskGroup(of: String.self) { group in
        var counts: [String: Int] = [:]
        var next = 0
        while next < min(inFlight, urls.count) {
            let url = urls[next]
            group.addTask { await body(url) }
            next += 1
        }
        while let outcome = await group.next() {
            counts[outcome, default: 0] += 1
            if next < urls.count {
                let url = urls[next]
                group.addTask { await body(url) }
                next += 1
            }
        }
        return counts
    }
}

var report: [String: Any] = ["tool": arguments[1], "images": urls.count, "inFlight": inFlight]

if arguments[1] == "haul" {
    var configuration = DownloadManager.Configuration()
    configuration.cache = ResponseCache.Configuration(
        directory: cacheDirectory, memoryCostLimit: memoryLimit, diskSizeLimit: Int64(diskLimit))
    let manager = DownloadManager(configuration: configuration)
    let marker = DownloadManager(configuration: DownloadManager.Configuration())
    let fetch: @Sendable (URL) async -> String = { url in
        do {
            let result = try await manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20)))
                .result
            return result.source.rawValue
        } catch {
            return "failed"
        }
    }
    for pass in 1...2 {
        var request = DownloadRequest(url: base.appendingPathComponent("marker-pass-\(pass)"), destination: .memory(limit: 1024))
        request.cachePolicy = .reloadIgnoringCache
        _ = try? await marker.download(request).result
        let start = ContinuousClock.now
        let counts = await runPass(fetch)
        report["pass\(pass)Seconds"] = seconds(since: start)
        report["pass\(pass)Sources"] = counts
    }
    let cache = try require_cache(manager.cache)
    // A memory hit: the last images of the list are in memory (LRU).
    let inMemory = urls.suffix(200).filter { cache.freshDataInMemory(for: $0) != nil }
    var memoryHits: [Double] = []
    for _ in 0..<5 {
        for url in inMemory {
            let start = ContinuousClock.now
            let data = cache.freshDataInMemory(for: url)
            memoryHits.append(seconds(since: start) * 1e6)
            precondition(data != nil)
        }
    }
    report["memoryHitMicroseconds"] = median(memoryHits)
    report["memoryHitSamples"] = memoryHits.count
    var downloads: [Double] = []
    for url in inMemory {
        let start = ContinuousClock.now
        let result = try await manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20))).result
        downloads.append(seconds(since: start) * 1e6)
        precondition(result.source == .memory)
    }
    report["memoryDownloadMicroseconds"] = median(downloads)
    let usage = cache.usage
    report["memoryTierBytes"] = usage.memoryBytes
    await cache.sweep()
    report["diskTierBytes"] = cache.usage.diskBytes
    let (rss, peak) = memory()
    report["rssAfterPasses"] = rss
    report["peakRSS"] = peak
    await manager.shutdown()
    await marker.shutdown()

    // A disk hit: a new manager on the same directory, its memory empty.
    let later = DownloadManager(configuration: configuration)
    let laterCache = try require_cache(later.cache)
    var diskHits: [Double] = []
    for url in urls.prefix(500) {
        let start = ContinuousClock.now
        let data = await laterCache.freshData(for: url)
        if data != nil { diskHits.append(seconds(since: start) * 1e6) }
    }
    report["diskHitMicroseconds"] = median(diskHits)
    report["diskHitSamples"] = diskHits.count
    // The floor under a disk hit: a trip to the manager's I/O threads and back with no work.
    var hops: [Double] = []
    for _ in 0..<500 {
        let start = ContinuousClock.now
        _ = try? await later.threadPool.perform { () throws(DownloadError) in 0 }
        hops.append(seconds(since: start) * 1e6)
    }
    report["ioHopMicroseconds"] = median(hops)
    await later.shutdown()
} else {
    let configuration = URLSessionConfiguration.default
    configuration.urlCache = URLCache(memoryCapacity: memoryLimit, diskCapacity: diskLimit, diskPath: cacheDirectory.path)
    configuration.requestCachePolicy = .useProtocolCachePolicy
    configuration.httpMaximumConnectionsPerHost = 6
    let session = URLSession(configuration: configuration)
    let fetch: @Sendable (URL) async -> String = { url in
        await withCheckedContinuation { continuation in
            session.dataTask(with: url) { data, response, error in
                let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                continuation.resume(returning: error == nil && status == 200 && data != nil ? "ok" : "failed \(status)")
            }.resume()
        }
    }
    for pass in 1...2 {
        _ = await fetch(base.appendingPathComponent("marker-pass-\(pass)"))
        let start = ContinuousClock.now
        let counts = await runPass(fetch)
        report["pass\(pass)Seconds"] = seconds(since: start)
        report["pass\(pass)Sources"] = counts
    }
    let (rss, peak) = memory()
    report["rssAfterPasses"] = rss
    report["peakRSS"] = peak
    session.invalidateAndCancel()
}

let json = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys])
print(String(decoding: json, as: UTF8.self))

/// The manager's cache, which the configuration asked for.
func require_cache(_ cache: ResponseCache?) throws -> ResponseCache {
    guard let cache else { throw CocoaError(.featureUnsupported) }
    return cache
}
