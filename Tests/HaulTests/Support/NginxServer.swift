import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real nginx on 127.0.0.1, for interoperability tests.
///
/// Each server runs from a fresh temporary directory with its own configuration, pid file,
/// logs and temp paths, on a free port, serving ``root``. Put files there with
/// ``write(_:at:modified:)``. The locations are:
///
/// - `/slow/`: rate-limited to 256 KiB/s for requests *without* a `Range` header, so a
///   first request is still running when a test pauses it; requests with `Range` (resumes)
///   are served at full speed, from the same URL.
/// - `/slow-lm/`: the same, with `etag off`, so the only validator is `Last-Modified`.
/// - everything else: plain static files at full speed, with nginx's strong ETag.
///
/// The access log records each request's `Range` and `If-Range`, the status, the body
/// bytes sent, the validators sent back and the connection it came on; read it with
/// ``accessLog()`` or wait for an entry with ``logEntry(where:)``.
///
/// `directives` given to ``start(tls:directives:)`` go into the `server` block, for a test
/// that needs a limit of its own (`keepalive_requests 10;`).
///
/// Started with a ``TLS`` value, it serves the same locations over `https` only (with
/// HTTP/2 offered by ALPN if asked), and ``url(_:)`` gives `https` URLs.
///
/// nginx is `/usr/sbin/nginx`, else the first `nginx` on `PATH`; the `HAUL_NGINX`
/// environment variable overrides both. When there is none, ``isAvailable`` is false and
/// ``start()`` throws ``Failure/notInstalled``.
final class NginxServer: ServerProcess {
    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)
        case logTimeout(String)

        var description: String {
            switch self {
            case .notInstalled: "nginx is not installed: run .ci/run or apt-get install nginx"
            case .failedToStart(let detail): "nginx did not start: \(detail)"
            case .logTimeout(let detail): "no matching access log entry: \(detail)"
            }
        }
    }

    /// A certificate and key for serving `https`.
    struct TLS: Sendable {
        /// PEM files of the server's certificate (chain) and its private key.
        var certificate: String
        var key: String
        /// Whether to offer HTTP/2 as well as HTTP/1.1.
        var http2 = false
        /// A PEM file of the authorities client certificates must chain to: with one, the
        /// server demands a client certificate (`ssl_verify_client on`).
        var clientAuthority: String? = nil
    }

    /// One line of the access log (of nginx, or of ``ApacheServer``, which writes the same
    /// fields).
    struct LogEntry: Decodable, Sendable, CustomStringConvertible {
        let method: String
        let path: String
        /// `$server_protocol`: `HTTP/1.1` or `HTTP/2.0`.
        let `protocol`: String
        let status: Int
        /// `$body_bytes_sent`: body bytes written to the socket.
        let bodyBytesSent: Int
        /// The request's `Range` header.
        let range: String?
        /// The request's `If-Range` header.
        let ifRange: String?
        /// The response's `ETag`, `Last-Modified` and `Content-Range` headers.
        let etag: String?
        let lastModified: String?
        let contentRange: String?
        /// Whether the server finished sending the response (nginx's `$request_completion`
        /// is `OK`; Apache's `%X` is not `X`, aborted).
        let completed: Bool
        /// The connection the request came on (nginx's `$connection`, a serial number;
        /// Apache's `%{c}L`, the connection's log ID): the streams of one HTTP/2
        /// connection share it.
        let connection: String?

        private enum CodingKeys: String, CodingKey {
            case method, path, `protocol`, status, bodyBytesSent, range, ifRange, etag, lastModified, contentRange, completion
            case connection
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            // nginx logs a missing header as "", Apache as "-".
            func optional(_ key: CodingKeys) throws -> String? {
                let value = try container.decodeIfPresent(String.self, forKey: key) ?? ""
                return value.isEmpty || value == "-" ? nil : value
            }
            method = try container.decode(String.self, forKey: .method)
            path = try container.decode(String.self, forKey: .path)
            `protocol` = try container.decode(String.self, forKey: .protocol)
            status = try container.decode(Int.self, forKey: .status)
            bodyBytesSent = try container.decode(Int.self, forKey: .bodyBytesSent)
            range = try optional(.range)
            ifRange = try optional(.ifRange)
            etag = try optional(.etag)
            lastModified = try optional(.lastModified)
            contentRange = try optional(.contentRange)
            let completion = try container.decode(String.self, forKey: .completion)
            completed = completion == "OK" || completion == "+" || completion == "-"
            connection = try optional(.connection)
        }

        var description: String {
            "\(method) \(path) \(status) \(bodyBytesSent)B range=\(range ?? "-") if-range=\(ifRange ?? "-")"
                + " etag=\(etag ?? "-") last-modified=\(lastModified ?? "-")"
        }
    }

    /// The nginx executable, if there is one.
    static let executable: String? = locateExecutable()

    /// Whether nginx is installed; gate suites with `.enabled(if: NginxServer.isAvailable, …)`.
    static var isAvailable: Bool { executable != nil }

    /// The port nginx listens on, on 127.0.0.1.
    let port: Int
    /// The temporary directory holding everything: removed by ``stop()``.
    let directory: URL
    /// The directory nginx serves.
    let root: URL
    /// Whether it serves `https`.
    let isTLS: Bool
    let process: ChildProcess
    private let accessLogPath: String
    private let errorLogPath: String

    private init(
        port: Int, directory: URL, process: ChildProcess, isTLS: Bool
    ) {
        self.port = port
        self.isTLS = isTLS
        self.directory = directory
        self.root = directory.appendingPathComponent("root")
        self.process = process
        self.accessLogPath = directory.appendingPathComponent("logs/access.log").path
        self.errorLogPath = directory.appendingPathComponent("logs/error.log").path
    }

    // MARK: - Lifecycle

    /// Starts nginx and returns once it accepts connections; `directives` are added to its
    /// `server` block.
    ///
    /// - Throws: ``Failure/notInstalled`` without nginx; ``Failure/failedToStart(_:)`` with
    ///   nginx's error log when it exits or is not listening within 10 seconds.
    static func start(tls: TLS? = nil, directives: String = "") async throws -> NginxServer {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        // The free port can be taken between probing and nginx's bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-nginx-\(UUID().uuidString)")
            do {
                let server = try await launch(
                    executable: executable, port: try freePort(), directory: directory, tls: tls, directives: directives)
                if let server { return server }
                lastFailure = .failedToStart("the port was taken")
            } catch {
                try? FileManager.default.removeItem(at: directory)
                throw error
            }
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    /// Runs `body` with a started server, stopping it afterwards whatever happens.
    static func with<T>(
        tls: TLS? = nil, directives: String = "", _ body: (NginxServer) async throws -> T
    ) async throws -> T {
        try await start(tls: tls, directives: directives).serving(body)
    }

    /// Returns `nil` when nginx could not bind `port`, so the caller tries another.
    private static func launch(
        executable: String, port: Int, directory: URL, tls: TLS?, directives: String
    ) async throws -> NginxServer? {
        let configuration = directory.appendingPathComponent("nginx.conf")
        let process: ChildProcess
        do {
            process = try spawn(
                executable,
                arguments: ["-p", directory.path + "/", "-c", configuration.path, "-e", directory.path + "/logs/error.log"],
                in: directory, subdirectories: ["root", "temp"],
                configuration: configurationText(directory: directory.path, port: port, tls: tls, directives: directives),
                configurationName: configuration.lastPathComponent)
        } catch {
            throw Failure.failedToStart("\(error)")
        }
        let server = NginxServer(port: port, directory: directory, process: process, isTLS: tls != nil)

        // Ready once nginx wrote its pid file (after binding) and accepts a connection.
        let pidFile = directory.appendingPathComponent("nginx.pid").path
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let termination = process.termination {
                let log = server.errorLog()
                if log.contains("Address already in use") { return nil }
                throw Failure.failedToStart("it \(termination): \(log)")
            }
            let pid = (try? String(contentsOfFile: pidFile, encoding: .utf8))
                .flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            if pid == process.pid, canConnect(port: port) { return server }
            if ContinuousClock.now > deadline {
                await server.stop()
                throw Failure.failedToStart("not listening on port \(port) after 10 s: \(server.errorLog())")
            }
            await Task.yield()
        }
    }

    private static func configurationText(directory: String, port: Int, tls: TLS?, directives: String) -> String {
        // `listen … ssl http2` rather than nginx 1.25's `http2 on`: Debian 12 has 1.22.
        let listen: String
        if let tls {
            listen = """
                listen 127.0.0.1:\(port) ssl\(tls.http2 ? " http2" : "");
                        ssl_certificate "\(tls.certificate)";
                        ssl_certificate_key "\(tls.key)";
                \(tls.clientAuthority.map { "        ssl_client_certificate \"\($0)\";\n        ssl_verify_client on;" } ?? "")
                """
        } else {
            listen = "listen 127.0.0.1:\(port);"
        }
        // A master process and one worker, as nginx is run in production. Workers run as the
        // current user.
        return """
        daemon off;
        master_process on;
        worker_processes 1;
        \(geteuid() == 0 ? "user root;" : "")
        pid "\(directory)/nginx.pid";
        lock_file "\(directory)/nginx.lock";
        error_log "\(directory)/logs/error.log" info;
        events {
            worker_connections 128;
        }
        http {
            default_type application/octet-stream;
            sendfile on;
            keepalive_timeout 10s;
            client_body_temp_path "\(directory)/temp/body";
            proxy_temp_path "\(directory)/temp/proxy";
            fastcgi_temp_path "\(directory)/temp/fastcgi";
            uwsgi_temp_path "\(directory)/temp/uwsgi";
            scgi_temp_path "\(directory)/temp/scgi";
            log_format haul escape=json '{"method":"$request_method","path":"$uri","protocol":"$server_protocol","status":$status,'
                '"bodyBytesSent":$body_bytes_sent,"range":"$http_range","ifRange":"$http_if_range",'
                '"etag":"$sent_http_etag","lastModified":"$sent_http_last_modified",'
                '"contentRange":"$sent_http_content_range","completion":"$request_completion",'
                '"connection":"$connection"}';
            access_log "\(directory)/logs/access.log" haul;
            # First requests crawl; resumes (with Range) run at full speed.
            map $http_range $haul_rate {
                "" 256k;
                default 0;
            }
            server {
                \(listen)
                server_name localhost;
                root "\(directory)/root";
                \(directives)
                location /slow/ {
                    limit_rate $haul_rate;
                }
                location /slow-lm/ {
                    etag off;
                    limit_rate $haul_rate;
                }
            }
        }

        """
    }

    // MARK: - Content

    /// The URL of `path` (starting with `/`) on this server.
    func url(_ path: String) -> URL {
        URL(string: "\(isTLS ? "https" : "http")://127.0.0.1:\(port)\(path)")!
    }

    /// Writes `bytes` at `path` (starting with `/`) under ``root``, atomically, with the
    /// modification date `modified` (whole seconds; nginx's ETag and Last-Modified come
    /// from it).
    func write(_ bytes: [UInt8], at path: String, modified: Date) throws {
        let file = root.appendingPathComponent(String(path.drop { $0 == "/" }))
        try FileManager.default.createDirectory(
            at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(bytes).write(to: file, options: .atomic)
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSince1970: modified.timeIntervalSince1970.rounded(.down))],
            ofItemAtPath: file.path)
    }

    // MARK: - Logs

    /// The access log's complete lines, oldest first.
    func accessLog() throws -> [LogEntry] {
        guard let data = FileManager.default.contents(atPath: accessLogPath) else { return [] }
        var lines = data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        lines.removeLast()  // empty, or a line nginx is still writing
        let decoder = JSONDecoder()
        return try lines.filter { !$0.isEmpty }.map { try decoder.decode(LogEntry.self, from: Data($0)) }
    }

    /// Waits for an access log entry that `match` accepts and returns the first one.
    ///
    /// nginx logs a request after sending its last byte, which can be just after the client
    /// has it all; this polls (yielding) for up to 10 seconds.
    func logEntry(where match: (LogEntry) -> Bool) async throws -> LogEntry {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let entry = try accessLog().first(where: match) { return entry }
            if ContinuousClock.now > deadline {
                let entries = try accessLog().map(\.description).joined(separator: "\n")
                throw Failure.logTimeout("access log:\n\(entries)\nerror log:\n\(errorLog())")
            }
            await Task.yield()
        }
    }

    /// nginx's error log, for failure messages.
    func errorLog() -> String {
        (try? String(contentsOfFile: errorLogPath, encoding: .utf8)) ?? ""
    }

    // MARK: - Helpers

    private static func locateExecutable() -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let override = environment["HAUL_NGINX"] {
            return access(override, X_OK) == 0 ? override : nil
        }
        let path = (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/nginx" }
        return (["/usr/sbin/nginx"] + path).first { access($0, X_OK) == 0 }
    }

    /// A port that was free a moment ago: bind to port 0 and ask which one the kernel gave.
    static func freePort() throws -> Int {
        let (port, socket) = try closedPort()
        close(socket)
        return port
    }

    /// A port of 127.0.0.1 that refuses connections for as long as `socket` stays open:
    /// bound (without `SO_REUSEADDR`) and not listening, so no other test's server can take
    /// it meanwhile, as one could take a port from ``freePort()``. Close `socket` after.
    static func closedPort() throws -> (port: Int, socket: Int32) {
        let socket = try openSocket()
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            close(socket)
            throw Failure.failedToStart("cannot bind a probe socket: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        guard named == 0 else {
            close(socket)
            throw Failure.failedToStart("getsockname failed: errno \(errno)")
        }
        return (Int(UInt16(bigEndian: address.sin_port)), socket)
    }

    /// Whether process `pid` itself listens on `port` of 127.0.0.1, not merely someone: a
    /// port probed free can be taken by another test's server before the process binds it,
    /// and a connection to it then succeeds although the process failed to start. On Linux
    /// the listening socket's inode (`/proc/net/tcp`) is looked for among the process's
    /// descriptors; elsewhere only the connection is tried.
    static func isListening(port: Int, pid: Int32) -> Bool {
        #if os(Linux)
            guard let table = readToEnd("/proc/net/tcp") else { return false }
            let local = "0100007F:" + String(format: "%04X", port)
            let inodes = Set(
                table.split(separator: "\n").dropFirst().compactMap { line -> String? in
                    let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                    guard fields.count > 9, fields[1] == local, fields[3] == "0A" else { return nil }
                    return "socket:[\(fields[9])]"
                })
            guard !inodes.isEmpty,
                let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")
            else { return false }
            return descriptors.contains { descriptor in
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(descriptor)"))
                    .map(inodes.contains) ?? false
            }
        #else
            return canConnect(port: port)
        #endif
    }

    #if os(Linux)
        /// A file of `/proc`, read to its end: Foundation's `String(contentsOfFile:)` stops
        /// after the first page of these files, which report a size of 0.
        private static func readToEnd(_ path: String) -> String? {
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { return nil }
            defer { close(descriptor) }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0 { return nil }
                if count == 0 { break }
                bytes.append(contentsOf: buffer[0..<count])
            }
            return String(decoding: bytes, as: UTF8.self)
        }
    #endif

    static func canConnect(port: Int) -> Bool {
        guard let socket = try? openSocket() else { return false }
        defer { close(socket) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

    private static func openSocket() throws -> Int32 {
        #if canImport(Glibc)
            let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let socket = Darwin.socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard socket >= 0 else { throw Failure.failedToStart("cannot open a socket: errno \(errno)") }
        return socket
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }
}
