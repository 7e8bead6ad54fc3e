#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import GRDB

extension Journal {
    /// Every job as it stands now, oldest first; optionally only those in `states`.
    ///
    /// Unlike ``jobs(in:)``, which shows the rows as written, a job recorded as running
    /// whose process has died (its owner lock is free) shows as it will
    /// be resumed: `paused` with the error code `stopped`, at no speed, and with the bytes its
    /// partial file holds when they are more than the journal's committed bytes (a process
    /// killed between checkpoints leaves more on disk than the journal claims).
    public func standingJobs(in states: Set<JobState>? = nil) throws(DownloadError) -> [JobSnapshot] {
        let wanted = states.map { $0.contains(.paused) ? $0.union([.running]) : $0 }
        var rows = try read { db in
            var request = JobRecord.all().order(sql: "rowid")
            if let wanted { request = request.filter(wanted.map(\.rawValue).contains(JobRecord.Columns.state)) }
            return try request.fetchAll(db)
        }
        let isDead = { (row: JobRecord) -> Bool in
            guard row.state == .running, let owner = row.owner else { return false }
            return !self.owners.isAlive(owner)
        }
        // A holder whose lock is free may have recorded its job's end, and exited, after the
        // rows were read: those rows are read again (a dead process writes no more), so
        // that a download just completed never shows as one whose process died.
        let suspects = rows.indices.filter { isDead(rows[$0]) }
        if !suspects.isEmpty {
            let again = try read { db in
                try JobRecord.fetchAll(db, keys: suspects.map { rows[$0].id })
            }
            let byID = Dictionary(again.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            for index in suspects.reversed() {
                if let row = byID[rows[index].id] { rows[index] = row } else { rows.remove(at: index) }
            }
        }
        return rows.compactMap { row in
            var job = JobSnapshot(row)
            if isDead(row) {
                job.state = .paused
                job.bytesPerSecond = 0
                job.errorCode = Self.shutdownCode
                job.error = "its process died"
                var file = stat()
                if stat(row.partialPath, &file) == 0 { job.bytes = max(job.bytes, Int64(file.st_size)) }
            }
            guard states?.contains(job.state) ?? true else { return nil }
            return job
        }
    }
}
