import Foundation
import Haul
import HaulTestSupport
import Testing

/// Traps an app developer falls into with the library: joining across destinations, late
/// event subscribers, abandoned awaits, and a manager dropped without `shutdown()`.
@Suite("Library traps")
struct LibraryTrapsTests {
    // MARK: - Joining

    @Test func memoryRequestJoiningAFileDownloadGetsTheBytes() async throws {
        try await Fixture.with(Self.holding) { f in
            // Given a file download in flight
            let bytes = f.serve("mj", count: 5000)
            let file = try await f.manager.download(f.request("/files/mj?gate=g", to: "mj"))
            await f.server.waitForGateWaiters("g", count: 1)

            // When a memory request for the same URL arrives
            let memory = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/mj?gate=g"), destination: .memory(limit: 1 << 20)))
            f.server.release("g")

            // Then it joins the transfer and gets the verified file's bytes
            let fileResult = try await file.result
            let memoryResult = try await memory.result
            #expect(fileResult.fileURL == f.file("mj"))
            #expect(fileResult.data == nil)
            #expect(memoryResult.data == Data(bytes))
            #expect(memoryResult.byteCount == 5000)
            #expect(f.server.requests(path: "/files/mj").count == 1)
            #expect(sha256(f.contents("mj")) == sha256(bytes))
        }
    }

    @Test func memoryJoinerStillHasItsLimit() async throws {
        try await Fixture.with(Self.holding) { f in
            let bytes = f.serve("ml", count: 5000)
            let file = try await f.manager.download(f.request("/files/ml?gate=g", to: "ml"))
            await f.server.waitForGateWaiters("g", count: 1)
            let memory = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/ml?gate=g"), destination: .memory(limit: 1000)))
            f.server.release("g")

            let error = try #require(await failure(of: memory))
            #expect(error.code == .tooLarge)
            #expect(error.message.contains("1000-byte memory limit"))
            _ = try await file.result
            #expect(sha256(f.contents("ml")) == sha256(bytes))
        }
    }

    @Test func memoryJoinerOfAMemoryDownloadKeepsItsSmallerLimit() async throws {
        try await Fixture.with(Self.holding) { f in
            let bytes = f.serve("mm", count: 5000)
            let url = f.server.url("/files/mm?gate=g")
            let large = try await f.manager.download(DownloadRequest(url: url, destination: .memory(limit: 1 << 20)))
            await f.server.waitForGateWaiters("g", count: 1)
            let small = try await f.manager.download(DownloadRequest(url: url, destination: .memory(limit: 100)))
            f.server.release("g")

            #expect(try await large.result.data == Data(bytes))
            #expect(await failure(of: small)?.code == .tooLarge)
            #expect(f.server.requests(path: "/files/mm").count == 1)
        }
    }

    @Test func sameIDForAnotherFileIsRefused() async throws {
        try await Fixture.with(Self.holding) { f in
            let bytes = f.serve("df", count: 1000)
            let first = try await f.manager.download(f.request("/files/df?gate=g", to: "a", id: "same"))
            await f.server.waitForGateWaiters("g", count: 1)

            // When a request with the same ID wants the bytes in another file
            let error = await #expect(throws: DownloadError.self) {
                try await f.manager.download(f.request("/files/df?gate=g", to: "b", id: "same"))
            }

            // Then it is refused with a message that says what to do
            #expect(error?.code == .duplicate)
            #expect(error?.message.contains("distinct id") == true)
            f.server.release("g")
            _ = try await first.result
            #expect(f.listing() == ["a"])
            #expect(sha256(f.contents("a")) == sha256(bytes))
        }
    }

    @Test func fileRequestMeetingAMemoryDownloadIsRefused() async throws {
        try await Fixture.with(Self.holding) { f in
            f.serve("fm", count: 1000)
            let memory = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/fm?gate=g"), destination: .memory(limit: 1 << 20)))
            await f.server.waitForGateWaiters("g", count: 1)

            let error = await #expect(throws: DownloadError.self) {
                try await f.manager.download(f.request("/files/fm?gate=g", to: "fm"))
            }

            #expect(error?.code == .duplicate)
            #expect(error?.message.contains("distinct id") == true)
            f.server.release("g")
            #expect(try await memory.result.data?.count == 1000)
            #expect(f.listing().isEmpty)
        }
    }

    // MARK: - Early events

    @Test func aLateSubscriberFirstGetsTheCurrentState() async throws {
        try await Fixture.with(Self.holding) { f in
            // Given a download that queued and started before anyone listened
            f.serve("late", count: 1000)
            let handle = try await f.manager.download(f.request("/files/late?gate=g"))
            await f.server.waitForGateWaiters("g", count: 1)

            // When a stream is made now
            let events = handle.events
            f.server.release("g")
            var kinds: [String] = []
            for await event in events { kinds.append(Self.kind(event)) }

            // Then it starts with the current state, then the live events, each once
            #expect(kinds.first == "started")
            #expect(kinds.filter { $0 == "started" }.count == 1)
            #expect(kinds.last == "completed")
        }
    }

    @Test func aSubscriberOfAPausedDownloadGetsItsProgressAndState() async throws {
        try await Fixture.with(Self.holding) { f in
            let bytes = f.serve("lp", count: 600_000)
            let handle = try await f.manager.download(f.request("/files/lp?stall_after=200000&stall_times=1"))
            let watcher = handle.events
            await firstEvent(watcher) { event -> Bool? in
                if case .progress(let progress) = event, progress.completedBytes > 0 { return true }
                return nil
            }
            await handle.pause()
            // The last progress the download reported before it paused.
            var reported: Int64?
            await firstEvent(watcher) { event -> Bool? in
                if case .progress(let progress) = event { reported = progress.completedBytes }
                if case .paused = event { return true }
                return nil
            }

            // When a stream is made while it is paused, and the download is resumed
            let late = handle.events
            await handle.resume()
            var seen: [DownloadEvent] = []
            for await event in late { seen.append(event) }

            // Then it first hears the progress so far and that it is paused, then the rest
            #expect(seen.count >= 4)
            if case .progress(let progress) = seen.first {
                #expect(reported == nil || progress.completedBytes == reported)
                #expect(progress.completedBytes > 0)
            } else {
                Issue.record("first event was \(seen.first.map(Self.kind) ?? "none"), not progress")
            }
            #expect(seen.dropFirst().first.map(Self.kind) == "paused")
            #expect(seen.dropFirst(2).first.map(Self.kind) == "queued")
            #expect(seen.last.map(Self.kind) == "completed")
            #expect(sha256(f.contents("lp")) == sha256(bytes))
        }
    }

    // MARK: - Abandoning

    @Test func abandoningKeepsALargePartialByDefault() async throws {
        try await Fixture.with(Self.holding) { f in
            // Given a large download partway through
            let bytes = f.serve("ab", count: 600_000)
            let handle = try await f.manager.download(f.request("/files/ab?stall_after=200000&stall_times=1"))
            let events = handle.events
            await firstProgress(events)

            // When the only task awaiting it goes away (a SwiftUI `.task` whose view left)
            let reason = await Self.abandon(handle, events: events)
            #expect(reason == .noLongerWanted)

            // Then the partial stays, and asking again resumes from it
            let kept = try #require(
                try FileManager.default.attributesOfItem(atPath: f.file("ab.haul-partial").path)[.size] as? Int)
            #expect(kept > 0)
            _ = try await f.manager.download(f.request("/files/ab?stall_after=200000&stall_times=1")).result
            #expect(sha256(f.contents("ab")) == sha256(bytes))
            #expect(f.server.requests(path: "/files/ab").last?.header("Range") == "bytes=\(kept)-")
        }
    }

    @Test func anAbandonedPartialIsResumableInTheJournal() async throws {
        try await Fixture.with(journal: true, Self.holding) { f in
            f.serve("aj", count: 600_000)
            let handle = try await f.manager.download(f.request("/files/aj?stall_after=200000&stall_times=1"))
            let events = handle.events
            await firstProgress(events)
            let waiter = Task { await failure(of: handle) }
            waiter.cancel()
            _ = await waiter.value
            await firstEvent(events) { event -> Bool? in event.isTerminal ? true : nil }

            await f.manager.shutdown()
            #expect(try f.journal!.job(handle.id)?.state == .paused)
            #expect(FileManager.default.fileExists(atPath: f.file("aj.haul-partial").path))
        }
    }

    @Test func abandoningCanDeleteThePartialWhenTheRequestSaysSo() async throws {
        try await Fixture.with(Self.holding) { f in
            // Given a thumbnail-like download that is not worth resuming
            f.serve("thumb", count: 600_000)
            var request = f.request("/files/thumb?stall_after=200000")
            request.whenAbandoned = .deletePartial
            let handle = try await f.manager.download(request)
            let events = handle.events
            await firstProgress(events)

            // When its view goes away
            let reason = await Self.abandon(handle, events: events)

            // Then the partial is gone
            #expect(reason == .noLongerWanted)
            #expect(f.listing().isEmpty)
        }
    }

    @Test func aJoinedCallerThatKeepsOutvotesOneThatDeletes() async throws {
        try await Fixture.with(Self.holding) { f in
            f.serve("both", count: 600_000)
            var deleting = f.request("/files/both?stall_after=200000&stall_times=1")
            deleting.whenAbandoned = .deletePartial
            let first = try await f.manager.download(deleting)
            let second = try await f.manager.download(f.request("/files/both?stall_after=200000&stall_times=1"))
            let events = first.events
            await firstProgress(events)

            let waiters = [Task { await failure(of: first) }, Task { await failure(of: second) }]
            for waiter in waiters { waiter.cancel() }
            for waiter in waiters { #expect(await waiter.value?.cancellationReason == .noLongerWanted) }
            await firstEvent(events) { event -> Bool? in event.isTerminal ? true : nil }

            #expect(FileManager.default.fileExists(atPath: f.file("both.haul-partial").path))
        }
    }

    // MARK: - Forgetting shutdown

    @Test func withDownloadManagerShutsTheManagerDown() async throws {
        let server = try await FaultServer.start()
        let bytes = FaultServer.randomBytes(count: 1000, seed: 8)
        server.setFile("scoped", bytes)
        let request = DownloadRequest(url: server.url("/files/scoped"), destination: .memory(limit: 1 << 20))

        // When the body returns
        let (data, used) = try await withDownloadManager(configuration: Fixture.testConfiguration(), eventLoopGroup: TestResources.group, threadPool: TestResources.pool) { manager in
            (try await manager.download(request).result.data, manager)
        }
        #expect(data == Data(bytes))
        // Then the manager is shut down
        let afterwards = await #expect(throws: DownloadError.self) { try await used.download(request) }
        #expect(afterwards?.cancellationReason == .shutdown)

        // And when the body throws
        struct Failure: Error {}
        var escaped: DownloadManager?
        do {
            try await withDownloadManager { manager in
                escaped = manager
                throw Failure()
            }
            Issue.record("the body's error was not rethrown")
        } catch is Failure {}
        let thrownOut = try #require(escaped)
        let thrown = await #expect(throws: DownloadError.self) { try await thrownOut.download(request) }
        #expect(thrown?.cancellationReason == .shutdown)
        try await server.shutdown()
    }

    /// A debug build crashes in AsyncHTTPClient's deinit if its client was never shut down.
    @Test func droppingAManagerWithoutShutdownDoesNotCrash() async throws {
        let server = try await FaultServer.start()
        let bytes = FaultServer.randomBytes(count: 1000, seed: 7)
        server.setFile("forgot", bytes)

        // Given a manager that was used
        var manager: DownloadManager? = DownloadManager(configuration: Fixture.testConfiguration(), eventLoopGroup: TestResources.group, threadPool: TestResources.pool)
        let events = manager!.events
        let result = try await manager!.download(
            DownloadRequest(url: server.url("/files/forgot"), destination: .memory(limit: 1 << 20))
        ).result
        #expect(result.data == Data(bytes))

        // When it is dropped without shutdown()
        manager = nil

        // Then its deinit ends its event stream, and the process lives on
        for await _ in events {}
        try await server.shutdown()
    }

    static func kind(_ event: DownloadEvent) -> String {
        switch event {
        case .queued: "queued"
        case .attached: "attached"
        case .started: "started"
        case .progress: "progress"
        case .retrying: "retrying"
        case .sourceDropped: "sourceDropped"
        case .deltaPrepared: "deltaPrepared"
        case .paused: "paused"
        case .networkLost: "networkLost"
        case .networkRestored: "networkRestored"
        case .completed: "completed"
        case .failed: "failed"
        case .cancelled: "cancelled"
        }
    }

    /// The fixture's configuration here: every test with a fixture holds a response (at a
    /// gate, or stalled) while it goes on, and a held request must not time out. On a
    /// loaded machine a test can take longer than a short idle timeout to get from the hold
    /// to its release, and the request would be retried: a second request to the server
    /// and a `retrying` event, where the tests expect one request (a joined transfer),
    /// `started` first (a late subscriber), or a download still held (a pause, an abandon).
    /// The fixture's default is as long now; this says that these tests depend on it.
    static func holding(_ configuration: inout DownloadManager.Configuration) {
        configuration.idleTimeout = .seconds(600)
    }

    /// Cancels the only task awaiting `handle` (what a SwiftUI `.task` does when its view
    /// goes away); returns the reason the download then ended with.
    static func abandon(_ handle: DownloadHandle, events: AsyncStream<DownloadEvent>) async
        -> DownloadError.CancellationReason?
    {
        let waiter = Task { await failure(of: handle) }
        waiter.cancel()
        #expect(await waiter.value?.cancellationReason == .noLongerWanted)
        return await firstEvent(events) { event -> DownloadError.CancellationReason? in
            if case .cancelled(let reason) = event { return reason }
            return nil
        }
    }
}
