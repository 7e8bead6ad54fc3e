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
        let rows = try read { db in
            var request = JobRecord.all().order(sql: "rowid")
            if let wanted { request = request.filter(wanted.map(\.rawValue).contains(JobRecord.Columns.state)) }
            return try request.fetchAll(db)
        }
        return rows.compactMap { row in
            var job = JobSnapshot(row)
            if row.state == .running, let owner = row.owner, !owners.isAlive(owner) {
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
