import Foundation
package import GRDB

/// How the SQLite journal reads and writes a ``JobRecord``: kept out of the record's own
/// declaration, so that the ``JobStore`` seam carries no database types.
extension JobRecord: FetchableRecord, PersistableRecord {
    package static let databaseTableName = "job"

    package enum Columns {
        package static let id = Column("id")
        package static let state = Column("state")
        package static let priority = Column("priority")
        package static let owner = Column("owner")
        package static let session = Column("session")
        package static let command = Column("command")
        package static let bytesCommitted = Column("bytesCommitted")
        package static let updatedAt = Column("updatedAt")
    }

    /// Decodes a row column by column: the `Decodable` path costs several times more, which
    /// shows when a queue admits thousands of jobs a second.
    package init(row: Row) throws {
        id = row["id"]
        url = row["url"]
        finalURL = row["finalURL"]
        destinationKind = row["destinationKind"]
        destinationPath = row["destinationPath"]
        destinationName = row["destinationName"]
        partialPath = row["partialPath"]
        let stateName: String = row["state"]
        guard let state = JobState(rawValue: stateName) else {
            throw DownloadError(.invalidRequest, "journal entry \(id) has an unknown state '\(stateName)'")
        }
        self.state = state
        priority = row["priority"]
        attempts = row["attempts"]
        bytesCommitted = row["bytesCommitted"]
        totalBytes = row["totalBytes"]
        validator = row["validator"]
        expectedSize = row["expectedSize"]
        checksum = row["checksum"]
        headers = row["headers"]
        lastError = row["lastError"]
        createdAt = row["createdAt"]
        updatedAt = row["updatedAt"]
        finishedAt = row["finishedAt"]
        owner = row["owner"]
        session = row["session"]
        bootID = row["bootID"]
        command = row["command"]
        errorCode = row["errorCode"]
        bytesPerSecond = row["bytesPerSecond"]
        filePath = row["filePath"]
        fileSize = row["fileSize"]
        fileModified = row["fileModified"]
        fileValidator = row["fileValidator"]
        credentials = row["credentials"]
        maxBytesPerSecond = row["maxBytesPerSecond"]
    }
}
