import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real Apache httpd (Debian's `apache2`) on 127.0.0.1, for interoperability tests.
///
/// Each server runs in the foreground from a fresh temporary directory with a configuration
/// of its own (nothing of `/etc/apache2` is read), on a free port, serving ``root`` as plain
/// static files; put them there with ``write(_:at:modified:)``. It loads only the modules it
/// needs: `mpm_event`, `authz_core`, and with a ``NginxServer/TLS`` value `ssl` and `http2`,
/// when it serves `https` only, offering `h2` by ALPN if asked (`Protocols h2 http/1.1`).
/// `directives` given to ``start(tls:directives:)`` are added to the configuration, for a
/// test that needs a limit of its own (`H2MaxSessionStreams 2`). Run as root, its workers
/// run as `nobody`: Apache refuses to serve as root.
///
/// The access log has the fields of nginx's (``NginxServer/LogEntry``): `%H` is `HTTP/2.0`
/// for a request over HTTP/2, and `connection` (`%{c}L`) is the same for every stream of a
/// connection. Read it with ``accessLog()``.
///
/// Apache is `/usr/sbin/apache2` with its modules in `/usr/lib/apache2/modules`; the
/// `HAUL_APACHE` environment variable names another executable (with its modules in the
/// same place). When there is none, ``isAvailable`` is false and ``start(tls:directives:)``
/// throws ``Failure/notInstalled``.
final class ApacheServer: ServerProcess {
    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "Apache is not installed: run .ci/run or apt-get install apache2"
            case .failedToStart(let detail): "apache2 did not start: \(detail)"
            }
        }
    }

    typealias LogEntry = NginxServer.LogEntry

    static let modules = "/usr/lib/apache2/modules"

    /// The apache2 executable, if there is one with the modules the tests load.
    static let executable: String? = {
        let path = ProcessInfo.processInfo.environment["HAUL_APACHE"] ?? "/usr/sbin/apache2"
        let needed = ["mod_mpm_event.so", "mod_authz_core.so", "mod_ssl.so", "mod_http2.so"]
        guard access(path, X_OK) == 0, needed.allSatisfy({ access("\(modules)/\($0)", R_OK) == 0 }) else { return nil }
        return path
    }()

    /// Whether Apache is installed; gate suites with `.enabled(if: ApacheServer.isAvailable, …)`.
    static var isAvailable: Bool { executable != nil }

    /// The port Apache listens on, on 127.0.0.1.
    let port: Int
    /// The temporary directory holding everything: removed by ``stop()``.
    let directory: URL
    /// The directory Apache serves.
    let root: URL
    /// Whether it serves `https`.
    let isTLS: Bool
    let process: ChildProcess

    private init(port: Int, directory: URL, process: ChildProcess, isTLS: Bool) {
        self.port = port
        self.directory = directory
        self.root = directory.appendingPathComponent("root")
        self.process = process
        self.isTLS = isTLS
    }

    // MARK: - Lifecycle

    /// Starts Apache and returns once it listens; `directives` are added to its
    /// configuration.
    ///
    /// - Throws: ``Failure/notInstalled`` without Apache; ``Failure/failedToStart(_:)`` with
    ///   its error log when it exits or is not listening within 10 seconds.
    static func start(tls: NginxServer.TLS? = nil, directives: String = "") async throws -> ApacheServer {
        guard let executable else { throw Failure.notInstalled }
        // The free port can be taken between probing and Apache's bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-apache-\(UUID().uuidString)")
            do {
                if let server = try await launch(
                    executable: executable, port: try NginxServer.freePort(), directory: directory, tls: tls,
                    directives: directives)
                {
                    return server
                }
            } catch {
                try? FileManager.default.removeItem(at: directory)
                throw error
            }
            try? FileManager.default.removeItem(at: directory)
        }
        throw Failure.failedToStart("the port was taken five times")
    }

    /// Runs `body` with a started server, stopping it afterwards whatever happens.
    static func with<T>(
        tls: NginxServer.TLS? = nil, directives: String = "", _ body: (ApacheServer) async throws -> T
    ) async throws -> T {
        try await start(tls: tls, directives: directives).serving(body)
    }

    /// Returns `nil` when Apache could not bind `port`, so the caller tries another.
    private static func launch(
        executable: String, port: Int, directory: URL, tls: NginxServer.TLS?, directives: String
    ) async throws -> ApacheServer? {
        let configuration = directory.appendingPathComponent("apache2.conf")
        let process: ChildProcess
        do {
            process = try spawn(
                executable, arguments: ["-DFOREGROUND", "-f", configuration.path], in: directory,
                subdirectories: ["root", "run"],
                configuration: configurationText(directory: directory.path, port: port, tls: tls, directives: directives),
                configurationName: configuration.lastPathComponent)
        } catch {
            throw Failure.failedToStart("\(error)")
        }
        let server = ApacheServer(port: port, directory: directory, process: process, isTLS: tls != nil)

        // Ready once the main process itself listens on the port (its workers inherit the
        // socket); a connection made before they accept waits in the backlog.
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let termination = process.termination {
                let log = server.errorLog()
                if log.contains("Address already in use") { return nil }
                throw Failure.failedToStart("it \(termination): \(log)")
            }
            if NginxServer.isListening(port: port, pid: process.pid) { return server }
            if ContinuousClock.now > deadline {
                await server.stop()
                throw Failure.failedToStart("not listening on port \(port) after 10 s: \(server.errorLog())")
            }
            await Task.yield()
        }
    }

    private static func configurationText(
        directory: String, port: Int, tls: NginxServer.TLS?, directives: String
    ) -> String {
        var tlsText = ""
        if let tls {
            tlsText = """
                LoadModule ssl_module \(modules)/mod_ssl.so
                LoadModule http2_module \(modules)/mod_http2.so
                Protocols \(tls.http2 ? "h2 " : "")http/1.1
                SSLEngine on
                SSLCertificateFile "\(tls.certificate)"
                SSLCertificateKeyFile "\(tls.key)"

                """
            if let authority = tls.clientAuthority {
                tlsText += "SSLCACertificateFile \"\(authority)\"\nSSLVerifyClient require\n"
            }
        }
        // The same JSON fields as nginx's log; Apache escapes `"` and `\` in the values.
        let format = #"{\"method\":\"%m\",\"path\":\"%U\",\"protocol\":\"%H\",\"status\":%>s,"#
            + #"\"bodyBytesSent\":%B,\"range\":\"%{Range}i\",\"ifRange\":\"%{If-Range}i\","#
            + #"\"etag\":\"%{ETag}o\",\"lastModified\":\"%{Last-Modified}o\","#
            + #"\"contentRange\":\"%{Content-Range}o\",\"completion\":\"%X\",\"connection\":\"%{c}L\"}"#
        return """
            ServerRoot "\(directory)"
            DefaultRuntimeDir "\(directory)/run"
            PidFile "\(directory)/run/apache2.pid"
            ServerName 127.0.0.1:\(port)
            Listen 127.0.0.1:\(port)
            LoadModule mpm_event_module \(modules)/mod_mpm_event.so
            LoadModule authz_core_module \(modules)/mod_authz_core.so
            \(geteuid() == 0 ? "User nobody\nGroup nogroup" : "")
            ErrorLog "\(directory)/logs/error.log"
            LogLevel info
            LogFormat "\(format)" haul
            CustomLog "\(directory)/logs/access.log" haul
            DocumentRoot "\(directory)/root"
            <Directory "\(directory)/root">
                Require all granted
            </Directory>
            \(tlsText)
            \(directives)

            """
    }

    // MARK: - Content

    /// The URL of `path` (starting with `/`) on this server.
    func url(_ path: String) -> URL {
        URL(string: "\(isTLS ? "https" : "http")://127.0.0.1:\(port)\(path)")!
    }

    /// Writes `bytes` at `path` (starting with `/`) under ``root``, atomically, with the
    /// modification date `modified` (whole seconds), readable by Apache's workers.
    func write(_ bytes: [UInt8], at path: String, modified: Date) throws {
        let file = root.appendingPathComponent(String(path.drop { $0 == "/" }))
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: file, options: .atomic)
        try FileManager.default.setAttributes(
            [
                .modificationDate: Date(timeIntervalSince1970: modified.timeIntervalSince1970.rounded(.down)),
                .posixPermissions: 0o644,
            ],
            ofItemAtPath: file.path)
    }

    // MARK: - Logs

    /// The access log's complete lines, oldest first.
    func accessLog() throws -> [LogEntry] {
        guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent("logs/access.log").path)
        else { return [] }
        var lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        lines.removeLast()  // empty, or a line Apache is still writing
        let decoder = JSONDecoder()
        return try lines.filter { !$0.isEmpty }.map { try decoder.decode(LogEntry.self, from: Data($0)) }
    }

    /// Apache's error log, for failure messages.
    func errorLog() -> String {
        let logs = directory.appendingPathComponent("logs")
        return ["error.log", "stderr.log"].compactMap {
            try? String(contentsOf: logs.appendingPathComponent($0), encoding: .utf8)
        }.joined(separator: "\n")
    }
}
