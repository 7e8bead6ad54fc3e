import Foundation
import Haul
import HaulTestSupport
import Testing

/// A download through its handle and the manager's events: joining, refusing duplicates,
/// pause and resume, cancel, interest, and the story the events tell.
@Suite("Manager: downloads and their handles")
struct ManagerHandleTests {
    /// A manager stream without progress still says every change of state and the outcome,
    /// in order; the full stream has the progress too.
    @Test func managerEventsWithoutProgress() async throws {
        try await Fixture.with { f in
            f.serve("ev", count: 300_000)
            func collect(_ stream: AsyncStream<DownloadManager.Event>) -> Task<[DownloadEvent], Never> {
                Task {
                    var seen: [DownloadEvent] = []
                    for await event in stream {
                        seen.append(event.event)
                        if case .completed = event.event { break }
                    }
                    return seen
                }
            }
            let quiet = collect(f.manager.events(includingProgress: false))
            let full = collect(f.manager.events)
            let batches = f.manager.eventBatches(includingProgress: false)
            let batched = Task {
                var seen: [DownloadEvent] = []
                while let batch = await batches.next() {
                    seen += batch.map(\.event)
                    if seen.contains(where: { if case .completed = $0 { true } else { false } }) { break }
                }
                return seen
            }
            _ = try await f.manager.download(f.request("/files/ev")).result
            let quietEvents = await quiet.value
            let fullEvents = await full.value
            #expect(await batched.value.map { "\($0)" } == quietEvents.map { "\($0)" })
            let names = quietEvents.map { "\($0)".prefix { $0 != "(" } }
            #expect(names == ["queued", "started", "completed"])
            #expect(fullEvents.contains { if case .progress = $0 { true } else { false } })
            #expect(fullEvents.filter { if case .progress = $0 { false } else { true } }.count == quietEvents.count)
        }
    }

    @Test func sameIDOrDestinationJoinsOneTransfer() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("j", count: 5000)
            let first = try await f.manager.download(f.request("/files/j?gate=g", to: "j", id: "one"))
            let sameID = try await f.manager.download(f.request("/files/j?gate=g", to: "j", id: "one"))
            let sameDestination = try await f.manager.download(f.request("/files/j?gate=g", to: "j", id: "two"))
            await f.server.waitForGateWaiters("g", count: 1)
            f.server.release("g")
            let results = [try await first.result, try await sameID.result, try await sameDestination.result]
            #expect(results.allSatisfy { $0.fileURL == f.file("j") })
            #expect(f.server.requests(path: "/files/j").count == 1)
            #expect(sha256(f.contents("j")) == sha256(bytes))
        }
    }

    @Test func duplicatesCanBeRefused() async throws {
        try await Fixture.with({ $0.duplicatePolicy = .fail }) { f in
            f.serve("d", count: 10)
            let first = try await f.manager.download(f.request("/files/d?gate=g", to: "d"))
            await #expect(throws: DownloadError.self) {
                try await f.manager.download(f.request("/files/d?gate=g", to: "d"))
            }
            f.server.release("g")
            _ = try await first.result
        }
    }

    @Test func pauseKeepsThePartialAndResumeContinues() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("pr", count: 600_000)
            let handle = try await f.manager.download(f.request("/files/pr?stall_after=200000&stall_times=1"))
            let events = handle.events
            await firstEvent(events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await handle.pause()
            await firstEvent(events) { event -> Bool? in
                if case .paused = event { return true }
                return nil
            }
            #expect(await f.manager.progress.paused == 1)
            let kept = try #require(
                try FileManager.default.attributesOfItem(atPath: f.file("pr.haul-partial").path)[.size] as? Int)
            #expect(kept > 0)
            await handle.resume()
            _ = try await handle.result
            #expect(sha256(f.contents("pr")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/pr").last?.header("Range") == "bytes=\(kept)-")
            #expect(f.listing() == ["pr"])
        }
    }

    @Test func cancelDeletesThePartial() async throws {
        try await Fixture.with { f in
            f.serve("c", count: 600_000)
            let handle = try await f.manager.download(f.request("/files/c?stall_after=200000"))
            await firstEvent(handle.events) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await f.manager.cancel(id: handle.id)
            let error = try #require(await failure(of: handle))
            #expect(error.cancellationReason == .userRequested)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func cancelAllStopsQueuedAndRunning() async throws {
        try await Fixture.with({ $0.maxConcurrentDownloads = 2 }) { f in
            f.serve("ca", count: 10)
            var handles: [DownloadHandle] = []
            for index in 0..<5 {
                handles.append(try await f.manager.download(f.request("/files/ca?gate=g&n=\(index)", to: "ca\(index)")))
            }
            await f.server.waitForGateWaiters("g", count: 2)
            await f.manager.cancelAll()
            for handle in handles {
                #expect(await failure(of: handle)?.code == .cancelled)
            }
            #expect(await f.manager.activeIDs.isEmpty)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func cancellingTheAwaitingTaskWithdrawsInterest() async throws {
        try await Fixture.with { f in
            f.serve("w", count: 10)
            let handle = try await f.manager.download(f.request("/files/w?gate=g"))
            let events = f.manager.events
            await f.server.waitForGateWaiters("g", count: 1)
            let waiter = Task { await failure(of: handle) }
            waiter.cancel()
            let error = await waiter.value
            #expect(error?.cancellationReason == .noLongerWanted)
            // Nobody else wanted it, so the transfer itself is cancelled.
            let reason = await firstEvent(AsyncStream { continuation in
                Task {
                    for await event in events { continuation.yield(event.event) }
                    continuation.finish()
                }
            }) { event -> DownloadError.CancellationReason? in
                if case .cancelled(let reason) = event { return reason }
                return nil
            }
            #expect(reason == .noLongerWanted)
            #expect(await f.manager.activeIDs.isEmpty)
        }
    }

    @Test func anotherCallersInterestKeepsTheTransferGoing() async throws {
        try await Fixture.with { f in
            let bytes = f.serve("k", count: 1000)
            let first = try await f.manager.download(f.request("/files/k?gate=g"))
            let second = try await f.manager.download(f.request("/files/k?gate=g"))
            await f.server.waitForGateWaiters("g", count: 1)
            let waiter = Task { await failure(of: first) }
            waiter.cancel()
            #expect(await waiter.value?.cancellationReason == .noLongerWanted)
            f.server.release("g")
            _ = try await second.result
            #expect(sha256(f.contents("k")) == sha256(bytes))
        }
    }

    @Test func managerEventsTellTheWholeStory() async throws {
        try await Fixture.with { f in
            f.serve("ev", count: 300_000)
            let events = f.manager.events
            let handle = try await f.manager.download(f.request("/files/ev"))
            _ = try await handle.result
            var kinds: [String] = []
            for await event in events {
                #expect(event.id == handle.id)
                switch event.event {
                case .queued: kinds.append("queued")
                case .started: kinds.append("started")
                case .progress: if kinds.last != "progress" { kinds.append("progress") }
                case .completed: kinds.append("completed")
                default: kinds.append("other")
                }
                if event.event.isTerminal { break }
            }
            #expect(kinds == ["queued", "started", "progress", "completed"])
            let progress = handle.progress
            #expect(progress.completedBytes == 300_000)
            #expect(progress.fractionCompleted == 1)
        }
    }
}
