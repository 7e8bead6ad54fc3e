import Foundation
import PostgresNIO

@testable import HaulPostgres

#if canImport(Glibc)
import Glibc
#endif

/// A private PostgreSQL cluster for the shared-queue tests: `initdb` into a temporary
/// directory, `pg_ctl start` listening on a Unix socket in that directory only (no TCP
/// port to collide with), trust authentication. One cluster per test run, started on
/// first use and stopped when the test process exits; each test gets a database of its
/// own (``makeDatabase()``).
///
/// PostgreSQL refuses to run as root: when the tests do, the cluster runs as the
/// `postgres` user the Debian package creates (through `runuser`).
enum PostgresCluster {
    static let binaries = "/usr/lib/postgresql/15/bin"

    /// Whether the tests can start a cluster here.
    static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: binaries + "/initdb")
            && FileManager.default.isExecutableFile(atPath: binaries + "/pg_ctl")
            && (getuid() != 0 || getpwnam("postgres") != nil)
    }

    struct Running: Sendable {
        var directory: String
        var port: Int
    }

    private static let started = Task { () throws -> Running in try await start() }

    /// A new, empty database in the cluster; returns its queue address.
    static func makeDatabase() async throws -> QueueAddress {
        let cluster = try await started.value
        let name = "haul_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let admin = try QueueAddress(
            parsing: "postgres://postgres@/postgres?host=\(cluster.directory)&port=\(cluster.port)",
            fromCommandLine: false)
        let queue = PostgresQueue(address: admin)
        _ = try await queue.withRunning {
            // The name is ours (hex digits), not input: an identifier cannot be a bind parameter.
            try await queue.client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
        }
        return try QueueAddress(
            parsing: "postgres://postgres@/\(name)?host=\(cluster.directory)&port=\(cluster.port)", fromCommandLine: false)
    }

    private static func start() async throws -> Running {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "haul-pg-" + UUID().uuidString.prefix(8)
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let asRoot = getuid() == 0
        if asRoot, let user = getpwnam("postgres") {
            chown(directory, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        let data = directory + "/data"
        let port = 5432
        try await run(
            [binaries + "/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
            asPostgres: asRoot)
        let options =
            "-k \(directory) -p \(port) -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        try await run(
            [binaries + "/pg_ctl", "-D", data, "-l", directory + "/log", "-w", "-o", options, "start"],
            asPostgres: asRoot)
        stopCommand = strdup(
            (asRoot ? "runuser -u postgres -- " : "")
                + "\(binaries)/pg_ctl -D \(data) -m immediate stop >/dev/null 2>&1; rm -rf \(directory)")
        atexit {
            if let command = PostgresCluster.stopCommand { _ = system(command) }
        }
        return Running(directory: directory, port: port)
    }

    /// The shell command that stops the cluster and removes its directory, run at exit.
    nonisolated(unsafe) static var stopCommand: UnsafeMutablePointer<CChar>?

    /// Runs `arguments` (our own paths and options: no quoting needed beyond single quotes),
    /// as the `postgres` user if asked, on a thread of its own: `system` blocks until the
    /// command ends, and no thread of the concurrency pool may wait for it.
    private static func run(_ arguments: [String], asPostgres: Bool) async throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("haul-pg-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let words = (asPostgres ? ["runuser", "-u", "postgres", "--"] : []) + arguments
        let command = words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
            + " >\(log) 2>&1 </dev/null"
        let status = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            Thread { continuation.resume(returning: system(command)) }.start()
        }
        if status != 0 {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw QueueError("\(arguments[0]) failed (\(status)): \(text)")
        }
    }
}
