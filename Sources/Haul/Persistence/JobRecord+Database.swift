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
        createdAt = try JournalDate.required(row["createdAt"], column: "createdAt")
        updatedAt = try JournalDate.required(row["updatedAt"], column: "updatedAt")
        finishedAt = JournalDate.optional(row["finishedAt"])
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
        connections = row["connections"]
        mirrors = row["mirrors"]
        pieces = row["pieces"]
        location = row["location"]
        fileTag = row["fileTag"]
        bytesTransferred = row["bytesTransferred"]
        unchanged = row["unchanged"]
        delta = row["delta"]
        stream = row["stream"]
    }

    /// Every column, in the order ``init(selected:)`` reads them: a query that selects
    /// them so is decoded by position, without looking each column up by name (which
    /// lowercases and hashes its name, for every column of every row).
    package static let selection = """
        id, url, finalURL, destinationKind, destinationPath, destinationName, partialPath, state, priority, attempts, bytesCommitted, totalBytes, validator, expectedSize, checksum, headers, lastError, createdAt, updatedAt, finishedAt, owner, session, bootID, command, errorCode, bytesPerSecond, filePath, fileSize, fileModified, fileValidator, credentials, maxBytesPerSecond, connections, mirrors, pieces, location, fileTag, bytesTransferred, unchanged, delta, stream
        """

    /// How many columns ``selection`` names.
    package static let selectionCount = selection.split(separator: ",").count

    /// The row of job `id`, or `nil`: selected by ``selection`` and decoded by position,
    /// through a statement the connection keeps. (GRDB's `fetchOne(_:key:)` looks the
    /// table's primary key up in its schema on each connection's first use, and decodes every
    /// column by name: about 3 ms of a one-file `haul get`, whose completion is read back.)
    package static func fetchOne(_ db: Database, id: String) throws -> JobRecord? {
        let statement = try db.cachedStatement(sql: "SELECT \(selection) FROM job WHERE id = ?")
        return try Row.fetchOne(statement, arguments: [id]).map { try JobRecord(selected: $0) }
    }

    /// Decodes a row of a query that selected ``selection``.
    package init(selected row: Row) throws {
        id = row[0]
        url = row[1]
        finalURL = row[2]
        destinationKind = row[3]
        destinationPath = row[4]
        destinationName = row[5]
        partialPath = row[6]
        let stateName: String = row[7]
        guard let state = JobState(rawValue: stateName) else {
            throw DownloadError(.invalidRequest, "journal entry \(id) has an unknown state '\(stateName)'")
        }
        self.state = state
        priority = row[8]
        attempts = row[9]
        bytesCommitted = row[10]
        totalBytes = row[11]
        validator = row[12]
        expectedSize = row[13]
        checksum = row[14]
        headers = row[15]
        lastError = row[16]
        createdAt = try JournalDate.required(row[17], column: "createdAt")
        updatedAt = try JournalDate.required(row[18], column: "updatedAt")
        finishedAt = JournalDate.optional(row[19])
        owner = row[20]
        session = row[21]
        bootID = row[22]
        command = row[23]
        errorCode = row[24]
        bytesPerSecond = row[25]
        filePath = row[26]
        fileSize = row[27]
        fileModified = row[28]
        fileValidator = row[29]
        credentials = row[30]
        maxBytesPerSecond = row[31]
        connections = row[32]
        mirrors = row[33]
        pieces = row[34]
        location = row[35]
        fileTag = row[36]
        bytesTransferred = row[37]
        unchanged = row[38]
        delta = row[39]
        stream = row[40]
    }
}
