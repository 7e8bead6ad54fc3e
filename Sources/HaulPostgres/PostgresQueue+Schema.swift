import Logging
import PostgresNIO

/// The shared queue's schema, created by named migrations as the SQLite journal's is:
/// each is applied once, in order, in one transaction with the others of the same run,
/// and recorded by name in `haul_migrations`. Workers starting at once serialise on an
/// advisory lock.
extension PostgresQueue {
    /// The migrations, oldest first. Never edit one that shipped: add another.
    static let migrations: [(name: String, statements: [String])] = [
        (
            "v1 jobs and workers",
            [
                // Worker IDs are the owner tokens of the job store: above Int32.max, never reused.
                "CREATE SEQUENCE haul_worker_ids START WITH 2147483648",
                """
                CREATE TABLE haul_workers (
                    id bigint PRIMARY KEY DEFAULT nextval('haul_worker_ids'),
                    host text NOT NULL,
                    pid integer NOT NULL,
                    started_at timestamptz NOT NULL DEFAULT now(),
                    heartbeat_at timestamptz NOT NULL DEFAULT now()
                )
                """,
                """
                CREATE TABLE haul_jobs (
                    id bigserial PRIMARY KEY,
                    key text NOT NULL,
                    state text NOT NULL DEFAULT 'available' CHECK (state IN
                        ('available', 'running', 'retryable', 'paused', 'completed', 'failed', 'cancelled')),
                    priority integer NOT NULL DEFAULT 0,
                    scheduled_at timestamptz NOT NULL DEFAULT now(),
                    attempt integer NOT NULL DEFAULT 0,
                    max_attempts integer NOT NULL,
                    url text NOT NULL,
                    host text NOT NULL,
                    destination text,
                    options jsonb NOT NULL DEFAULT '{}',
                    bytes_committed bigint NOT NULL DEFAULT 0,
                    total_bytes bigint,
                    validator text,
                    boot_id text,
                    lease_owner bigint,
                    lease_expires_at timestamptz,
                    command text,
                    final_url text,
                    last_error_code text,
                    last_error text,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    finished_at timestamptz
                )
                """,
                // The deduplication key: the same ID is never queued twice.
                "CREATE UNIQUE INDEX haul_jobs_key ON haul_jobs (key)",
                // The fetch index: claims read it in this order.
                "CREATE INDEX haul_jobs_fetch ON haul_jobs (state, priority, scheduled_at, id)",
                // Heartbeats and per-host counts read the running jobs.
                "CREATE INDEX haul_jobs_running ON haul_jobs (lease_owner, host) WHERE state = 'running'",
            ]
        ),
        (
            "v2 completed files",
            [
                // The file (or object) a job's last run completed, as the journal keeps it:
                // the same download claimed again is a conditional request while it is still
                // there unchanged, unless forced.
                "ALTER TABLE haul_jobs ADD COLUMN completed_file jsonb"
            ]
        ),
        (
            "v3 phases and retries",
            [
                // What a running job's worker does with it while it holds it: queued behind
                // its slots, or waiting for its host to answer (NULL: transferring). The
                // queue's `state` stays 'running' (the job is leased); the library's state
                // refines it.
                "ALTER TABLE haul_jobs ADD COLUMN phase text CHECK (phase IN ('queued', 'waiting'))",
                // Retries its worker made within the current claim (`attempt` counts claims).
                "ALTER TABLE haul_jobs ADD COLUMN retries integer NOT NULL DEFAULT 0",
            ]
        ),
        (
            "v4 what a completion moved",
            [
                // What the run that completed a job moved, as the journal keeps it: the bytes
                // that came over the network (the rest were resumed), or nothing because the
                // content was unchanged (a 304). NULL and false until a run completes it.
                "ALTER TABLE haul_jobs ADD COLUMN bytes_transferred bigint",
                "ALTER TABLE haul_jobs ADD COLUMN unchanged boolean NOT NULL DEFAULT false",
            ]
        ),
    ]

    /// An arbitrary constant: the advisory lock the migrations take.
    static let migrationLock: Int64 = 0x6861_756C_6D69_67
    /// The advisory lock claims take when a per-host cap is to hold across workers.
    static let claimLock: Int64 = 0x6861_756C_636C_6D

    /// Applies the migrations not yet applied.
    public func migrate() async throws {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS haul_migrations (
                    name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
                """, logger: logger)
            var applied: Set<String> = []
            for try await name in try await connection.query("SELECT name FROM haul_migrations", logger: logger)
                .decode(String.self)
            {
                applied.insert(name)
            }
            for migration in Self.migrations where !applied.contains(migration.name) {
                for statement in migration.statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO haul_migrations (name) VALUES (\(migration.name))", logger: logger)
            }
        }
    }
}
