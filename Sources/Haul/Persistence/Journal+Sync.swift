import Foundation
import GRDB

/// The journal's memory for content sync: the last manifest of each directory and the
/// digests of local files.
extension Journal {
    /// The last manifest fetched for a directory, with the validators to ask whether it changed.
    struct SyncState: Sendable, Hashable {
        var etag: String?
        var lastModified: String?
        var manifest: Data
        var version: String
    }

    func syncState(directory: String, manifestURL: String) throws(DownloadError) -> SyncState? {
        try read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT etag, lastModified, manifest, version FROM syncState
                    WHERE directory = ? AND manifestURL = ?
                    """, arguments: [directory, manifestURL]
            ).map { row in
                SyncState(
                    etag: row["etag"], lastModified: row["lastModified"], manifest: row["manifest"],
                    version: row["version"])
            }
        }
    }

    func saveSyncState(_ state: SyncState, directory: String, manifestURL: String) throws(DownloadError) {
        try write { db in
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO syncState (directory, manifestURL, etag, lastModified, manifest, version, updatedAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    directory, manifestURL, state.etag, state.lastModified, state.manifest, state.version, Date(),
                ])
        }
    }

    /// Every cached digest for a path below `directory` (an absolute path without a
    /// trailing `/`), keyed by path.
    func fileHashes(below directory: String) throws(DownloadError) -> [String: HashCache.Entry] {
        try read { db in
            // Paths below "/a/b" sort between "/a/b/" and "/a/b0" ('0' follows '/').
            let cursor = try Row.fetchCursor(
                db, sql: "SELECT path, size, mtime, inode, sha256 FROM fileHash WHERE path > ? AND path < ?",
                arguments: [directory + "/", directory + "0"])
            var entries: [String: HashCache.Entry] = [:]
            while let row = try cursor.next() {
                let inode: Int64 = row["inode"]
                entries[row["path"]] = HashCache.Entry(
                    size: row["size"], mtime: row["mtime"], inode: UInt64(bitPattern: inode), sha256: row["sha256"])
            }
            return entries
        }
    }

    /// Stores and deletes cached digests in one transaction.
    func updateFileHashes(store: [(String, HashCache.Entry)], remove: [String], removeBelow: [String])
        throws(DownloadError)
    {
        guard !store.isEmpty || !remove.isEmpty || !removeBelow.isEmpty else { return }
        try write { db in
            let insert = try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO fileHash (path, size, mtime, inode, sha256) VALUES (?, ?, ?, ?, ?)")
            for (path, entry) in store {
                try insert.execute(arguments: [
                    path, entry.size, entry.mtime, Int64(bitPattern: entry.inode), entry.sha256,
                ])
            }
            let delete = try db.cachedStatement(sql: "DELETE FROM fileHash WHERE path = ?")
            for path in remove { try delete.execute(arguments: [path]) }
            for directory in removeBelow {
                try db.execute(
                    sql: "DELETE FROM fileHash WHERE path > ? AND path < ?",
                    arguments: [directory + "/", directory + "0"])
            }
        }
    }
}
