package import Foundation
import GRDB

/// The webhooks a service owes (`haul serve --webhook`), kept in the journal so that a
/// restart or a `kill -9` loses none: each download end is written with the end itself,
/// one row per receiver (see ``JournalWriter/enqueueWebhooks(for:outbox:in:now:)``), and
/// a row goes only once its receiver has taken it. Delivered at least once: the event ID
/// lets a receiver drop a repeat.
extension Journal {
    /// Where download ends go, and which ends.
    package struct Outbox: Sendable, Equatable {
        /// The ends a webhook is sent for.
        package enum Kind: String, Sendable, CaseIterable {
            case completed, failed, paused
        }

        /// The receivers' URLs.
        package var targets: [String]
        package var kinds: Set<Kind>

        package init(targets: [String], kinds: Set<Kind>) {
            self.targets = targets
            self.kinds = kinds
        }
    }

    /// One webhook owed: the end it tells of, as it was, and its delivery so far.
    package struct OutboxEntry: Sendable, Equatable, FetchableRecord {
        package var id: Int64
        package var eventID: String
        package var target: String
        package var jobID: String
        package var kind: String
        package var url: String
        package var path: String?
        package var bytes: Int64?
        package var errorCode: String?
        package var error: String?
        package var createdAt: Date
        package var attempts: Int

        /// The entry in a row of ``Journal/dueWebhooks(at:limit:)``'s query.
        init(row: Row) throws {
            id = row["id"]
            eventID = row["eventID"]
            target = row["target"]
            jobID = row["jobID"]
            kind = row["kind"]
            url = row["url"]
            path = row["path"]
            bytes = row["bytes"]
            errorCode = row["errorCode"]
            error = row["error"]
            createdAt = try JournalDate.required(row["createdAt"], column: "createdAt")
            attempts = row["attempts"]
        }
    }

    /// The receivers and ends written from now on, by this process's writes (`nil`: none).
    package var outbox: Outbox? {
        get { outboxBox.withLockedValue { $0 } }
        set { outboxBox.withLockedValue { $0 = newValue } }
    }

    /// Up to `limit` webhooks due at `now`, oldest first. Blocking: for a thread of the I/O pool.
    package func dueWebhooks(at now: Date, limit: Int = 64) throws(DownloadError) -> [OutboxEntry] {
        try read { db in
            try OutboxEntry.fetchAll(
                db,
                sql: """
                    SELECT id, eventID, target, jobID, kind, url, path, bytes, errorCode, error, createdAt, attempts
                    FROM outbox WHERE nextAttemptAt <= ? ORDER BY id LIMIT ?
                    """, arguments: [JournalDate.databaseValue(now), limit])
        }
    }

    /// When the next webhook falls due, if any is owed. Blocking.
    package func nextWebhookDue() throws(DownloadError) -> Date? {
        try read { db in
            try DatabaseValue.fetchOne(db, sql: "SELECT min(nextAttemptAt) FROM outbox").flatMap(JournalDate.optional)
        }
    }

    /// How many webhooks are owed. Blocking.
    package func webhooksOwed() throws(DownloadError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM outbox") ?? 0 }
    }

    /// The receiver took webhook `id`: it is owed no more. Blocking.
    package func webhookDelivered(_ id: Int64) throws(DownloadError) {
        try write { db in try db.execute(sql: "DELETE FROM outbox WHERE id = ?", arguments: [id]) }
    }

    /// Webhook `id` failed (`error`): tried again at `next`. Blocking.
    package func webhookFailed(_ id: Int64, error: String, next: Date) throws(DownloadError) {
        try write { db in
            try db.execute(
                sql: "UPDATE outbox SET attempts = attempts + 1, lastError = ?, nextAttemptAt = ? WHERE id = ?",
                arguments: [error, JournalDate.databaseValue(next), id])
        }
    }
}
