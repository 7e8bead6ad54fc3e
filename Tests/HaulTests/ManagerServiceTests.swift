import Foundation
import Haul
import HaulTestSupport
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Testing

/// The manager as an app embeds it: on the app's event loops and I/O threads, run and
/// stopped by the app's `ServiceGroup`; and, made with defaults, owning and stopping its own.
@Suite("DownloadManager as a service", .timeLimit(.minutes(4)))
struct ManagerServiceTests {
    @Test func gracefulShutdownCheckpointsThePartialAndLeavesTheAppsResourcesRunning() async throws {
        // Given an app's event loops, I/O threads and journal, and a manager on them in a service group
        let eventLoopGroup = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let threadPool = NIOThreadPool(numberOfThreads: 2)
        threadPool.start()
        let server = try await FaultServer.start()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(atPath: directory.path + "-journal")
        }
        let journal = try Journal(path: directory.path + "-journal/journal.sqlite")
        let bytes = FaultServer.randomBytes(count: 1 << 20, seed: 25)
        server.setFile("s", bytes)
        let stallAt = 400_000
        let manager = DownloadManager(
            configuration: Fixture.testConfiguration(), journal: journal, eventLoopGroup: eventLoopGroup,
            threadPool: threadPool)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [manager], logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })))
        let running = Task { try await group.run() }

        // When a download stalls mid-body with its first bytes on disk (the server holds the rest)
        let handle = try await manager.download(
            DownloadRequest(
                url: server.url("/files/s?stall_after=\(stallAt)&stall_times=1"),
                destination: .directory(directory, name: "s")))
        await firstEvent(handle.events) { event -> Bool? in
            if case .progress(let progress) = event, progress.completedBytes == Int64(stallAt) { return true }
            return nil
        }
        // and the group shuts down gracefully
        await group.triggerGracefulShutdown()
        try await running.value

        // Then the download ended for the shutdown, its partial holds the bytes received,
        // and the journal records it paused with them
        let ended = await #expect(throws: DownloadError.self) { try await handle.result }
        #expect(ended?.cancellationReason == .shutdown)
        let partial = FileManager.default.contents(atPath: directory.appendingPathComponent("s.haul-partial").path)
        #expect(partial?.count == stallAt)
        #expect(sha256(partial) == sha256(bytes[..<stallAt]))
        let job = try #require(try journal.job(handle.id))
        #expect(job.state == .paused)
        #expect(job.bytes == Int64(stallAt))
        // and the app's event loops and I/O threads still run
        #expect(try await eventLoopGroup.next().scheduleTask(in: .zero) { 7 }.futureResult.get() == 7)
        #expect(try await threadPool.runIfActive { 7 } == 7)

        // When a second manager on them resumes the journal's download
        let second = DownloadManager(
            configuration: Fixture.testConfiguration(), journal: journal, eventLoopGroup: eventLoopGroup,
            threadPool: threadPool)
        #expect(try await second.resumeUnfinished() == 1)
        await second.waitUntilIdle()
        await second.shutdown()

        // Then it asked for the rest only, and the file is whole, byte for byte
        #expect(server.requests(path: "/files/s").last?.header("Range") == "bytes=\(stallAt)-")
        #expect(sha256(FileManager.default.contents(atPath: directory.appendingPathComponent("s").path)) == sha256(bytes))
        #expect(try journal.job(handle.id)?.state == .completed)

        try await server.shutdown()
        try await threadPool.shutdownGracefully()
        try await eventLoopGroup.shutdownGracefully()
    }

    @Test func aRunCancelledWhileItsJournalListenerWaitsForAnAdmissionReturns() async throws {
        // The journal listener asks for an admission on every poll and waits for it; the
        // admission loop beside it in the run ends when the run is cancelled. A request asked
        // for after that loop ended was never carried out, the listener waited for it, and
        // the run waited for the listener before shutting down: the run never returned (an
        // app's graceful shutdown hung). Polling without pause puts the listener in that
        // window most of the time; ten runs make missing it unlikely.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-tests-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = Fixture.testConfiguration()
        configuration.journalPollInterval = .zero
        for attempt in 1...10 {
            // Given a manager run as a service, its journal polled without pause
            let journal = try Journal(path: directory.appendingPathComponent("\(attempt)/journal.sqlite").path)
            let manager = DownloadManager(configuration: configuration, journal: journal)
            let running = Task { await manager.run() }
            while await !manager.runHoldsBackgroundWork { await Task.yield() }
            await manager.admitFromStore()

            // When the run is cancelled
            running.cancel()

            // Then it returns
            let returned = await returns(running)
            try #require(returned, "attempt \(attempt): the cancelled run did not return before the time limit")
        }
    }

    @Test func waitingUntilIdleEndsWhenTheWaitingTaskIsCancelled() async throws {
        // Given a manager whose one download stalls for good (no idle timeout will end it)
        let server = try await FaultServer.start()
        server.setFile("s", FaultServer.randomBytes(count: 100_000, seed: 26))
        var configuration = Fixture.testConfiguration()
        configuration.idleTimeout = .seconds(600)
        let manager = DownloadManager(configuration: configuration)
        let handle = try await manager.download(
            DownloadRequest(url: server.url("/files/s?stall_after=1000"), destination: .memory(limit: 1 << 20)))
        await firstEvent(handle.events) { event -> Bool? in
            if case .progress(let progress) = event, progress.completedBytes == 1000 { return true }
            return nil
        }

        // When a task waiting for the manager to be idle is cancelled (a service stopping)
        let waiting = Task { await manager.waitUntilIdle() }
        waiting.cancel()
        await waiting.value

        // Then the wait ended with the download still running
        #expect(await manager.activeIDs == [handle.id])
        await manager.shutdown()
        try await server.shutdown()
    }

    @Test func aManagerMadeWithDefaultsStopsItsOwnThreadsWhenShutDown() async throws {
        // Given a manager made with defaults, that ran a download
        let server = try await FaultServer.start()
        let bytes = FaultServer.randomBytes(count: 1000, seed: 26)
        server.setFile("own", bytes)
        let manager = DownloadManager(configuration: Fixture.testConfiguration())
        #expect(manager.resources.ownsEventLoopGroup && manager.resources.ownsThreadPool)
        let threads = try Self.threadPrefix(of: manager.eventLoopGroup)
        Self.expectThreads(threads, running: true)
        let data = try await manager.download(
            DownloadRequest(url: server.url("/files/own"), destination: .memory(limit: 1 << 20))
        ).result.data
        #expect(data == Data(bytes))

        // When it shuts down
        await manager.shutdown()

        // Then its event loops and I/O threads are stopped
        Self.expectThreads(threads, running: false)
        await #expect(throws: (any Error).self) { try await manager.threadPool.runIfActive {} }
        try await server.shutdown()
    }

    @Test func aManagerReleasedWithoutShutdownStopsItsOwnThreads() async throws {
        // Given a manager made with defaults, that ran a download
        let server = try await FaultServer.start()
        server.setFile("dropped", FaultServer.randomBytes(count: 1000, seed: 27))
        var manager: DownloadManager? = DownloadManager(configuration: Fixture.testConfiguration())
        _ = try await manager!.download(
            DownloadRequest(url: server.url("/files/dropped"), destination: .memory(limit: 1 << 20))
        ).result
        let resources = manager!.resources
        let threads = try Self.threadPrefix(of: resources.eventLoopGroup)
        Self.expectThreads(threads, running: true)

        // When it is released without shutdown()
        manager = nil

        // Then it stops its event loops and I/O threads on its own
        await resources.waitUntilShutDown()
        Self.expectThreads(threads, running: false)
        await #expect(throws: (any Error).self) { try await resources.threadPool.runIfActive {} }
        try await server.shutdown()
    }

    /// Whether `task` ends before the waiting test is cancelled (by the suite's time
    /// limit): awaiting a task's value does not end when the awaiting task is cancelled, so
    /// a run that never returns would hold the suite instead of failing its test.
    func returns(_ task: Task<Void, Never>) async -> Bool {
        let (outcomes, outcome) = AsyncStream.makeStream(of: Bool.self)
        Task {
            await task.value
            outcome.yield(true)
        }
        // A stream's wait ends with nothing when its task is cancelled.
        var first = outcomes.makeAsyncIterator()
        return await first.next() ?? false
    }

    /// The name its threads start with, from the group's description
    /// (`MultiThreadedEventLoopGroup { threadPattern = NIO-ELT-5-#* }`).
    static func threadPrefix(of group: any EventLoopGroup) throws -> String {
        let description = "\(group)"
        let pattern = try #require(description.range(of: "threadPattern = "), "\(description)")
        return String(description[pattern.upperBound...].prefix { $0 != "*" })
    }

    /// Expects threads named with `prefix` in this process when `running`, none otherwise
    /// (Linux, where `/proc` lists them).
    static func expectThreads(_ prefix: String, running: Bool, sourceLocation: SourceLocation = #_sourceLocation) {
        #if os(Linux)
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            let names = tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
            let matching = names.filter { $0.hasPrefix(prefix) }
            #expect(matching.isEmpty != running, "threads \(prefix)*: \(matching)", sourceLocation: sourceLocation)
        #endif
    }
}
