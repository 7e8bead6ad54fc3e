#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
package import GRDB
import NIOConcurrencyHelpers

/// The durable record of every download: an SQLite database (WAL mode) that survives
/// crashes, and through which several `haul` processes share and control jobs.
///
/// A ``DownloadManager`` given a journal records each download's state, resume offset
/// (only bytes already fsynced) and errors, admits queued jobs from it a window at a time,
/// and obeys commands other processes leave in it.
///
/// ```swift
/// let journal = try Journal(path: Journal.defaultPath)
/// let manager = DownloadManager(journal: journal)
/// ```
public final class Journal: Sendable {
    /// The database. GRDB stays out of Haul's public API: tests reach it through
    /// `@testable import Haul`.
    let writer: any DatabaseWriter
    /// The lock files that tell which processes running this journal's jobs are alive.
    let owners: OwnerLocks
    /// The live owners other than this instance, as the `haul_alive` SQL function sees
    /// them: refreshed inside each write transaction that asks (see ``refreshLiveOwners(_:)``).
    private let liveSnapshot = NIOLockedValueBox<Set<Int64>>([])
    /// The receivers of webhooks for download ends (see ``outbox``).
    let outboxBox = NIOLockedValueBox<Outbox?>(nil)
    /// Hears how long each of the manager's batched journal writes took (a service's metrics).
    private let writeObserver = NIOLockedValueBox<(@Sendable (Duration) -> Void)?>(nil)

    /// Calls `observer` with the duration of every batched write from now on.
    package func observeWrites(_ observer: @escaping @Sendable (Duration) -> Void) {
        writeObserver.withLockedValue { $0 = observer }
    }

    /// Tells the observer, if any, that a batched write took `duration`.
    func wrote(in duration: Duration) {
        writeObserver.withLockedValue { $0 }?(duration)
    }

    /// `$XDG_STATE_HOME/haul/journal.sqlite`, else `~/.local/state/haul/journal.sqlite`; on
    /// Apple platforms `haul/journal.sqlite` in Application Support (the app's container on
    /// iOS).
    public static var defaultPath: String {
        #if canImport(Darwin)
        if let support = FileManager.default.urls(for: .applicationSupportDirectory, in: .userDomainMask).first {
            return support.appendingPathComponent("haul/journal.sqlite").path
        }
        #endif
        let environment = ProcessInfo.processInfo.environment
        let base: String
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            base = state
        } else {
            let home = environment["HOME"] ?? NSHomeDirectory()
            base = (home as NSString).appendingPathComponent(".local/state")
        }
        return (base as NSString).appendingPathComponent("haul/journal.sqlite")
    }

    /// Opens (creating if needed) the journal at `path`, creating its directory, and
    /// brings its schema up to date.
    ///
    /// The journal may hold request headers, so only its owner can read it: the file (and
    /// with it SQLite's `-wal` and `-shm` files) is created with mode 0600, an existing one
    /// is tightened to it, and a directory created for it gets 0700 (as does the default
    /// journal's `haul` directory; other existing directories are left as they are).
    public convenience init(path: String) throws(DownloadError) {
        try Self.createPrivately(path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        // Two readers are plenty: the journal is read in short queries.
        configuration.maximumReaderCount = 2
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            #if canImport(Darwin)
            // Darwin's fsync stops at the drive's cache; F_FULLFSYNC reaches the medium.
            try db.execute(sql: "PRAGMA fullfsync = ON")
            try db.execute(sql: "PRAGMA checkpoint_fullfsync = ON")
            #endif
        }
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
        } catch {
            throw DownloadError(.fileSystem, "cannot open the journal \(path): \(error)")
        }
        try self.init(writer: pool)
    }

    /// Creates the journal's directory (0700) and file (0600) before SQLite opens it, which
    /// gives its `-wal` and `-shm` files the file's mode; tightens an existing journal
    /// file (and its `-wal` and `-shm`) of ours to 0600.
    private static func createPrivately(_ path: String) throws(DownloadError) {
        // A bare file name (`--journal j.sqlite`) is in the current directory.
        let directory = PathText.directory(of: path)
        let manager = FileManager.default
        var isDirectory: ObjCBool = false
        if manager.fileExists(atPath: directory, isDirectory: &isDirectory) {
            // Only the default directory, which is Haul's own: never a directory the user named.
            if isDirectory.boolValue, directory == PathText.directory(of: defaultPath) {
                tighten(directory, to: 0o700)
            }
        } else {
            do {
                try manager.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw DownloadError(
                    .fileSystem, "cannot create the journal's directory \(directory): \(error.localizedDescription)")
            }
        }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .fileSystem("create the journal", path: path, errno: errno) }
        close(descriptor)
        for file in [path, path + "-wal", path + "-shm"] { tighten(file, to: 0o600) }
    }

    /// Takes group and other permissions away from `path`, if it is ours.
    private static func tighten(_ path: String, to mode: mode_t) {
        var info = stat()
        guard stat(path, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o077 != 0 else { return }
        _ = chmod(path, mode)
    }

    /// Uses `writer` as the journal and brings its schema up to date (and adds the
    /// journal's SQL functions to its writer connection).
    init(writer: any DatabaseWriter) throws(DownloadError) {
        self.writer = writer
        let path = writer.path
        owners = OwnerLocks(
            journalPath: path.isEmpty || path.hasPrefix(":") || path.hasPrefix("file::")
                ? NSTemporaryDirectory() + "haul-journal-\(UUID().uuidString)" : path)
        let live = liveSnapshot
        do {
            try Self.updateSchema(of: writer)
            // Only write transactions ask who is alive, and they all run on the writer's
            // one connection.
            writer.writeWithoutTransaction { db in
                db.add(
                    function: DatabaseFunction("haul_alive", argumentCount: 1, pure: false) { values in
                        guard let token = Int64.fromDatabaseValue(values[0]) else { return false }
                        return live.withLockedValue { $0.contains(token) }
                    })
            }
        } catch {
            throw DownloadError(.fileSystem, "cannot update the journal's schema: \(error)")
        }
    }

    // MARK: - Owners

    /// This journal instance's owner token: taken (with its lock) on first use.
    func ownerToken() throws(DownloadError) -> Int64 { try owners.acquire() }

    /// Works out, inside a write transaction, which other owners are alive, for the
    /// `haul_alive` SQL function and the caller. Exact: a process takes its lock before it
    /// writes any row naming it, and a token is never reused.
    @discardableResult
    package func refreshLiveOwners(_ db: Database) -> [Int64: JournalOwner] {
        let live = owners.liveOwners()
        liveSnapshot.withLockedValue { $0 = Set(live.keys) }
        return live
    }

    /// SQL that is true for an unfinished row another live process holds: it runs it (or
    /// has it paused in memory), or it queued it and has yet to admit it. Needs
    /// ``refreshLiveOwners(_:)`` first in the same transaction, and `me` bound twice.
    package static let heldElsewhereSQL = """
        (job.state IN ('queued', 'running', 'paused', 'waiting') AND (
            (job.owner IS NOT NULL AND job.owner IS NOT ? AND haul_alive(job.owner))
            OR (job.owner IS NULL AND job.state = 'queued' AND job.session IS NOT NULL
                AND job.session IS NOT ? AND haul_alive(job.session))))
        """

    /// The `errorCode` of a job paused because its process stopped (a signal, a shutdown),
    /// not by a person: a service that starts again resumes these, and leaves those a
    /// person paused as they are.
    package static let shutdownCode = "stopped"

    // MARK: - Reading

    /// Every job, oldest first; optionally only those in `states`.
    public func jobs(in states: Set<JobState>? = nil) throws(DownloadError) -> [JobSnapshot] {
        try read { db in
            var request = JobRecord.all().order(sql: "rowid")
            if let states { request = request.filter(states.map(\.rawValue).contains(JobRecord.Columns.state)) }
            return try request.fetchAll(db).map(JobSnapshot.init)
        }
    }

    /// The job with `id`, if any.
    public func job(_ id: DownloadID) throws(DownloadError) -> JobSnapshot? {
        try read { db in try JobRecord.fetchOne(db, id: id.rawValue).map(JobSnapshot.init) }
    }

    /// The row of the job with `id`, if any.
    package func record(_ id: DownloadID) throws(DownloadError) -> JobRecord? {
        try read { db in try JobRecord.fetchOne(db, id: id.rawValue) }
    }

    /// The download `handle` names: the job with that ID, else the only one of that URL
    /// (see ``JobIdentity/resolve(_:among:)``); `nil` when none.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` when the URL names several.
    package func job(named handle: String) throws(DownloadError) -> DownloadID? {
        try jobs(named: handle)?.id
    }

    /// ``job(named:)``, with the other downloads of that URL (to other places), which a
    /// URL that is also an ID leaves aside.
    package func jobs(named handle: String) throws(DownloadError) -> (id: DownloadID, others: [DownloadID])? {
        let prefix = handle + JobIdentity.separator
        // Every ID that starts with the prefix sorts from it to just before the prefix with
        // its last character (a space) raised by one.
        let end = handle + " ->!"
        let ids = try read { db in
            try String.fetchAll(
                db, sql: "SELECT id FROM job WHERE id = ? OR (id >= ? AND id < ?)", arguments: [handle, prefix, end])
        }
        guard let id = try JobIdentity.resolve(handle, among: ids) else { return nil }
        return (DownloadID(id), ids.filter { $0 != id }.sorted().map { DownloadID($0) })
    }

    // MARK: - Control from any process

    /// What a control call did.
    public enum ControlResult: Sendable, Equatable {
        /// No job has that ID.
        case notFound
        /// The job was already in a state where the call changes nothing.
        case unchanged(JobState)
        /// The job was changed directly.
        case applied
        /// The process running the job was asked; it acts within a second.
        case requested
    }

    /// Pauses a job: directly when no live process owns it, else by asking its owner.
    @discardableResult
    public func pause(_ id: DownloadID) throws(DownloadError) -> ControlResult {
        try control(id, command: "pause") { record in
            guard record.state == .queued || record.state == .running || record.state == .waiting else { return false }
            record.state = .paused
            return true
        }
    }

    /// Cancels a job and deletes its partial file (directly, or through its owner).
    @discardableResult
    public func cancel(_ id: DownloadID) throws(DownloadError) -> ControlResult {
        let (result, partial) = try cancelRow(id)
        if let partial { PartialFile.remove(partialAt: partial) }
        return result
    }

    /// Cancels a job's row (directly, or through its owner); when it was cancelled directly,
    /// returns its partial file's path too, for the caller to delete (the journal's store
    /// touches no files).
    package func cancelRow(_ id: DownloadID) throws(DownloadError) -> (ControlResult, partialPath: String?) {
        var partial: String?
        let result = try control(id, command: "cancel") { record in
            guard record.state.isUnfinished else { return false }
            record.state = .cancelled
            record.finishedAt = Date()
            record.lastError = "cancelled"
            record.errorCode = "cancelled"
            partial = record.partialPath
            return true
        }
        return (result, result == .applied ? partial : nil)
    }

    /// Queues a failed, cancelled or paused job again, resuming from its partial file.
    @discardableResult
    public func retry(_ id: DownloadID) throws(DownloadError) -> ControlResult {
        try write { db -> ControlResult in
            guard var record = try JobRecord.fetchOne(db, id: id.rawValue) else { return .notFound }
            guard record.state != .completed, record.state != .running, record.state != .queued else {
                return .unchanged(record.state)
            }
            if let owner = record.owner, owner != owners.token, owners.isAlive(owner),
                record.state == .paused || record.state == .waiting
            {
                record.command = "resume"
                try record.update(db)
                return .requested
            }
            record.state = .queued
            record.owner = nil
            record.attempts = 0
            record.lastError = nil
            record.errorCode = nil
            record.finishedAt = nil
            record.updatedAt = Date()
            try record.update(db)
            return .applied
        }
    }

    /// Queues, for process `session`, every unfinished job that no other live process
    /// holds (see ``heldElsewhereSQL``); returns how many, and the jobs other processes
    /// hold. Those that their holder has paused are asked to resume.
    ///
    /// With `keepingPaused`, jobs a person paused stay paused (and are not counted); those
    /// paused because their process stopped (``shutdownCode``) are queued like the rest.
    func adoptUnfinished(session: Int64, keepingPaused: Bool = false) throws(DownloadError)
        -> (count: Int, attachments: [JobAttachment])
    {
        try write { db in
            let live = refreshLiveOwners(db)
            let paused = keepingPaused ? "(state = 'paused' AND errorCode IS '\(Self.shutdownCode)')" : "state = 'paused'"
            try db.execute(
                sql: """
                    UPDATE job SET state = 'queued', owner = NULL, session = ?, command = NULL, updatedAt = ?,
                        errorCode = NULL, lastError = NULL
                    WHERE (state IN ('queued', 'running', 'waiting') OR \(paused)) AND NOT \(Self.heldElsewhereSQL)
                    """, arguments: [session, Date(), session, session])
            let count = db.changesCount
            let held = try JobRecord.fetchAll(
                db, sql: "SELECT * FROM job WHERE \(Self.heldElsewhereSQL)", arguments: [session, session])
            return (count, try Self.attach(held, live: live, in: db))
        }
    }

    /// Adds or takes over many jobs at once for process `session`, in one transaction, and
    /// claims up to `limit` of them for it (those not added paused, highest priority first,
    /// as ``claim(limit:session:)`` would take them), each as a single claim would. Jobs
    /// another live process holds are left to it and returned.
    func insert(
        _ records: [JobRecord], session: Int64, forcing forced: Set<String> = [], claimingUpTo limit: Int = 0
    ) async throws(DownloadError) -> SubmittedJobs {
        do {
            return try await writer.write { db in
                let live = self.refreshLiveOwners(db)
                var submitted = SubmittedJobs()
                var records = records
                var forced = forced
                submitted.renamed = try Self.identify(&records, in: db)
                for (index, id) in submitted.renamed where forced.contains(records[index].url) { forced.insert(id) }
                var held: [String] = []
                var claiming: Set<Int> = []
                if limit > 0 {
                    let claimable = records.indices.filter { records[$0].state != .paused }
                    // A stable sort: equal priorities keep their order.
                    let order = claimable.enumerated().sorted { a, b in
                        let (pa, pb) = (records[a.element].priority, records[b.element].priority)
                        return pa != pb ? pa > pb : a.offset < b.offset
                    }
                    claiming = Set(order.prefix(limit).map(\.element))
                }
                // Which of the jobs to claim have a row already, in one query per chunk rather
                // than a lookup per job (a new list has none).
                let existing = try Self.existingIDs(claiming.map { records[$0].id }, in: db)
                let upsert = try db.cachedStatement(sql: JournalWriter.upsertSQL)
                for (index, var record) in records.enumerated() {
                    let force = !forced.isEmpty && forced.contains(record.id)
                    if claiming.contains(index) {
                        let isNew = !existing.contains(record.id)
                        switch try JournalWriter.claim(record, owner: session, force: force, live: live, in: db, isNew: isNew) {
                        case .claimed(let claimed): submitted.claimed.append(claimed)
                        case .heldElsewhere(let attachment): submitted.attachments.append(attachment)
                        }
                        continue
                    }
                    record.owner = nil
                    record.session = session
                    if try !JournalWriter.upsert(record, me: session, force: force, with: upsert, in: db) {
                        held.append(record.id)
                    }
                }
                guard !held.isEmpty else { return submitted }
                let rows = try held.compactMap { try JobRecord.fetchOne(db, id: $0) }
                submitted.attachments += try Self.attach(rows, live: live, in: db)
                return submitted
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// Gives each of `records` the ID ``JobIdentity`` keeps it under, given the rows
    /// already there and the records before it; returns those it renamed, by index.
    static func identify(_ records: inout [JobRecord], in db: Database) throws -> [(index: Int, id: String)] {
        let defaulted = records.filter { $0.id == $0.url }.map(\.id)
        guard !defaulted.isEmpty else { return [] }
        var taken: [String: String] = [:]
        try inChunks(of: defaulted) { chunk, marks in
            for row in try Row.fetchAll(
                db,
                sql: "SELECT id, destinationKind, destinationPath, destinationName FROM job WHERE id IN (\(marks))",
                arguments: StatementArguments(chunk))
            {
                taken[row["id"]] = JobRecord.identityDestination(
                    kind: row["destinationKind"], path: row["destinationPath"], name: row["destinationName"])
            }
        }
        let renamed = JobIdentity.ids(of: records.map { ($0.id, $0.url, $0.identityDestination) }, taken: taken)
        for (index, id) in renamed { records[index].id = id }
        return renamed
    }

    /// Those of `ids` that have a row.
    static func existingIDs(_ ids: [String], in db: Database) throws -> Set<String> {
        var existing: Set<String> = []
        try inChunks(of: ids) { chunk, marks in
            existing.formUnion(
                try String.fetchAll(
                    db, sql: "SELECT id FROM job WHERE id IN (\(marks))", arguments: StatementArguments(chunk)))
        }
        return existing
    }

    /// Calls `body` with `ids` 500 at a time, and the `?,?,…` of an `IN` list for each
    /// chunk: SQLite allows 32,766 parameters per statement, and small ones stay cheap.
    private static func inChunks(of ids: [String], _ body: ([String], String) throws -> Void) rethrows {
        var start = 0
        while start < ids.count {
            let chunk = Array(ids[start..<min(start + 500, ids.count)])
            start += chunk.count
            try body(chunk, Array(repeating: "?", count: chunk.count).joined(separator: ","))
        }
    }

    /// The attachments for `rows`, which other live processes hold; a paused one is
    /// asked to resume, since somebody wants it again.
    static func attach(_ rows: [JobRecord], live: [Int64: JournalOwner], in db: Database) throws -> [JobAttachment] {
        var attachments: [JobAttachment] = []
        for var row in rows {
            guard let holder = row.holder else { continue }
            if row.state == .paused, row.command == nil {
                row.command = "resume"
                try db.execute(sql: "UPDATE job SET command = 'resume' WHERE id = ?", arguments: [row.id])
            }
            attachments.append(
                JobAttachment(
                    id: DownloadID(row.id), holder: holder, owner: live[holder] ?? JournalOwner(pid: 0, host: "?"),
                    record: row))
        }
        return attachments
    }

    /// The rows of `ids` (those that still exist) and the live owners, for following jobs
    /// other processes run.
    func watch(_ ids: [DownloadID]) async throws(DownloadError) -> (rows: [DownloadID: JobRecord], live: [Int64: JournalOwner]) {
        do {
            // The live owners first, then the rows, each read in a statement of its own
            // (not in one read transaction, whose snapshot begins before its first line).
            // A holder that records its job's end and exits between a snapshot and the
            // check of its lock looked dead mid-download: this process took over, and
            // fetched again, a download that was complete. In this order, a holder found
            // dead ended before the rows were read, and they show what it recorded.
            return try await writer.unsafeRead { db in
                let live = self.owners.liveOwners()
                var rows: [DownloadID: JobRecord] = [:]
                var start = 0
                while start < ids.count {
                    let chunk = ids[start..<min(ids.count, start + 500)].map(\.rawValue)
                    start += 500
                    for record in try JobRecord.fetchAll(db, keys: chunk) { rows[DownloadID(record.id)] = record }
                }
                return (rows, live)
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// Takes up to `limit` queued jobs of `session` that no process runs yet, by priority
    /// then age, and marks them owned by it.
    func claim(limit: Int, session: Int64) async throws(DownloadError) -> [JobRecord] {
        do {
            return try await writer.write { db in
                // One statement marks them and returns them (RETURNING gives no order: they
                // are put back in priority and age order here).
                var claimed: [(rowid: Int64, record: JobRecord)] = []
                let rows = try Row.fetchCursor(
                    db.cachedStatement(
                        sql: """
                            UPDATE job SET owner = ?1
                            WHERE rowid IN (
                                SELECT rowid FROM job WHERE session = ?1 AND state = 'queued' AND owner IS NULL
                                ORDER BY priority DESC, rowid LIMIT ?2)
                            RETURNING \(JobRecord.selection), rowid
                            """), arguments: [session, limit])
                while let row = try rows.next() {
                    var record = try JobRecord(selected: row)
                    // As the row was before this claim marked it.
                    record.owner = nil
                    claimed.append((row[JobRecord.selectionCount], record))
                }
                claimed.sort { a, b in
                    a.record.priority != b.record.priority ? a.record.priority > b.record.priority : a.rowid < b.rowid
                }
                return claimed.map(\.record)
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// Commands other processes left for jobs owned by `owner`.
    func commands(for owner: Int64) async throws(DownloadError) -> [(id: DownloadID, command: String)] {
        do {
            return try await writer.read { db in
                try Row.fetchAll(
                    db, sql: "SELECT id, command FROM job WHERE owner = ? AND command IS NOT NULL", arguments: [owner]
                ).map { (DownloadID($0["id"] as String), $0["command"] as String) }
            }
        } catch {
            throw Self.failure(error)
        }
    }

    /// What ``clean()`` removed.
    public struct CleanReport: Sendable, Equatable {
        /// Finished rows deleted.
        public var rows = 0
        /// Partial files (and their metadata) deleted because no unfinished job uses them.
        public var partialFiles = 0
    }

    /// Deletes finished rows, and partial files in the jobs' directories that no unfinished
    /// job uses.
    public func clean() throws(DownloadError) -> CleanReport {
        var report = CleanReport()
        let (directories, live): (Set<String>, Set<String>) = try write { db in
            let records = try JobRecord.fetchAll(db)
            let directories = Set(records.map { PathText.directory(of: $0.partialPath) })
            let live = Set(records.filter { $0.state.isUnfinished }.map(\.partialPath))
            report.rows = try JobRecord.filter(
                [JobState.completed, .failed, .cancelled].map(\.rawValue).contains(JobRecord.Columns.state)
            ).deleteAll(db)
            return (directories, live)
        }
        report.partialFiles = PartialFile.removeOrphans(in: directories, keeping: live)
        return report
    }

    private func control(
        _ id: DownloadID, command: String, direct: @escaping (inout JobRecord) -> Bool
    ) throws(DownloadError) -> ControlResult {
        try write { db -> ControlResult in
            guard var record = try JobRecord.fetchOne(db, id: id.rawValue) else { return .notFound }
            guard record.state.isUnfinished else { return .unchanged(record.state) }
            if let owner = record.owner, owner != owners.token, owners.isAlive(owner) {
                record.command = command
                try record.update(db)
                return .requested
            }
            let before = record.state
            guard direct(&record) else { return .unchanged(before) }
            record.owner = nil
            record.command = nil
            record.updatedAt = Date()
            try record.update(db)
            return .applied
        }
    }

    // MARK: - Access

    package func read<T>(_ body: (Database) throws -> T) throws(DownloadError) -> T {
        do { return try writer.read(body) } catch { throw Self.failure(error) }
    }

    package func write<T>(_ body: (Database) throws -> T) throws(DownloadError) -> T {
        do { return try writer.write(body) } catch { throw Self.failure(error) }
    }

    static func failure(_ error: any Error) -> DownloadError {
        if let error = error as? DownloadError { return error }
        if let database = error as? DatabaseError, database.resultCode == .SQLITE_FULL {
            return DownloadError(.diskFull, "the journal's disk is full: free some space and run haul resume")
        }
        return DownloadError(.fileSystem, "journal error: \(error)")
    }
}
