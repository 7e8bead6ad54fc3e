package import Foundation
import GRDB
package import Haul

/// What a page of the job list asks for: the service's `GET /downloads`.
package struct JobQuery: Sendable, Equatable {
    /// The orders a list can be sorted in. Ties keep journal order (oldest first).
    package enum Sort: String, Sendable, CaseIterable {
        case created, name, size, progress, state, priority, speed
    }

    /// Only jobs in these states; all when `nil`.
    package var states: Set<JobState>?
    /// Only jobs whose URL or destination contains this text (case-insensitively).
    package var text: String?
    package var sort: Sort = .created
    package var descending = false
    package var offset = 0
    package var limit = 100

    package init(
        states: Set<JobState>? = nil, text: String? = nil, sort: Sort = .created, descending: Bool = false,
        offset: Int = 0, limit: Int = 100
    ) {
        self.states = states
        self.text = text
        self.sort = sort
        self.descending = descending
        self.offset = offset
        self.limit = limit
    }
}

/// The journal's side of the service: pages of the job list, counts per state, and the
/// controls the service applies to jobs that are not in its manager's memory (queued jobs
/// not yet admitted, and finished ones). Every statement that changes a row is conditional
/// on the row being in the state it expects and not held by another live process, so a
/// change cannot race an admission or another process.
extension Journal {
    // MARK: - Reading

    /// One page of jobs and how many match in all. With the default order this is a walk
    /// of the table's rowids, however far the offset; other orders sort keys, not rows.
    package func page(_ query: JobQuery) throws(DownloadError) -> (total: Int, jobs: [JobSnapshot]) {
        var conditions: [String] = []
        var arguments: [any DatabaseValueConvertible] = []
        if let states = query.states {
            guard !states.isEmpty else { return (0, []) }
            conditions.append("state IN (\(states.map { _ in "?" }.joined(separator: ",")))")
            arguments += states.map(\.rawValue).sorted()
        }
        if let text = query.text?.lowercased(), !text.isEmpty {
            // LIKE with its wildcards escaped: the text is matched literally.
            let pattern =
                "%" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%")
                .replacingOccurrences(of: "_", with: "\\_") + "%"
            // SQLite's LIKE ignores ASCII case by itself (as `lower()` folds only ASCII too).
            conditions.append("(url LIKE ? ESCAPE '\\' OR partialPath LIKE ? ESCAPE '\\')")
            arguments += [pattern, pattern]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        let direction = query.descending ? "DESC" : "ASC"
        let key: String =
            switch query.sort {
            case .created: "rowid \(direction)"
            case .name: "partialPath \(direction), rowid"
            case .size: "totalBytes IS NULL, totalBytes \(direction), rowid"
            case .progress:
                "CASE WHEN state = 'completed' THEN 1.0 WHEN totalBytes > 0 THEN CAST(bytesCommitted AS REAL) / totalBytes ELSE 0 END \(direction), rowid"
            case .state: "state \(direction), rowid"
            case .priority: "priority \(direction), rowid"
            case .speed: "bytesPerSecond \(direction), rowid"
            }
        return try read { db in
            let total = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM job \(filter)", arguments: StatementArguments(arguments)) ?? 0
            // The page's rowids are found first, sorting only keys and rowids, and the 100 rows
            // read after: sorting whole rows to skip most of them is several times slower.
            let rows = try JobRecord.fetchAll(
                db,
                sql: """
                    SELECT * FROM job WHERE rowid IN (SELECT rowid FROM job \(filter) ORDER BY \(key) LIMIT ? OFFSET ?)
                    ORDER BY \(key)
                    """,
                arguments: StatementArguments(arguments + [query.limit, query.offset]))
            return (total, rows.map(JobSnapshot.init))
        }
    }

    /// The jobs of `ids` that exist, in the order of `ids`.
    package func jobs(_ ids: [DownloadID]) throws(DownloadError) -> [JobSnapshot] {
        let keys = ids.map(\.rawValue)
        let rows: [JobRecord] = try read { db in
            var rows: [JobRecord] = []
            var start = 0
            while start < keys.count {
                rows += try JobRecord.fetchAll(db, keys: Array(keys[start..<min(keys.count, start + 500)]))
                start += 500
            }
            return rows
        }
        let byID = Dictionary(rows.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        return keys.compactMap { byID[$0].map(JobSnapshot.init) }
    }

    /// Which of `ids` have a row.
    package func existing(_ ids: [DownloadID]) throws(DownloadError) -> Set<DownloadID> {
        let keys = ids.map(\.rawValue)
        return try read { db in
            var found: Set<DownloadID> = []
            var start = 0
            while start < keys.count {
                let chunk = Array(keys[start..<min(keys.count, start + 500)])
                start += 500
                let marks = repeatElement("?", count: chunk.count).joined(separator: ",")
                let sql = "SELECT id FROM job WHERE id IN (\(marks))"
                for id in try String.fetchAll(db, sql: sql, arguments: StatementArguments(chunk)) {
                    found.insert(DownloadID(id))
                }
            }
            return found
        }
    }

    /// How many jobs are in each state (states without jobs are absent).
    package func stateCounts() throws(DownloadError) -> (counts: [JobState: Int], unchanged: Int) {
        try read { db in
            var counts: [JobState: Int] = [:]
            var unchanged = 0
            for row in try Row.fetchAll(
                db, sql: "SELECT state, COUNT(*) AS n, SUM(unchanged) AS u FROM job GROUP BY state")
            {
                guard let state = JobState(rawValue: row["state"]) else { continue }
                counts[state] = row["n"]
                if state == .completed { unchanged = row["u"] ?? 0 }
            }
            return (counts, unchanged)
        }
    }

    /// The IDs of every job in `states`, oldest first.
    package func ids(in states: Set<JobState>) throws(DownloadError) -> [DownloadID] {
        guard !states.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: states.count).joined(separator: ",")
        let arguments = StatementArguments(states.map(\.rawValue))
        let rows: [String] = try read { db in
            try String.fetchAll(db, sql: "SELECT id FROM job WHERE state IN (\(marks)) ORDER BY rowid", arguments: arguments)
        }
        return rows.map { DownloadID($0) }
    }

    // MARK: - Controls of rows outside the manager's memory

    /// Pauses the queued jobs among `ids` that no process has admitted yet; returns those it
    /// paused.
    package func pauseQueued(_ ids: [DownloadID]) throws(DownloadError) -> [DownloadID] {
        try update(ids) { db, id in
            try db.execute(
                sql: "UPDATE job SET state = 'paused', command = NULL, updatedAt = ? WHERE id = ? AND state = 'queued' AND owner IS NULL",
                arguments: [Date(), id.rawValue])
            return db.changesCount > 0
        }
    }

    /// Queues again, for process `session`, the jobs among `ids` that are in `states` and
    /// that no live process holds; returns those it queued. `retrying` also resets their
    /// attempts and errors.
    package func requeue(_ ids: [DownloadID], from states: Set<JobState>, session: Int64, retrying: Bool)
        throws(DownloadError) -> [DownloadID]
    {
        let list = states.map { "'\($0.rawValue)'" }.sorted().joined(separator: ",")
        let reset = retrying ? ", attempts = 0, lastError = NULL, errorCode = NULL, finishedAt = NULL" : ", lastError = NULL, errorCode = NULL"
        return try update(ids, refreshingOwners: true) { db, id in
            try db.execute(
                sql: """
                    UPDATE job SET state = 'queued', owner = NULL, session = ?, command = NULL, updatedAt = ?\(reset)
                    WHERE id = ? AND state IN (\(list)) AND NOT \(Self.heldElsewhereSQL)
                    """, arguments: [session, Date(), id.rawValue, session, session])
            return db.changesCount > 0
        }
    }

    /// Sets the priority of the jobs among `ids` that no live process holds; returns those
    /// it changed.
    package func setPriority(_ priority: DownloadPriority, of ids: [DownloadID], me: Int64) throws(DownloadError)
        -> [DownloadID]
    {
        try update(ids, refreshingOwners: true) { db, id in
            try db.execute(
                sql: "UPDATE job SET priority = ?, updatedAt = ? WHERE id = ? AND NOT \(Self.heldElsewhereSQL)",
                arguments: [priority.rawValue, Date(), id.rawValue, me, me])
            return db.changesCount > 0
        }
    }

    /// Sets the speed limit (`nil`: none) of the unfinished jobs among `ids` that no other
    /// live process holds; returns those it changed.
    package func setRateLimit(_ bytesPerSecond: Int?, of ids: [DownloadID], me: Int64) throws(DownloadError) -> [DownloadID] {
        try update(ids, refreshingOwners: true) { db, id in
            try db.execute(
                sql: """
                    UPDATE job SET maxBytesPerSecond = ?, updatedAt = ?
                    WHERE id = ? AND state IN ('queued', 'running', 'paused', 'waiting') AND NOT \(Self.heldElsewhereSQL)
                    """,
                arguments: [bytesPerSecond, Date(), id.rawValue, me, me])
            return db.changesCount > 0
        }
    }

    /// Sets the addresses of the unfinished or failed downloads among `ids` that no live
    /// process holds: `first` in place of the URL (its `location`), and `mirrors` unless
    /// `nil` (see ``ServiceAction/sources(first:mirrors:)``).
    package func setSources(_ first: URL, mirrors: [URL]?, of ids: [DownloadID], me: Int64) throws(DownloadError)
        -> [DownloadID]
    {
        let encoded = mirrors.flatMap { JobRecord.encode(urls: $0) }
        return try update(ids, refreshingOwners: true) { db, id in
            try db.execute(
                sql: """
                    UPDATE job SET location = CASE WHEN url = ? THEN NULL ELSE ? END,
                        mirrors = CASE WHEN ? THEN ? ELSE mirrors END, updatedAt = ?
                    WHERE id = ? AND state IN ('queued', 'running', 'paused', 'waiting', 'failed', 'cancelled')
                        AND NOT \(Self.heldElsewhereSQL)
                    """,
                arguments: [
                    first.absoluteString, first.absoluteString, mirrors != nil, encoded, Date(), id.rawValue, me, me,
                ])
            return db.changesCount > 0
        }
    }

    /// Deletes the rows of `ids` that no live process holds (finished ones, and unfinished
    /// ones nobody runs, whose partial files go too); with `deletingFiles`, completed files
    /// still at their destination go as well. Returns the IDs it deleted.
    package func remove(_ ids: [DownloadID], deletingFiles: Bool, me: Int64) throws(DownloadError) -> [DownloadID] {
        var partials: [String] = []
        var files: [(path: String, size: Int64)] = []
        let removed = try update(ids, refreshingOwners: true) { db, id in
            guard let record = try JobRecord.fetchOne(db, id: id.rawValue) else { return false }
            try db.execute(
                sql: "DELETE FROM job WHERE id = ? AND NOT \(Self.heldElsewhereSQL)", arguments: [id.rawValue, me, me])
            guard db.changesCount > 0 else { return false }
            if record.state.isUnfinished { partials.append(record.partialPath) }
            if deletingFiles, record.state == .completed {
                let snapshot = JobSnapshot(record)
                files.append((record.filePath ?? snapshot.destination, record.fileSize ?? record.bytesCommitted))
            }
            return true
        }
        for partial in partials { PartialFile.remove(partialAt: partial) }
        for file in files {
            // Only the file this job made: one whose size still matches.
            var info = stat()
            if stat(file.path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, Int64(info.st_size) == file.size {
                unlink(file.path)
            }
        }
        return removed
    }

    /// Runs `change` for each ID in one write transaction; returns the IDs whose row it
    /// changed.
    private func update(
        _ ids: [DownloadID], refreshingOwners: Bool = false, _ change: (Database, DownloadID) throws -> Bool
    ) throws(DownloadError) -> [DownloadID] {
        guard !ids.isEmpty else { return [] }
        return try write { db in
            if refreshingOwners { refreshLiveOwners(db) }
            var changed: [DownloadID] = []
            for id in ids where try change(db, id) { changed.append(id) }
            return changed
        }
    }
}
