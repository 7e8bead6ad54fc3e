import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Speed limits against the fault server. These assert what a limit guarantees however
/// loaded the machine is: a download cannot finish sooner than its bytes allow (a slow
/// machine only makes it later), and a raised limit lets one finish that would otherwise
/// outlast the test's time limit. The accuracy figures (±5% windows, bursts, CPU) are
/// measured by `Benchmarks/rate-limit.sh`.
@Suite("Rate limits", .timeLimit(.minutes(4)))
struct RateLimitTests {
    @Test func aDownloadLimitHoldsItsBytesBack() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("limited", count: 1 << 20)
            var request = DownloadRequest(url: f.server.url("/files/limited"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 512 << 10

            let started = ContinuousClock.now
            let result = try await f.manager.download(request).result
            let elapsed = ContinuousClock.now - started

            // 1 MiB at 512 KiB/s, less a burst of 128 KiB (a quarter second) and a part
            #expect(elapsed >= .milliseconds(1_400), "took \(elapsed)")
            #expect(sha256(try Data(contentsOf: result.fileURL!)) == sha256(bytes))
        }
    }

    /// A low limit is not met by reading 256 KiB at once and then nothing for seconds: the
    /// download asks for 1/16 of a second's bytes at a time, so that every read is small.
    @Test func aLowLimitIsFetchedInSmallRanges() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("paced", count: 1 << 20)
            var request = DownloadRequest(url: f.server.url("/files/paced"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 1 << 20

            let result = try await f.manager.download(request).result

            #expect(sha256(try Data(contentsOf: result.fileURL!)) == sha256(bytes))
            // The first request learns the size and is cut after its head; the rest ask
            // for 64 KiB each, from where the last one ended
            let requests = f.server.requests(path: "/files/paced")
            let ranges = requests.dropFirst().compactMap { request in
                request.headers.first { $0.name.lowercased() == "range" }?.value
            }
            #expect(requests.first.map { request in !request.headers.contains { $0.name.lowercased() == "range" } } == true)
            #expect(ranges == stride(from: 0, to: 1 << 20, by: 65_536).map { "bytes=\($0)-\($0 + 65_535)" })
        }
    }

    /// A limit lowered while long range requests run stops them, and the rest is fetched in
    /// paced steps.
    @Test func aLimitLoweredMidTransferPacesTheRest() async throws {
        try await Fixture.with({
            $0.segmentedConnections = 2
            $0.segmentationThreshold = 1 << 20
        }) { f in
            // Every response sends its first MiB, then trickles at 512 KiB/s (above the lowered
            // limit, so the limit holds it back) until the gate opens: the long requests cannot
            // end within the suite's time limit, so they are still running whenever this loop
            // sees the progress past 1 MiB, however late. The paced requests (16 KiB) never
            // reach the gate; it opens once the limit is lifted.
            let bytes = f.serve("lowered", count: 32 << 20)
            var request = DownloadRequest(
                url: f.server.url("/files/lowered?gate=lowered&gate_after=\(1 << 20)&gate_rate=\(512 << 10)"),
                destination: .directory(f.directory))
            request.maxBytesPerSecond = 8 << 20
            let handle = try await f.manager.download(request)
            var lowered = false
            var lifted = false
            for await event in handle.events {
                guard case .progress(let progress) = event else {
                    if event.isTerminal { break }
                    continue
                }
                if !lowered, progress.completedBytes >= 1 << 20 {
                    // At 256 KiB/s, requests of 16 KiB
                    await handle.setRateLimit(256 << 10)
                    lowered = true
                } else if lowered, !lifted, pacedRanges(f.server.requests(path: "/files/lowered")).count >= 4 {
                    await handle.setRateLimit(nil)
                    f.server.release("lowered")
                    lifted = true
                }
            }
            let result = try await handle.result
            #expect(lifted)
            #expect(sha256(try Data(contentsOf: result.fileURL!)) == sha256(bytes))
        }
    }

    /// The ranges of 16 KiB among `requests`.
    private func pacedRanges(_ requests: [RecordedRequest]) -> [String] {
        requests.compactMap { request in
            guard let range = request.headers.first(where: { $0.name.lowercased() == "range" })?.value else { return nil }
            let bounds = range.dropFirst(6).split(separator: "-").compactMap { Int($0) }
            return bounds.count == 2 && bounds[1] - bounds[0] + 1 == 16_384 ? range : nil
        }
    }

    /// A paced download that is stopped resumes in the same small steps where it stood.
    @Test func aPacedDownloadResumesWhereItStood() async throws {
        try await Fixture.with(journal: true) { f in
            let bytes = f.serve("paced-resume", count: 1 << 20)
            var request = DownloadRequest(
                url: f.server.url("/files/paced-resume"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 512 << 10
            let handle = try await f.manager.download(request)
            for await event in handle.events {
                if case .progress(let progress) = event, progress.completedBytes >= 256 << 10 { break }
            }
            await f.manager.shutdown()
            let stoppedAt = f.server.requests(path: "/files/paced-resume").count

            let later = f.makeManager()
            #expect(try await later.resumeUnfinished() == 1)
            await later.waitUntilIdle()
            await later.shutdown()

            let file = f.directory.appendingPathComponent("paced-resume")
            #expect(sha256(try Data(contentsOf: file)) == sha256(bytes))
            // The second run went on in requests of 32 KiB, not from zero, and not all at once
            let resumed = f.server.requests(path: "/files/paced-resume").dropFirst(stoppedAt).compactMap { request in
                request.headers.first { $0.name.lowercased() == "range" }?.value
            }
            let starts = resumed.compactMap { Int($0.dropFirst(6).split(separator: "-")[0]) }
            let lengths = resumed.compactMap { range -> Int? in
                let bounds = range.dropFirst(6).split(separator: "-").compactMap { Int($0) }
                return bounds.count == 2 ? bounds[1] - bounds[0] + 1 : nil
            }
            #expect(starts.first.map { $0 >= 256 << 10 } == true)
            #expect(lengths.count == resumed.count && lengths.allSatisfy { $0 <= 32_768 })
            #expect(starts.last.map { $0 + 32_768 >= 1 << 20 } == true)
        }
    }

    /// The progress a download ends with says which limit it ran under (the manager has
    /// forgotten the download's own limit by then).
    @Test func theLastProgressCarriesTheLimit() async throws {
        try await Fixture.with { f in
            f.serve("last", count: 100_000)
            var request = DownloadRequest(url: f.server.url("/files/last"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 4 << 20
            let handle = try await f.manager.download(request)
            var last: DownloadProgress?
            for await event in handle.events {
                if case .progress(let progress) = event { last = progress }
                if event.isTerminal { break }
            }
            _ = try await handle.result
            #expect(last?.completedBytes == 100_000)
            #expect(last?.limit == 4 << 20)
        }
    }

    @Test func manySmallFilesAreLimitedAsAWhole() async throws {
        try await Fixture.with({ $0.maxBytesPerSecond = 256 << 10 }) { f in
            var requests: [DownloadRequest] = []
            for index in 0..<32 {
                f.serve("s\(index)", count: 16 << 10, seed: UInt64(index + 1))
                requests.append(DownloadRequest(url: f.server.url("/files/s\(index)"), destination: .directory(f.directory)))
            }
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for request in requests {
                    let handle = try await f.manager.download(request)
                    group.addTask { _ = try await handle.result }
                }
                try await group.waitForAll()
            }
            let elapsed = ContinuousClock.now - started

            // 512 KiB in files of 16 KiB at 256 KiB/s overall, less a burst of 64 KiB
            #expect(elapsed >= .milliseconds(1_500), "took \(elapsed)")
            #expect(f.manager.overallRateLimit == 256 << 10)
        }
    }

    @Test func raisingALimitMidTransferTakesEffect() async throws {
        try await Fixture.with { f in
            // 4 MiB at 64 KiB/s would take a minute, past the time limit
            let bytes = f.serve("raised", count: 4 << 20)
            var request = DownloadRequest(url: f.server.url("/files/raised"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 64 << 10
            let handle = try await f.manager.download(request)
            var limit: Int?
            for await event in handle.events {
                if case .progress(let progress) = event, progress.completedBytes > 0 {
                    limit = progress.limit
                    break
                }
            }
            // Progress says which limit holds it
            #expect(limit == 64 << 10)

            // Lifted once bytes flow: it finishes, with the right bytes
            await handle.setRateLimit(nil)
            let result = try await handle.result
            #expect(sha256(try Data(contentsOf: result.fileURL!)) == sha256(bytes))
        }
    }

    @Test func anOverallLimitCanBeSetWhileDownloadsRun() async throws {
        try await Fixture.with({ $0.maxBytesPerSecond = 64 << 10 }) { f in
            let bytes = f.serve("overall", count: 4 << 20)
            let handle = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/overall"), destination: .directory(f.directory)))
            for await event in handle.events {
                if case .progress = event { break }
            }
            f.manager.setRateLimits(overall: nil, perHost: nil)
            #expect(f.manager.overallRateLimit == nil)
            let result = try await handle.result
            #expect(sha256(try Data(contentsOf: result.fileURL!)) == sha256(bytes))
        }
    }

    @Test func aDownloadsOwnLimitIsKeptInTheJournal() async throws {
        try await Fixture.with(journal: true) { f in
            // A download with its own limit, stopped as a process stops
            f.serve("kept", count: 10_000)
            var request = DownloadRequest(url: f.server.url("/files/kept?gate=k"), destination: .directory(f.directory))
            request.maxBytesPerSecond = 300_000
            try await f.manager.enqueue([request])
            await f.server.waitForGateWaiters("k", count: 1)
            await f.manager.shutdown()

            // The next process resumes it with its limit
            let later = f.makeManager()
            #expect(try await later.resumeUnfinished() == 1)
            #expect(await later.rateLimit(of: request.id) == 300_000)
            // A change is kept too
            #expect(try await later.apply(.rateLimit(150_000), to: [request.id]) == [request.id])
            await later.shutdown()
            let third = f.makeManager()
            #expect(try await third.resumeUnfinished() == 1)
            #expect(await third.rateLimit(of: request.id) == 150_000)
            f.server.release("k")
            await third.waitUntilIdle()
            await third.shutdown()
        }
    }

    @Test func aShutdownDoesNotWaitOutAHeldPart() async throws {
        try await Fixture.with({ $0.maxBytesPerSecond = 64 }) { f in
            // At 64 bytes/s, what goes past the first burst (64 KiB) is held for minutes (the
            // server offers no ranges, so the download is one request, read as it comes)
            f.serve("held", count: 1 << 20)
            let handle = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/held?ignore_range=1"), destination: .directory(f.directory)))
            for await event in handle.events {
                if case .progress(let progress) = event, progress.completedBytes > 65_536 { break }
            }
            // The shutdown returns, and the download ends paused or cancelled, not completed: a
            // shutdown that waited out the held part would run past the suite's time limit
            // (a minute) instead. (No clock here: how long a loaded machine takes is not the test.)
            await f.manager.shutdown()
            #expect(!f.listing().contains("held"), "\(f.listing())")
        }
    }
}
