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

    /// A running cluster.
    struct Running: Sendable {
        var directory: String
        var port: Int
        /// Its data directory.
        var data: String
        /// Whether it runs as the `postgres` user (the tests run as root).
        var asPostgres: Bool

        /// A `postgres://` URL of database `name` in this cluster (over its Unix socket).
        func url(_ name: String) -> String {
            "postgres://postgres@/\(name)?host=\(directory)&port=\(port)"
        }

        /// A new, empty database in the cluster; returns its URL.
        func makeDatabase() async throws -> String {
            let name = "haul_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
            let queue = PostgresQueue(address: try QueueAddress(parsing: url("postgres"), fromCommandLine: false))
            _ = try await queue.withRunning {
                // The name is ours (hex digits), not input: an identifier cannot be a bind parameter.
                try await queue.client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
            }
            return url(name)
        }

        /// Restarts the server (`pg_ctl restart -m fast`: clients are disconnected), waiting
        /// until it accepts connections again. Only for a cluster of the test's own.
        func restart() async throws {
            try await PostgresCluster.run(
                [binaries + "/pg_ctl", "-D", data, "-l", directory + "/log", "-w", "-m", "fast", "restart"],
                asPostgres: asPostgres)
        }

        /// Stops the server at once and removes its files.
        func stop() async {
            try? await PostgresCluster.run(
                [binaries + "/pg_ctl", "-D", data, "-m", "immediate", "stop"], asPostgres: asPostgres)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    private static let started = Task { () throws -> Running in
        let running = try await start()
        stopCommand = strdup(
            (running.asPostgres ? "runuser -u postgres -- " : "")
                + "\(binaries)/pg_ctl -D \(running.data) -m immediate stop >/dev/null 2>&1; rm -rf \(running.directory)")
        atexit {
            if let command = PostgresCluster.stopCommand { _ = system(command) }
        }
        return running
    }

    /// A new, empty database in the cluster; returns its queue address.
    static func makeDatabase() async throws -> QueueAddress {
        try QueueAddress(parsing: try await makeDatabaseURL(), fromCommandLine: false)
    }

    /// A new, empty database in the cluster the tests share; returns its URL.
    static func makeDatabaseURL() async throws -> String {
        try await started.value.makeDatabase()
    }

    /// Starts a cluster of the caller's own (which may restart it: never restart the one the
    /// tests share); the caller stops it with ``Running/stop()``.
    static func startPrivate() async throws -> Running {
        try await start()
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
        // (Each cluster listens on a socket in its own directory only: the port number is
        // part of the socket's name, not a TCP port, so clusters never collide.)
        let port = 5432
        try await run(
            [binaries + "/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"],
            asPostgres: asRoot)
        let options =
            "-k \(directory) -p \(port) -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        try await run(
            [binaries + "/pg_ctl", "-D", data, "-l", directory + "/log", "-w", "-o", options, "start"],
            asPostgres: asRoot)
        return Running(directory: directory, port: port, data: data, asPostgres: asRoot)
    }

    /// The shell command that stops the cluster and removes its directory, run at exit.
    nonisolated(unsafe) static var stopCommand: UnsafeMutablePointer<CChar>?

    /// Runs `arguments` (our own paths and options: no quoting needed beyond single quotes),
    /// as the `postgres` user if asked, on a thread of its own: `system` blocks until the
    /// command ends, and no thread of the concurrency pool may wait for it.
    ///
    /// The command closes every descriptor but the standard three before it runs: `system`
    /// passes them all on, SwiftNIO opens its sockets without close-on-exec, and the daemon
    /// `pg_ctl start` leaves running kept whatever it was given for the whole run. Once it
    /// held another test's listening socket after that test's server had shut down, so
    /// connections to the port were accepted by the kernel and never answered, and the
    /// server could not come back on it. (Not `Process`: Foundation learns that a child
    /// ended when a socket the child inherits is closed, which the daemon, a grandchild,
    /// never does.)
    fileprivate static func run(_ arguments: [String], asPostgres: Bool) async throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("haul-pg-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let words = (asPostgres ? ["runuser", "-u", "postgres", "--"] : []) + arguments
        let closing = #"for fd in /proc/self/fd/*; do n=${fd##*/}; case $n in 0|1|2) ;; *) eval "exec $n>&-" 2>/dev/null;; esac; done; exec "$0" "$@""#
        let command = (["/bin/bash", "-c", closing] + words).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }
            .joined(separator: " ") + " >\(log) 2>&1 </dev/null"
        let status = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            Thread { continuation.resume(returning: system(command)) }.start()
        }
        if status != 0 {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw QueueError("\(arguments[0]) failed (\(status)): \(text)")
        }
    }
}
