import Foundation
import HaulTestSupport
import Logging
import NIOConcurrencyHelpers
import Testing

@testable import Haul

/// A download into memory has no row in the journal, so a journaled manager writes nothing
/// for it: a write for a job without a row is refused by the fence, and a refused write
/// reads as the job held by another process, which the manager stops (as evicted).
@Suite("Journal: downloads into memory")
struct MemoryDownloadJournalTests {
    /// The journal's own store, with the IDs of the fenced writes the manager asked of it.
    final class WriteLog: JobStore {
        let inner: JournalStore
        private let written = NIOLockedValueBox<[DownloadID]>([])

        init(_ inner: JournalStore) { self.inner = inner }

        /// The IDs the manager's fenced writes named, in order.
        var ids: [DownloadID] { written.withLockedValue { $0 } }
        private func note(_ id: DownloadID) { written.withLockedValue { $0.append(id) } }

        func ownerToken() throws(DownloadError) -> Int64 { try inner.ownerToken() }
        func claim(_ job: JobRecord, force: Bool) async throws(DownloadError) -> JobClaim {
            try await inner.claim(job, force: force)
        }
        func submit(_ jobs: [JobRecord], forcing: Set<String>, claimingUpTo limit: Int) async throws(DownloadError)
            -> SubmittedJobs
        {
            try await inner.submit(jobs, forcing: forcing, claimingUpTo: limit)
        }
        func adoptUnfinished(keepingPaused: Bool) async throws(DownloadError) -> (count: Int, attachments: [JobAttachment]) {
            try await inner.adoptUnfinished(keepingPaused: keepingPaused)
        }
        func claimQueued(limit: Int) async throws(DownloadError) -> [ClaimedJob] { try await inner.claimQueued(limit: limit) }
        func commands() async throws(DownloadError) -> [(id: DownloadID, command: JobLifecycle.Command)] {
            try await inner.commands()
        }
        func watch(_ ids: [DownloadID]) async throws(DownloadError) -> JobWatch { try await inner.watch(ids) }
        func leave(_ command: JobLifecycle.Command, for id: DownloadID) async throws(DownloadError) -> Bool {
            try await inner.leave(command, for: id)
        }
        var signals: AsyncStream<StoreSignal> { inner.signals }
        func recordStarted(_ id: DownloadID) {
            note(id)
            inner.recordStarted(id)
        }
        func recordState(_ id: DownloadID, _ change: StateChange, errorCode: String?, error: String?) {
            note(id)
            inner.recordState(id, change, errorCode: errorCode, error: error)
        }
        func recordFailed(_ id: DownloadID, _ error: DownloadError) {
            note(id)
            inner.recordFailed(id, error)
        }
        func recordCompleted(
            _ id: DownloadID, bytes: Int64, transferred: Int64, unchanged: Bool, finalURL: String, path: String?,
            file: CompletedFile?
        ) {
            note(id)
            inner.recordCompleted(
                id, bytes: bytes, transferred: transferred, unchanged: unchanged, finalURL: finalURL, path: path, file: file)
        }
        func recordCheckpoint(
            _ id: DownloadID, bytes: Int64, total: Int64?, validator: String?, bytesPerSecond: Double, bootID: String?
        ) {
            note(id)
            inner.recordCheckpoint(
                id, bytes: bytes, total: total, validator: validator, bytesPerSecond: bytesPerSecond, bootID: bootID)
        }
        func recordAttempt(_ id: DownloadID, _ attempts: Int) {
            note(id)
            inner.recordAttempt(id, attempts)
        }
        func recordSources(_ id: DownloadID, location: URL?, mirrors: [URL]) {
            note(id)
            inner.recordSources(id, location: location, mirrors: mirrors)
        }
        func clearCommand(_ command: JobLifecycle.Command, for id: DownloadID) { inner.clearCommand(command, for: id) }
        func release() { inner.release() }
        func confirmCompletion(_ id: DownloadID, bytes: Int64) -> CompletionConfirmation {
            inner.confirmCompletion(id, bytes: bytes)
        }
        func flush() async { await inner.flush() }
        func close() async { await inner.close() }
    }

    @Test func aDownloadIntoMemoryWritesNothingToTheJournal() async throws {
        try await Fixture.with { f in
            // Given a manager whose journal's writes are listed
            let journal = try Journal(path: f.directory.path + "-memory-journal/journal.sqlite")
            defer { try? FileManager.default.removeItem(atPath: f.directory.path + "-memory-journal") }
            let logger = Logger(label: "haul.tests")
            let store = WriteLog(JournalStore(journal: journal, logger: logger))
            let manager = DownloadManager(
                configuration: f.configuration, journal: journal, store: store, connectivityMonitor: nil,
                eventLoopGroup: TestResources.group, threadPool: TestResources.pool, logger: logger)
            let memoryBytes = f.serve("m", count: 20_000, seed: 7)
            let fileBytes = f.serve("d", count: 20_000, seed: 8)
            let memoryURL = f.server.url("/files/m")
            let fileURL = f.server.url("/files/d")

            // When it downloads one file into memory and one into a file
            let memory = try await manager.download(DownloadRequest(url: memoryURL, destination: .memory(limit: 1 << 20))).result
            _ = try await manager.download(DownloadRequest(url: fileURL, destination: .directory(f.directory, name: "d"))).result
            await manager.flushJournal()
            await manager.shutdown()

            // Then both are right, and only the file's download was written to the journal
            #expect(memory.data.map(Array.init) == memoryBytes)
            #expect(f.contents("d") == fileBytes)
            #expect(!store.ids.contains(DownloadID(memoryURL.absoluteString)), "\(store.ids)")
            #expect(store.ids.contains(DownloadID(fileURL.absoluteString)), "\(store.ids)")
        }
    }
}
