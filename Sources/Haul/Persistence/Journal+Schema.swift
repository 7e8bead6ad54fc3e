import GRDB

/// One named step of the journal's schema.
struct SchemaMigration: Sendable {
    let identifier: String
    let migrate: @Sendable (Database) throws -> Void

    init(_ identifier: String, migrate: @escaping @Sendable (Database) throws -> Void) {
        self.identifier = identifier
        self.migrate = migrate
    }
}

extension Journal {
    /// The journal's schema, built by named migrations, in order. Never edit a shipped
    /// migration: add a new one.
    static let migrations: [SchemaMigration] = [
        SchemaMigration("v1: jobs") { db in
            try db.create(table: "job") { table in
                table.primaryKey("id", .text)
                table.column("url", .text).notNull()
                table.column("finalURL", .text)
                table.column("destinationKind", .text).notNull()
                table.column("destinationPath", .text).notNull()
                table.column("destinationName", .text)
                table.column("partialPath", .text).notNull()
                table.column("state", .text).notNull()
                table.column("priority", .integer).notNull()
                table.column("attempts", .integer).notNull().defaults(to: 0)
                table.column("bytesCommitted", .integer).notNull().defaults(to: 0)
                table.column("totalBytes", .integer)
                table.column("validator", .text)
                table.column("expectedSize", .integer)
                table.column("checksum", .text)
                table.column("headers", .text)
                table.column("lastError", .text)
                table.column("createdAt", .datetime).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.column("finishedAt", .datetime)
            }
            try db.create(index: "job_by_state", on: "job", columns: ["state", "priority"])
        },
        SchemaMigration("v2: ownership and remote control") { db in
            try db.alter(table: "job") { table in
                table.add(column: "owner", .integer)
                table.add(column: "session", .integer)
                table.add(column: "bootID", .text)
                table.add(column: "command", .text)
                table.add(column: "errorCode", .text)
                table.add(column: "bytesPerSecond", .double).notNull().defaults(to: 0)
            }
            try db.create(index: "job_commands", on: "job", columns: ["owner"], condition: Column("command") != nil)
            try db.create(index: "job_admission", on: "job", columns: ["session", "state", "priority"])
        },
        SchemaMigration("v3: content sync") { db in
            // The last manifest a directory was synced from, for conditional GETs.
            try db.create(table: "syncState") { table in
                table.column("directory", .text).notNull()
                table.column("manifestURL", .text).notNull()
                table.column("etag", .text)
                table.column("lastModified", .text)
                table.column("manifest", .blob).notNull()
                table.column("version", .text).notNull()
                table.column("updatedAt", .datetime).notNull()
                table.primaryKey(["directory", "manifestURL"])
            }
            // SHA-256 of local files, valid while size, mtime and inode are unchanged.
            try db.create(table: "fileHash") { table in
                table.primaryKey("path", .text)
                table.column("size", .integer).notNull()
                table.column("mtime", .integer).notNull()
                table.column("inode", .integer).notNull()
                table.column("sha256", .text).notNull()
            }
        },
        SchemaMigration("v4: claim index") { db in
            // Admission asks for this session's queued, unowned jobs by priority then age:
            // with `owner` in the index and `priority` descending (rowid follows), that is a
            // plain index scan that stops at the LIMIT, instead of a sort of every queued row.
            try db.drop(index: "job_admission")
            try db.execute(sql: "CREATE INDEX job_claim ON job(session, state, owner, priority DESC)")
        },
        SchemaMigration("v5: credentials") { db in
            // Which credential headers a job was started with, and a reference to them that
            // reveals nothing (see `CredentialReference`); their values are not in `headers`
            // unless the user chose to store them.
            try db.alter(table: "job") { table in
                table.add(column: "credentials", .text)
            }
        },
        SchemaMigration("v6: completed files") { db in
            // `owner` and `session` now hold owner tokens (see `OwnerLocks`), not PIDs; a PID
            // left by an older version names no live owner. The completed file's path, size,
            // modification time and validator let the same download next time be a
            // conditional request.
            try db.alter(table: "job") { table in
                table.add(column: "filePath", .text)
                table.add(column: "fileSize", .integer)
                table.add(column: "fileModified", .integer)
                table.add(column: "fileValidator", .text)
            }
        },
        SchemaMigration("v7: speed limits") { db in
            // A download's own speed limit (bytes per second), so that it holds after a
            // restart, in `haul resume` and in the service.
            try db.alter(table: "job") { table in
                table.add(column: "maxBytesPerSecond", .integer)
            }
        },
        SchemaMigration("v8: connections") { db in
            // A download's own connections (`split` of an aria2 client), so that they hold
            // after a restart, in `haul resume` and in the service.
            try db.alter(table: "job") { table in
                table.add(column: "connections", .integer)
            }
        },
        SchemaMigration("v9: sources and pieces") { db in
            // Other addresses of the same content (`DownloadRequest.mirrors`), as a JSON
            // array of URLs, the digests of its pieces (`DownloadRequest.pieces`), and the
            // address the URL's content is fetched from now (a refreshed signed URL), so
            // that a resumed download has them too.
            try db.alter(table: "job") { table in
                table.add(column: "mirrors", .text)
                table.add(column: "pieces", .text)
                table.add(column: "location", .text)
            }
        },
        SchemaMigration("v10: webhook outbox") { db in
            // The webhooks a service owes (`haul serve --webhook`): one row per download end
            // and receiver, written in the transaction that records the end, deleted once
            // the receiver has taken it. What the body says is kept here, as it was then.
            try db.create(table: "outbox") { table in
                table.autoIncrementedPrimaryKey("id")
                table.column("eventID", .text).notNull()
                table.column("target", .text).notNull()
                table.column("jobID", .text).notNull()
                table.column("kind", .text).notNull()
                table.column("url", .text).notNull()
                table.column("path", .text)
                table.column("bytes", .integer)
                table.column("errorCode", .text)
                table.column("error", .text)
                table.column("createdAt", .datetime).notNull()
                table.column("attempts", .integer).notNull().defaults(to: 0)
                table.column("nextAttemptAt", .datetime).notNull()
                table.column("lastError", .text)
            }
            try db.create(index: "outbox_due", on: "outbox", columns: ["nextAttemptAt"])
        },
        SchemaMigration("v11: completed objects") { db in
            // A download completed into an object store: the object's entity tag as the store
            // gave it, so that the same download next time is a conditional request while the
            // object is still there unchanged (`filePath` holds its `s3://` address).
            try db.alter(table: "job") { table in
                table.add(column: "fileTag", .text)
            }
        },
        SchemaMigration("v12: what a completion moved") { db in
            // What the run that completed a download moved, for summaries: the bytes that
            // came over the network (the rest were resumed), or nothing at all because the
            // content was unchanged (a 304). NULL and 0 for rows completed before.
            try db.alter(table: "job") { table in
                table.add(column: "bytesTransferred", .integer)
                table.add(column: "unchanged", .boolean).notNull().defaults(to: false)
            }
        },
        SchemaMigration("v13: delta downloads") { db in
            // A zsync delta download's control file and seeds (`DownloadRequest.delta`), so
            // that `haul resume` and a restarted service resume it as a delta download.
            try db.alter(table: "job") { table in
                table.add(column: "delta", .text)
            }
        },
        SchemaMigration("v14: stream downloads") { db in
            // An HLS stream download's options (`DownloadRequest.stream`), so that `haul
            // resume` and a restarted service resume it as a stream. NULL for any other.
            try db.alter(table: "job") { table in
                table.add(column: "stream", .text)
            }
        },
    ]

    /// The schema that ``migrations`` build, as SQLite words it after running them (the
    /// text `sqlite_master` holds): a new journal is made from it in one step. Running the
    /// migrations on an empty journal would cost an `ALTER TABLE` per added column, and
    /// SQLite parses the whole schema again after each: a sixth of the instructions of a
    /// first `haul get`. A migration added above changes this text too;
    /// `JournalTests.aNewJournalHasTheSchemaTheMigrationsBuildOneByOne` fails until it does.
    static let schema: String = [
        table(
            "job",
            [
                #""id" TEXT PRIMARY KEY NOT NULL"#,
                #""url" TEXT NOT NULL"#,
                #""finalURL" TEXT"#,
                #""destinationKind" TEXT NOT NULL"#,
                #""destinationPath" TEXT NOT NULL"#,
                #""destinationName" TEXT"#,
                #""partialPath" TEXT NOT NULL"#,
                #""state" TEXT NOT NULL"#,
                #""priority" INTEGER NOT NULL"#,
                #""attempts" INTEGER NOT NULL DEFAULT 0"#,
                #""bytesCommitted" INTEGER NOT NULL DEFAULT 0"#,
                #""totalBytes" INTEGER"#,
                #""validator" TEXT"#,
                #""expectedSize" INTEGER"#,
                #""checksum" TEXT"#,
                #""headers" TEXT"#,
                #""lastError" TEXT"#,
                #""createdAt" DATETIME NOT NULL"#,
                #""updatedAt" DATETIME NOT NULL"#,
                #""finishedAt" DATETIME"#,
                #""owner" INTEGER"#,
                #""session" INTEGER"#,
                #""bootID" TEXT"#,
                #""command" TEXT"#,
                #""errorCode" TEXT"#,
                #""bytesPerSecond" DOUBLE NOT NULL DEFAULT 0"#,
                #""credentials" TEXT"#,
                #""filePath" TEXT"#,
                #""fileSize" INTEGER"#,
                #""fileModified" INTEGER"#,
                #""fileValidator" TEXT"#,
                #""maxBytesPerSecond" INTEGER"#,
                #""connections" INTEGER"#,
                #""mirrors" TEXT"#,
                #""pieces" TEXT"#,
                #""location" TEXT"#,
                #""fileTag" TEXT"#,
                #""bytesTransferred" INTEGER"#,
                #""unchanged" BOOLEAN NOT NULL DEFAULT 0"#,
                #""delta" TEXT"#,
                #""stream" TEXT"#,
            ]),
        #"CREATE INDEX "job_by_state" ON "job"("state", "priority")"#,
        #"CREATE INDEX "job_commands" ON "job"("owner") WHERE "command" IS NOT NULL"#,
        table(
            "syncState",
            [
                #""directory" TEXT NOT NULL"#,
                #""manifestURL" TEXT NOT NULL"#,
                #""etag" TEXT"#,
                #""lastModified" TEXT"#,
                #""manifest" BLOB NOT NULL"#,
                #""version" TEXT NOT NULL"#,
                #""updatedAt" DATETIME NOT NULL"#,
                #"PRIMARY KEY ("directory", "manifestURL")"#,
            ]),
        table(
            "fileHash",
            [
                #""path" TEXT PRIMARY KEY NOT NULL"#,
                #""size" INTEGER NOT NULL"#,
                #""mtime" INTEGER NOT NULL"#,
                #""inode" INTEGER NOT NULL"#,
                #""sha256" TEXT NOT NULL"#,
            ]),
        "CREATE INDEX job_claim ON job(session, state, owner, priority DESC)",
        table(
            "outbox",
            [
                #""id" INTEGER PRIMARY KEY AUTOINCREMENT"#,
                #""eventID" TEXT NOT NULL"#,
                #""target" TEXT NOT NULL"#,
                #""jobID" TEXT NOT NULL"#,
                #""kind" TEXT NOT NULL"#,
                #""url" TEXT NOT NULL"#,
                #""path" TEXT"#,
                #""bytes" INTEGER"#,
                #""errorCode" TEXT"#,
                #""error" TEXT"#,
                #""createdAt" DATETIME NOT NULL"#,
                #""attempts" INTEGER NOT NULL DEFAULT 0"#,
                #""nextAttemptAt" DATETIME NOT NULL"#,
                #""lastError" TEXT"#,
            ]),
        #"CREATE INDEX "outbox_due" ON "outbox"("nextAttemptAt")"#,
    ].joined(separator: ";\n")

    /// `CREATE TABLE "name" (columns)`, written as SQLite writes a table an `ALTER TABLE`
    /// added columns to.
    private static func table(_ name: String, _ columns: [String]) -> String {
        #"CREATE TABLE "\#(name)" ("# + columns.joined(separator: ", ") + ")"
    }

    /// The migrations as GRDB's migrator runs them on a journal that has some of them.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in migrations {
            migrator.registerMigration(migration.identifier, migrate: migration.migrate)
        }
        return migrator
    }

    /// Brings the schema of the journal `writer` opened up to date.
    ///
    /// A new, empty journal gets ``schema`` and GRDB's record of every migration, in one
    /// transaction, instead of the migrations, a transaction (and a foreign-key check) each:
    /// a first run on a machine, or with a new `--journal`, opens it in a fraction of the
    /// time. A current
    /// journal (the usual case: every run after the first) is recognised by one read of
    /// that record and left alone, with no pass of the migrator. An older journal, however
    /// old, goes through the migrator, which runs the ones it lacks.
    static func updateSchema(of writer: any DatabaseWriter) throws {
        let current = try writer.barrierWriteWithoutTransaction { db -> Bool in
            var current = false
            // Checked inside the write transaction: two processes creating the same journal
            // at once take turns, and the second finds it made.
            try db.inTransaction(.immediate) {
                guard try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") == 0 else {
                    current = try isCurrent(db)
                    return .commit
                }
                try db.execute(sql: "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)")
                try db.execute(sql: schema)
                try db.execute(
                    sql: "INSERT INTO grdb_migrations (identifier) VALUES "
                        + Array(repeating: "(?)", count: migrations.count).joined(separator: ", "),
                    arguments: StatementArguments(migrations.map(\.identifier)))
                current = true
                return .commit
            }
            return current
        }
        if !current { try migrator.migrate(writer) }
    }

    /// Whether the journal `db` holds has every migration of this release applied (and
    /// perhaps a newer release's too, which the migrator would leave alone as well).
    static func isCurrent(_ db: Database) throws -> Bool {
        guard try db.tableExists("grdb_migrations") else { return false }
        let applied = Set(try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
        return migrations.allSatisfy { applied.contains($0.identifier) }
    }
}
