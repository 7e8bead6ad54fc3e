import Foundation
import Logging
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

/// The ``JobStore`` contract, checked the same way on both stores: the SQLite journal
/// (owners proven alive by the kernel) and the shared queue on PostgreSQL (leases, on a
/// private cluster). Each sequence is written once, in ``StoreConformance``, against a
/// ``StoreHarness``; the two suites below run every one of them on their store.
enum StoreConformance {
    static let logger = Logger(label: "haul.store-conformance")

    /// Submitted, claimed, checkpointed, completed.
    static func submitClaimCheckpointComplete(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let job = try harness.record("one")
        #expect(try await a.submit([job], forcing: [], claimingUpTo: 0).attachments.isEmpty)
        #expect(try await a.watch([job.jobID]).rows[job.jobID]?.state == .queued)
        let claimed = try await a.claimQueued(limit: 10)
        #expect(claimed.map(\.id) == [job.jobID])
        #expect(claimed.first?.progress?.committed ?? 0 == 0)
        #expect(claimed.first?.mayBeWritten == false)
        #expect(try await a.claimQueued(limit: 10).isEmpty, "a claimed job is claimed once")
        a.recordStarted(job.jobID)
        a.recordCheckpoint(job.jobID, bytes: 1000, total: 4000, validator: nil, bytesPerSecond: 1, bootID: "boot")
        await a.flush()
        let running = try await a.watch([job.jobID]).rows[job.jobID]
        #expect(running?.state == .running)
        #expect(running?.bytesCommitted == 1000)
        #expect(running?.owner == (try a.ownerToken()))
        try await confirm(a, job.jobID, bytes: 4000)
        a.recordCompleted(job.jobID, bytes: 4000, transferred: 4000, unchanged: false,
            finalURL: job.url, path: nil, file: nil)
        await a.flush()
        let done = try await a.watch([job.jobID]).rows[job.jobID]
        #expect(done?.state == .completed)
        #expect(done?.bytesCommitted == 4000)
        await a.close()
    }

    /// Jobs submitted and claimed in one call: the highest priority first, up to the
    /// limit; the rest wait for a claim, here or by another owner, and none is claimed twice.
    static func submitClaimingAtOnce(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let first = try harness.record("first")
        var urgent = try harness.record("urgent")
        urgent.priority = DownloadPriority.high.rawValue
        let last = try harness.record("last")
        let submitted = try await a.submit([first, urgent, last], forcing: [], claimingUpTo: 2)
        #expect(submitted.attachments.isEmpty)
        #expect(Set(submitted.claimed.map(\.id)) == [urgent.jobID, first.jobID])
        #expect(submitted.claimed.allSatisfy { $0.progress?.committed ?? 0 == 0 && !$0.mayBeWritten })
        let rows = try await a.watch([first.jobID, urgent.jobID, last.jobID]).rows
        #expect(rows[urgent.jobID]?.owner == (try a.ownerToken()), "claimed for its submitter")
        #expect(rows[last.jobID]?.state == .queued)
        // The claimed ones are not claimed again, by anyone; the last one still can be.
        #expect(try await a.claimQueued(limit: 10).map(\.id) == [last.jobID])
        #expect(try await b.claimQueued(limit: 10).isEmpty)
        await a.close()
        await b.close()
    }

    /// A download completed with a validator, claimed again, hands over its completed file
    /// to be revalidated (a conditional request); claimed with `force`, it starts over.
    static func completedClaimedAgainRevalidatesUnlessForced(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let job = try harness.record("again")
        let file = CompletedFile(
            path: "/srv/again", size: 4000, modified: 1_700_000_000_000_000_000, validator: .etag("\"v1\""))
        func complete() async throws {
            a.recordStarted(job.jobID)
            try await confirm(a, job.jobID, bytes: 4000)
            a.recordCompleted(job.jobID, bytes: 4000, transferred: 4000, unchanged: false,
                finalURL: job.url, path: file.path, file: file)
            await a.flush()
        }
        guard case .claimed(let first) = try await a.claim(job, force: false) else {
            Issue.record("a new job is claimed")
            return
        }
        #expect(first.progress?.completedFile == nil)
        try await complete()
        #expect(try await a.watch([job.jobID]).rows[job.jobID]?.state == .completed)

        // Claimed again: the completed file comes with it
        guard case .claimed(let again) = try await a.claim(job, force: false) else {
            Issue.record("a completed job is claimed again")
            return
        }
        #expect(again.progress?.completedFile == file)
        #expect(again.progress?.committed ?? 0 == 0)

        // Forced: nothing to revalidate, and the row keeps no completed file any more
        try await complete()
        guard case .claimed(let forced) = try await a.claim(job, force: true) else {
            Issue.record("a completed job is claimed again when forced")
            return
        }
        #expect(forced.progress?.completedFile == nil)
        try await complete()
        await a.close()
    }

    /// A failed job is resumed (queued again) and claimed again.
    static func failAndRetry(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let job = try harness.record("failing")
        _ = try await a.submit([job], forcing: [], claimingUpTo: 0)
        #expect(try await a.claimQueued(limit: 10).map(\.id) == [job.jobID])
        a.recordStarted(job.jobID)
        a.recordFailed(job.jobID, DownloadError(.invalidRequest, "not retried"))
        await a.flush()
        let failed = try await a.watch([job.jobID]).rows[job.jobID]
        #expect(failed?.state == .failed)
        #expect(failed?.errorCode == DownloadError.Code.invalidRequest.description)
        try await a.leave(.resume, for: job.jobID)
        #expect(try await a.watch([job.jobID]).rows[job.jobID]?.state == .queued)
        #expect(try await a.claimQueued(limit: 10).map(\.id) == [job.jobID])
        await a.close()
    }

    /// Another process pauses a held job through a command; once its owner gives it up,
    /// a resume queues it again, and it is claimed with its committed bytes.
    static func pauseAndResume(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let job = try harness.record("paused")
        _ = try await a.submit([job], forcing: [], claimingUpTo: 0)
        _ = try await a.claimQueued(limit: 10)
        a.recordStarted(job.jobID)
        a.recordCheckpoint(job.jobID, bytes: 700, total: 2000, validator: nil, bytesPerSecond: 1, bootID: "boot")
        await a.flush()
        try await b.leave(.pause, for: job.jobID)
        let commands = try await a.commands()
        #expect(commands.map(\.id) == [job.jobID])
        #expect(commands.map(\.command) == [.pause])
        a.clearCommand(.pause, for: job.jobID)
        a.recordState(job.jobID, .paused, errorCode: nil, error: nil)
        await a.flush()
        #expect(try await a.commands().isEmpty)
        #expect(try await b.watch([job.jobID]).rows[job.jobID]?.state == .paused)
        a.release()
        await a.flush()
        try await b.leave(.resume, for: job.jobID)
        #expect(try await b.watch([job.jobID]).rows[job.jobID]?.state == .queued)
        _ = try await b.adoptUnfinished(keepingPaused: false)
        let claimed = try await b.claimQueued(limit: 10)
        #expect(claimed.map(\.id) == [job.jobID])
        #expect(claimed.first?.progress?.committed == 700)
        await a.close()
        await b.close()
    }

    /// A held job is cancelled through a command to its owner; a waiting one at once.
    static func cancel(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let held = try harness.record("held")
        _ = try await a.submit([held], forcing: [], claimingUpTo: 0)
        _ = try await a.claimQueued(limit: 10)
        a.recordStarted(held.jobID)
        await a.flush()
        #expect(try await b.leave(.cancel, for: held.jobID) == false, "asked of its holder, not carried out")
        #expect(try await a.commands().map(\.command) == [.cancel])
        a.clearCommand(.cancel, for: held.jobID)
        a.recordState(held.jobID, .cancelled, errorCode: "cancelled", error: "cancelled")
        await a.flush()
        #expect(try await b.watch([held.jobID]).rows[held.jobID]?.state == .cancelled)

        let waiting = try harness.record("waiting")
        _ = try await a.submit([waiting], forcing: [], claimingUpTo: 0)
        // A store keeps rows, never files: the partial is the canceller's to delete
        try Data("partial".utf8).write(to: URL(fileURLWithPath: waiting.partialPath))
        #expect(try await b.leave(.cancel, for: waiting.jobID) == true, "carried out at once")
        #expect(try await b.watch([waiting.jobID]).rows[waiting.jobID]?.state == .cancelled)
        #expect(FileManager.default.fileExists(atPath: waiting.partialPath))
        #expect(try await a.claimQueued(limit: 10).isEmpty)
        await a.close()
        await b.close()
    }

    /// A job a live owner holds is not claimed by another: it is reported as attached.
    static func heldJobIsAttached(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let job = try harness.record("held")
        guard case .claimed(let claimed) = try await a.claim(job, force: false) else {
            Issue.record("the first claim did not claim")
            return
        }
        #expect(claimed.id == job.jobID)
        guard case .heldElsewhere(let attachment) = try await b.claim(job, force: false) else {
            Issue.record("a held job was claimed again")
            return
        }
        #expect(attachment.holder == (try a.ownerToken()))
        #expect(try await b.submit([job], forcing: [], claimingUpTo: 0).attachments.map(\.id) == [job.jobID])
        #expect(try await b.claimQueued(limit: 10).isEmpty)
        await a.close()
        await b.close()
    }

    /// A crashed owner's job is taken over with its committed bytes, and the crashed
    /// owner's later writes are refused: it hears it lost the job, and its completion
    /// is refused.
    static func crashedOwnerTakenOverAndFenced(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let job = try harness.record("taken-over")
        _ = try await a.submit([job], forcing: [], claimingUpTo: 0)
        _ = try await a.claimQueued(limit: 10)
        a.recordStarted(job.jobID)
        a.recordCheckpoint(job.jobID, bytes: 1000, total: 9000, validator: nil, bytesPerSecond: 1, bootID: "boot")
        await a.flush()
        // When its owner crashes (seen dead by the others), another takes the job over
        try await harness.crash(a)
        _ = try await b.adoptUnfinished(keepingPaused: false)
        let claimed = try await b.claimQueued(limit: 10)
        #expect(claimed.map(\.id) == [job.jobID])
        #expect(claimed.first?.progress?.committed == 1000)
        #expect(claimed.first?.mayBeWritten == harness.takeoverMayBeWritten)
        b.recordStarted(job.jobID)
        await b.flush()
        // Then the stale owner's writes change nothing, and it learns it lost the job
        a.recordCheckpoint(job.jobID, bytes: 5000, total: 9000, validator: nil, bytesPerSecond: 1, bootID: "boot")
        await a.flush()
        let row = try await b.watch([job.jobID]).rows[job.jobID]
        #expect(row?.bytesCommitted == 1000)
        #expect(row?.owner == (try b.ownerToken()))
        var lost: [DownloadID] = []
        for await signal in a.signals {
            if case .lost(let ids) = signal {
                lost = ids
                break
            }
        }
        #expect(lost == [job.jobID])
        await #expect(throws: DownloadError.self) { try await confirm(a, job.jobID, bytes: 9000) }
        do {
            try await confirm(a, job.jobID, bytes: 9000)
        } catch {
            #expect(error.code == .runningElsewhere)
        }
        #expect(try await b.watch([job.jobID]).rows[job.jobID]?.state == .running)
        await a.close()
        await b.close()
    }

    /// A held job's phases as its owner records them (waiting for its host, queued behind
    /// its slots, running again), its retries and its sources: each seen by another owner,
    /// which never claims it meanwhile.
    static func phasesRetriesAndSources(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let job = try harness.record("phases")
        _ = try await a.submit([job], forcing: [], claimingUpTo: 0)
        #expect(try await a.claimQueued(limit: 10).map(\.id) == [job.jobID])
        a.recordStarted(job.jobID)
        a.recordState(job.jobID, .waiting, errorCode: "network", error: "127.0.0.1:9 does not answer")
        await a.flush()
        let waiting = try await b.watch([job.jobID]).rows[job.jobID]
        #expect(waiting?.state == .waiting)
        #expect(waiting?.owner == (try a.ownerToken()))
        #expect(try await b.claimQueued(limit: 10).isEmpty, "a waiting job is its owner's")
        a.recordState(job.jobID, .queued, errorCode: nil, error: nil)
        await a.flush()
        let queued = try await b.watch([job.jobID]).rows[job.jobID]
        #expect(queued?.state == .queued)
        #expect(queued?.owner == (try a.ownerToken()))
        #expect(try await b.claimQueued(limit: 10).isEmpty, "a job queued behind its owner's slots is its owner's")
        a.recordStarted(job.jobID)
        a.recordAttempt(job.jobID, 2)
        let moved = try #require(URL(string: "http://127.0.0.1:9/files/phases-moved"))
        let mirror = try #require(URL(string: "http://127.0.0.1:10/files/phases"))
        a.recordSources(job.jobID, location: moved, mirrors: [mirror])
        await a.flush()
        let running = try #require(try await b.watch([job.jobID]).rows[job.jobID])
        #expect(running.state == .running)
        #expect(running.attempts == 2)
        #expect(running.location == moved.absoluteString)
        #expect(running.mirrors == JobRecord.encode(urls: [mirror]))
        await a.close()
        await b.close()
    }

    /// Submitted again, a download that completed is queued again and claimed with its
    /// completed file, to revalidate (unless forced); one that failed is queued again.
    static func submittedAgainAfterItsEnd(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let done = try harness.record("done")
        let failing = try harness.record("failing-again")
        let file = CompletedFile(
            path: "/srv/done", size: 4000, modified: 1_700_000_000_000_000_000, validator: .etag("\"v1\""))
        _ = try await a.submit([done, failing], forcing: [], claimingUpTo: 0)
        #expect(Set(try await a.claimQueued(limit: 10).map(\.id)) == [done.jobID, failing.jobID])
        a.recordStarted(done.jobID)
        try await confirm(a, done.jobID, bytes: 4000)
        a.recordCompleted(done.jobID, bytes: 4000, transferred: 4000, unchanged: false,
            finalURL: done.url, path: file.path, file: file)
        a.recordStarted(failing.jobID)
        a.recordState(failing.jobID, .failed, errorCode: "http", error: "HTTP 404")
        await a.flush()
        // Submitted again: both wait again, the completed one with its file
        _ = try await a.submit([done, failing], forcing: [], claimingUpTo: 0)
        let rows = try await a.watch([done.jobID, failing.jobID]).rows
        #expect(rows[done.jobID]?.state == .queued)
        #expect(rows[failing.jobID]?.state == .queued)
        #expect(rows[failing.jobID]?.errorCode == nil)
        let claimed = try await a.claimQueued(limit: 10)
        #expect(Set(claimed.map(\.id)) == [done.jobID, failing.jobID])
        #expect(claimed.first { $0.id == done.jobID }?.progress?.completedFile == file)
        #expect(claimed.first { $0.id == failing.jobID }?.progress?.completedFile == nil)
        // Completed again, then submitted again forced: nothing to revalidate
        try await confirm(a, done.jobID, bytes: 4000)
        a.recordCompleted(done.jobID, bytes: 4000, transferred: 4000, unchanged: false,
            finalURL: done.url, path: file.path, file: file)
        await a.flush()
        _ = try await a.submit([done], forcing: [done.id], claimingUpTo: 0)
        let forced = try await a.claimQueued(limit: 10)
        #expect(forced.map(\.id) == [done.jobID])
        #expect(forced.first?.progress?.completedFile == nil)
        await a.close()
    }

    /// A download is its source and its destination (``JobIdentity``): the same URL to a
    /// second destination is a job of its own, claimed or submitted, and each is found
    /// again under its own ID; the URL stays the ID of the first. Before, the second took
    /// the first's row over.
    static func aURLToTwoDestinationsIsTwoJobs(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let first = try harness.record("shared", savedAs: "one")
        let second = try harness.record("shared", savedAs: "two")
        #expect(first.id == first.url && second.id == first.url, "both default to their URL")
        for _ in 1...2 {
            let one = try #require(claimed(try await a.claim(first, force: false)))
            #expect(one.id.rawValue == first.url)
            let two = try #require(claimed(try await a.claim(second, force: false)))
            #expect(two.id.rawValue.hasPrefix(first.url + " -> ") && two.id.rawValue.hasSuffix("two"), "\(two.id)")
            let rows = try await a.watch([one.id, two.id]).rows
            #expect(rows[one.id]?.destinationName == "one")
            #expect(rows[two.id]?.destinationName == "two")
            for id in [one.id, two.id] {
                try await confirm(a, id, bytes: 10)
                a.recordCompleted(id, bytes: 10, transferred: 10, unchanged: false,
                    finalURL: first.url, path: nil, file: nil)
            }
            await a.flush()
        }
        // In one submission, a third destination and the first again: only the third moves.
        let third = try harness.record("shared", savedAs: "three")
        let submitted = try await a.submit([third, first], forcing: [], claimingUpTo: 0)
        #expect(submitted.renamed.map(\.index) == [0])
        let renamed = try #require(submitted.renamed.first?.id)
        #expect(renamed.hasPrefix(first.url + " -> ") && renamed.hasSuffix("three"), "\(renamed)")
        let rows = try await a.watch([first.jobID, DownloadID(renamed)]).rows
        #expect(rows[first.jobID]?.destinationName == "one")
        #expect(rows[DownloadID(renamed)]?.destinationName == "three")
        await a.close()
    }

    /// A completion is confirmed only to the owner that holds the job: one another live
    /// owner holds is refused as running elsewhere (its holder's row untouched), and a job
    /// once completed is not confirmed again.
    static func completionConfirmedOnlyToItsHolder(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let b = try await harness.makeOwner()
        let mine = try harness.record("confirmed-mine")
        let theirs = try harness.record("confirmed-theirs")
        #expect(try await a.submit([mine], forcing: [], claimingUpTo: 1).claimed.map(\.id) == [mine.jobID])
        guard case .claimed = try await b.claim(theirs, force: false) else {
            Issue.record("a new job is claimed")
            return
        }
        a.recordStarted(mine.jobID)
        b.recordStarted(theirs.jobID)
        await a.flush()
        await b.flush()
        do {
            try await confirm(a, theirs.jobID, bytes: 4000)
            Issue.record("a job another live owner holds was confirmed")
        } catch {
            #expect(error.code == .runningElsewhere)
        }
        try await confirm(a, mine.jobID, bytes: 4000)
        a.recordCompleted(mine.jobID, bytes: 4000, transferred: 4000, unchanged: false,
            finalURL: mine.url, path: nil, file: nil)
        await a.flush()
        let rows = try await b.watch([mine.jobID, theirs.jobID]).rows
        #expect(rows[mine.jobID]?.state == .completed)
        #expect(rows[theirs.jobID]?.state == .running)
        #expect(rows[theirs.jobID]?.owner == (try b.ownerToken()))
        do {
            try await confirm(a, mine.jobID, bytes: 4000)
            Issue.record("a completed job was confirmed again")
        } catch {
            #expect(error.code == .runningElsewhere)
        }
        await a.close()
        await b.close()
    }

    /// A completion that put nothing into place (a `304`: the completed file is unchanged,
    /// so nothing confirmed it first) is recorded in full: completed, unchanged, with its
    /// completed file, and claimed again with that file to revalidate. The shared queue
    /// dropped it, and a worker left the job running under a lease it kept renewing.
    static func unchangedCompletionRecordedWithoutConfirmation(_ harness: any StoreHarness) async throws {
        let a = try await harness.makeOwner()
        let job = try harness.record("unchanged")
        let file = CompletedFile(
            path: "/srv/unchanged", size: 4000, modified: 1_700_000_000_000_000_000, validator: .etag("\"v1\""))
        #expect(try await a.submit([job], forcing: [], claimingUpTo: 1).claimed.map(\.id) == [job.jobID])
        a.recordStarted(job.jobID)
        a.recordCompleted(job.jobID, bytes: 4000, transferred: 0, unchanged: true,
            finalURL: job.url, path: file.path, file: file)
        await a.flush()
        let row = try await a.watch([job.jobID]).rows[job.jobID]
        #expect(row?.state == .completed)
        #expect(row?.bytesCommitted == 4000)
        guard case .claimed(let again) = try await a.claim(job, force: false) else {
            Issue.record("a completed job is claimed again")
            return
        }
        #expect(again.progress?.completedFile == file)
        await a.close()
    }

    /// `store`'s ``JobStore/confirmCompletion(_:bytes:)`` and its answer, waited for if it
    /// is not known at once.
    static func confirm(_ store: any JobStore, _ id: DownloadID, bytes: Int64) async throws(DownloadError) {
        try await store.confirmCompletion(id, bytes: bytes).answer()
    }

    private static func claimed(_ claim: JobClaim) -> ClaimedJob? {
        guard case .claimed(let job) = claim else { return nil }
        return job
    }

    /// A sequence of the contract, by name: each runs on both stores.
    struct Sequence: Sendable, CustomTestStringConvertible {
        let name: String
        let run: @Sendable (any StoreHarness) async throws -> Void
        var testDescription: String { name }
    }

    /// Every sequence, written once.
    static let sequences: [Sequence] = [
        Sequence(name: "submitClaimCheckpointComplete", run: submitClaimCheckpointComplete),
        Sequence(name: "submitClaimingAtOnce", run: submitClaimingAtOnce),
        Sequence(name: "completedClaimedAgainRevalidatesUnlessForced", run: completedClaimedAgainRevalidatesUnlessForced),
        Sequence(name: "submittedAgainAfterItsEnd", run: submittedAgainAfterItsEnd),
        Sequence(name: "failAndRetry", run: failAndRetry),
        Sequence(name: "pauseAndResume", run: pauseAndResume),
        Sequence(name: "cancel", run: cancel),
        Sequence(name: "heldJobIsAttached", run: heldJobIsAttached),
        Sequence(name: "crashedOwnerTakenOverAndFenced", run: crashedOwnerTakenOverAndFenced),
        Sequence(name: "phasesRetriesAndSources", run: phasesRetriesAndSources),
        Sequence(name: "aURLToTwoDestinationsIsTwoJobs", run: aURLToTwoDestinationsIsTwoJobs),
        Sequence(name: "completionConfirmedOnlyToItsHolder", run: completionConfirmedOnlyToItsHolder),
        Sequence(
            name: "unchangedCompletionRecordedWithoutConfirmation", run: unchangedCompletionRecordedWithoutConfirmation),
    ]
}

/// One store kind under the conformance suite: makes owners of one store, and crashes them.
protocol StoreHarness: Sendable {
    /// A store instance acting for a new owner, sharing the harness's jobs.
    func makeOwner() async throws -> any JobStore
    /// Makes `store`'s owner look dead to the others (its process killed, its lease run
    /// out) without closing it, as a stopped process that may run again.
    func crash(_ store: any JobStore) async throws
    /// Whether a job taken over from a crashed owner may still be written by that owner.
    var takeoverMayBeWritten: Bool { get }
    /// Where the harness's downloads go.
    var directory: URL { get }
}

extension StoreHarness {
    /// The record of a download named `name` into the harness's directory.
    func record(_ name: String) throws -> JobRecord { try record(name, savedAs: name) }

    /// The record of a download of `/files/name`, saved as `file` in the harness's directory.
    func record(_ name: String, savedAs file: String) throws -> JobRecord {
        try JobRecord.make(
            for: DownloadRequest(
                url: URL(string: "http://127.0.0.1:9/files/\(name)")!, destination: .directory(directory, name: file)))
    }
}

extension JobRecord {
    var jobID: DownloadID { DownloadID(id) }
}

/// The SQLite journal: each owner is a `Journal` instance of its own on one file (its own
/// owner lock); a crash removes its lock file, which is what others see of a dead owner.
final class JournalHarness: StoreHarness {
    let directory: URL
    var path: String { directory.appendingPathComponent("journal.sqlite").path }

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-conformance-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func makeOwner() async throws -> any JobStore {
        let store = JournalStore(journal: try Journal(path: path), logger: StoreConformance.logger)
        _ = try store.ownerToken()
        return store
    }

    func crash(_ store: any JobStore) async throws {
        let owners = try #require(store as? JournalStore).journal.owners
        let token = try #require(owners.token)
        #expect(unlink(owners.path(of: token)) == 0)
    }

    var takeoverMayBeWritten: Bool { false }


    func close() {
        try? FileManager.default.removeItem(at: directory)
    }

    static func with(_ body: (JournalHarness) async throws -> Void) async throws {
        let harness = try JournalHarness()
        defer { harness.close() }
        try await body(harness)
    }
}

/// The shared queue: each owner is a registered worker with a `PostgresJobStore` on one
/// database; a crash lets its leases and heartbeat run out.
final class PostgresHarness: StoreHarness {
    let queue: PostgresQueue
    let directory: URL

    init(queue: PostgresQueue) throws {
        self.queue = queue
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-conformance-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func makeOwner() async throws -> any JobStore {
        var id: Int64?
        for try await row in try await queue.client.query(
            "INSERT INTO haul_workers (host, pid) VALUES ('conformance', 1) RETURNING id"
        ).decode(Int64.self) {
            id = row
        }
        var settings = QueueWorker.Settings(directory: directory)
        settings.slots = 10
        settings.lease = .seconds(60)
        return PostgresJobStore(queue: queue, owner: try #require(id), settings: settings, logger: StoreConformance.logger)
    }

    func crash(_ store: any JobStore) async throws {
        let owner = try store.ownerToken()
        try await queue.client.query(
            "UPDATE haul_jobs SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = \(owner)")
        try await queue.client.query(
            "UPDATE haul_workers SET heartbeat_at = now() - interval '1 hour' WHERE id = \(owner)")
    }

    var takeoverMayBeWritten: Bool { true }


    static func with(_ body: @Sendable (PostgresHarness) async throws -> Void) async throws {
        let harness = try PostgresHarness(queue: PostgresQueue(address: try await PostgresCluster.makeDatabase()))
        try await harness.queue.withRunning {
            try await harness.queue.migrate()
            try await body(harness)
        }
        try? FileManager.default.removeItem(at: harness.directory)
    }
}

@Suite("Store conformance: SQLite journal", .timeLimit(.minutes(4)))
struct StoreConformanceJournalTests {
    @Test(arguments: StoreConformance.sequences)
    func sequence(_ sequence: StoreConformance.Sequence) async throws {
        try await JournalHarness.with { try await sequence.run($0) }
    }
}

@Suite(
    "Store conformance: PostgreSQL",
    .enabled(
        if: PostgresCluster.isAvailable,
        "PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): run .ci/run or apt-get install postgresql"),
    .timeLimit(.minutes(4)))
struct StoreConformancePostgresTests {
    @Test(arguments: StoreConformance.sequences)
    func sequence(_ sequence: StoreConformance.Sequence) async throws {
        try await PostgresHarness.with { try await sequence.run($0) }
    }
}

/// The one place partial files change hands: a job taken over from an owner that may
/// still write (``ClaimedJob/mayBeWritten``) gets a partial of its own.
@Suite("Taking over a partial file")
struct PartialTakeoverTests {
    @Test func theStaleWritersLateWritesMissTheDetachedPartial() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-takeover-" + UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let paths = try #require(
            try PartialPaths(
                destination: .directory(directory, name: "f.bin"), url: URL(string: "http://127.0.0.1/f.bin")!))
        try Data("committed".utf8).write(to: URL(fileURLWithPath: paths.partial))
        // Given the stale owner's descriptor, still open on the partial
        let stale = open(paths.partial, O_WRONLY | O_APPEND)
        #expect(stale >= 0)
        defer { close(stale) }
        // When the new owner detaches it (the metadata file does not exist yet)
        #expect(try paths.detachFromPreviousWriter() == [paths.partial])
        // Then the stale owner's late writes land in a file no name leads to
        _ = "late".withCString { write(stale, $0, 4) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: paths.partial)) == Data("committed".utf8))
        #expect(!FileManager.default.fileExists(atPath: paths.partial + ".haul-takeover"))
    }
}
