import Foundation
import Haul
import HaulTestSupport
import Testing

/// The scheduler's decisions seen on the wire, one end-to-end check per policy (slots, the
/// per-host cap with kept-alive connections, priority order, replace-oldest): the policies
/// themselves are table-tested without sockets in `SchedulerMachineTests`.
@Suite("Scheduling (end to end)")
struct SchedulingTests {
    @Test func neverMoreThanTheSlotLimitInFlight() async throws {
        try await Fixture.with({ $0.maxConcurrentDownloads = 3 }) { f in
            let bytes = f.serve("s", count: 10_000)
            var handles: [DownloadHandle] = []
            for index in 0..<8 {
                handles.append(try await f.manager.download(f.request("/files/s?gate=g&n=\(index)", to: "s\(index)")))
            }
            await f.server.waitForGateWaiters("g", count: 3)
            let progress = await f.manager.progress
            #expect(progress.running == 3)
            #expect(progress.queued == 5)
            f.server.release("g")
            for handle in handles { _ = try await handle.result }
            #expect(f.server.statistics.maxInFlightRequests == 3)
            #expect((0..<8).allSatisfy { sha256(f.contents("s\($0)")) == sha256(bytes) })
            let done = await f.manager.progress
            #expect(done.completed == 8)
            #expect(done.completedBytes == 80_000)
        }
    }

    /// Many small files reuse a few kept-alive connections: never more than the per-host cap.
    @Test func smallFilesReuseKeptAliveConnections() async throws {
        try await Fixture.with({
            $0.maxConcurrentDownloads = 8
            $0.maxConnectionsPerHost = 4
        }) { f in
            f.serve("tiny", count: 2_000)
            var handles: [DownloadHandle] = []
            for index in 0..<200 {
                handles.append(
                    try await f.manager.download(f.request("/files/tiny?n=\(index)", to: "tiny-\(index)")))
            }
            for handle in handles { _ = try await handle.result }
            let statistics = f.server.statistics
            #expect(statistics.totalRequests == 200)
            #expect(statistics.maxOpenConnections <= 4)
            #expect(statistics.connectionsAccepted <= 8, "\(statistics.connectionsAccepted) connections for 200 requests")
        }
    }

    @Test func perHostCapHoldsAcrossDownloads() async throws {
        // Held requests must not time out and retry while the test waits for the four (on a
        // loaded machine that took longer than the default 10 s once).
        try await Fixture.with({ $0.maxConnectionsPerHost = 2; $0.idleTimeout = .seconds(600) }) { f in
            f.serve("h", count: 1000)
            var handles: [DownloadHandle] = []
            for index in 0..<6 {
                // Two host names for the same server: the cap is per host.
                let host = index % 2 == 0 ? "127.0.0.1" : "localhost"
                let url = URL(string: "http://\(host):\(f.server.port)/files/h?gate=g&n=\(index)")!
                handles.append(try await f.manager.download(
                    DownloadRequest(url: url, destination: .directory(f.directory, name: "h\(index)"))))
            }
            await f.server.waitForGateWaiters("g", count: 4)
            // While four are held, two per host, the other two wait for a slot: the server
            // has had four requests in flight at most, and the manager runs four.
            let progress = await f.manager.progress
            #expect(progress.running == 4)
            #expect(progress.queued == 2)
            #expect(f.server.statistics.maxInFlightRequests == 4)
            f.server.release("g")
            for handle in handles { _ = try await handle.result }
            // (Not counted once released: the server marks a response ended when its last
            // write completes, which can come after the client has its bytes and has sent
            // the next request, so a fifth may overlap the end of one of the four; and a
            // loaded machine may retry one.)
        }
    }

    @Test func queuedDownloadsStartByPriorityThenArrival() async throws {
        try await Fixture.with({ $0.maxConcurrentDownloads = 1 }) { f in
            f.serve("p", count: 100)
            let blocker = try await f.manager.download(f.request("/files/p?gate=g&n=blocker", to: "blocker"))
            await f.server.waitForGateWaiters("g", count: 1)
            let order: [(String, DownloadPriority)] = [
                ("low", .low), ("normal1", .normal), ("high", .high), ("normal2", .normal), ("veryHigh", .veryHigh),
                ("late", .veryLow),
            ]
            var handles = [blocker]
            for (name, priority) in order {
                handles.append(try await f.manager.download(f.request("/files/p?n=\(name)", to: name, priority: priority)))
            }
            // Raised while queued: now ahead of "normal" but behind "high".
            await handles.last!.setPriority(.high)
            f.server.release("g")
            for handle in handles { _ = try await handle.result }
            let started = f.server.requests(path: "/files/p").compactMap { $0.query["n"] }
            #expect(started == ["blocker", "veryHigh", "high", "late", "normal1", "normal2", "low"])
        }
    }

    @Test func replaceOldestEvictsAndKeepsThePartial() async throws {
        try await Fixture.with({
            $0.maxConcurrentDownloads = 2
            $0.overflowPolicy = .replaceOldest
        }) { f in
            let bytes = f.serve("e", count: 400_000)
            f.serve("other", count: 10)
            let oldest = try await f.manager.download(
                f.request("/files/e?stall_after=100000&stall_times=1", to: "e", id: "oldest"))
            let oldestEvents = oldest.events
            await firstEvent(oldestEvents) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            let second = try await f.manager.download(f.request("/files/other?gate=g", to: "second"))
            await f.server.waitForGateWaiters("g", count: 1)
            let newcomer = try await f.manager.download(f.request("/files/other", to: "newcomer"))

            let error = try #require(await failure(of: oldest))
            #expect(error.code == .cancelled)
            #expect(error.cancellationReason == .evicted)
            _ = try await newcomer.result
            let partial = try FileManager.default.attributesOfItem(atPath: f.file("e.haul-partial").path)
            let kept = try #require(partial[.size] as? Int)
            #expect(kept > 0)

            // Adding it again resumes from the kept bytes.
            f.server.release("g")
            _ = try await second.result
            _ = try await f.manager.download(
                f.request("/files/e?stall_after=100000&stall_times=1", to: "e", id: "oldest")).result
            #expect(sha256(f.contents("e")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/e").last?.header("Range") == "bytes=\(kept)-")
        }
    }
}
