import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real squid for the tests, with the access rules Debian's `/etc/squid/squid.conf`
/// ships (below, verbatim): `CONNECT` only to port 443 (plus the ports a test adds to
/// `SSL_ports`), plain requests to the usual ports and 1025-65535, from localhost only.
/// Started in the foreground (`squid -N`) on a free port of 127.0.0.1 with a directory of
/// its own, no cache, and stopped afterwards.
///
/// With ``Credentials`` it asks for them, Basic, checked by squid's own `basic_ncsa_auth`
/// helper against a password file (MD5-crypt, made with `openssl passwd -1`). Its access
/// log has a line per request once it is answered: ``requests()`` reads them.
///
/// squid is `/usr/sbin/squid`, else the first on `PATH`; when there is none, or openssl is
/// missing, ``isAvailable`` is false.
final class Squid: Sendable {
    struct Credentials: Sendable {
        var user: String
        var password: String
    }

    /// One line of the access log.
    struct Request: Equatable, CustomStringConvertible {
        /// The client's port: requests on one kept-alive connection share it.
        var clientPort: Int
        /// squid's result, e.g. `TCP_MISS/200`, `TCP_DENIED/403`, `TCP_TUNNEL/200`.
        var result: String
        var method: String
        /// The URL, or `host:port` for `CONNECT`.
        var target: String
        /// The user squid authenticated, or `-`.
        var user: String

        var description: String { "\(result) \(method) \(target) \(user)" }
    }

    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "squid is not installed: run .ci/run or apt-get install squid"
            case .failedToStart(let detail): "squid did not start: \(detail)"
            }
        }
    }

    static let executable: String? = {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/squid" }
        return (["/usr/sbin/squid"] + path).first { access($0, X_OK) == 0 }
    }()

    static let authenticator: String? = ["/usr/lib/squid/basic_ncsa_auth", "/usr/lib64/squid/basic_ncsa_auth"].first {
        access($0, X_OK) == 0
    }

    static var isAvailable: Bool { executable != nil && TestCertificates.openssl != nil }

    let port: Int
    let directory: URL
    /// The service name (`squid -n`), which names squid's shared-memory segments
    /// (`/dev/shm/NAME-cf__*.shm`). squid's default, `squid`, is the same for every
    /// instance: two started at once by tests running in parallel collided on those
    /// segments ("shm_open ... File exists") and one died. Letters and digits only.
    let serviceName: String
    private let process: ChildProcess

    private init(port: Int, directory: URL, serviceName: String, process: ChildProcess) {
        self.port = port
        self.directory = directory
        self.serviceName = serviceName
        self.process = process
    }

    /// `http://127.0.0.1:PORT`, with `user:password@` when given.
    func url(credentials: Credentials? = nil) -> String {
        let userInfo = credentials.map { "\($0.user):\($0.password)@" } ?? ""
        return "http://\(userInfo)127.0.0.1:\(port)"
    }

    /// The access log and squid's own log, for failure messages.
    func log() -> String {
        let access = (try? String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        let cache = (try? String(contentsOf: directory.appendingPathComponent("cache.log"), encoding: .utf8)) ?? ""
        return "access.log:\n\(access)\ncache.log (end):\n\(cache.suffix(2000))"
    }

    /// The requests answered so far, from the access log (the format `haul` below: client
    /// port, result/status, method, URL, user). A `CONNECT` tunnel is logged when it closes.
    func requests() -> [Request] {
        let text = (try? String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // (A connection closed before any request, such as the start-up probe's, is
            // logged as an error with no method.)
            guard fields.count >= 5, let port = Int(fields[0]), fields[2] != "-", !fields[3].hasPrefix("error:")
            else { return nil }
            return Request(
                clientPort: port, result: String(fields[1]), method: String(fields[2]), target: String(fields[3]),
                user: String(fields[4]))
        }
    }

    /// Waits until the access log holds `count` requests (a tunnel's line comes when it
    /// closes), for at most 10 seconds; returns them.
    func requests(atLeast count: Int) async -> [Request] {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            let found = requests()
            if found.count >= count { return found }
            await Task.yield()
        }
        return requests()
    }

    /// Runs `body` with a started squid, stopping it afterwards whatever happens.
    static func with<T>(
        credentials: Credentials? = nil, sslPorts: [Int] = [], _ body: (Squid) async throws -> T
    ) async throws -> T {
        let squid = try await start(credentials: credentials, sslPorts: sslPorts)
        do {
            let value = try await body(squid)
            await squid.stop()
            return value
        } catch {
            await squid.stop()
            throw error
        }
    }

    /// Starts squid and returns once it accepts connections.
    static func start(credentials: Credentials? = nil, sslPorts: [Int] = []) async throws -> Squid {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        // The free port can be taken between probing and squid's bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-squid-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            // Run as root, squid switches to its own user (proxy), which writes the logs here.
            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path)
            if let squid = try await launch(
                executable: executable, port: try NginxServer.freePort(), directory: directory,
                credentials: credentials, sslPorts: sslPorts)
            {
                return squid
            }
            lastFailure = .failedToStart("the port was taken")
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    private static func launch(
        executable: String, port: Int, directory: URL, credentials: Credentials?, sslPorts: [Int]
    ) async throws -> Squid? {
        var authentication = ""
        if let credentials {
            guard let authenticator else { throw Failure.failedToStart("basic_ncsa_auth is missing") }
            let passwords = directory.appendingPathComponent("passwd")
            let hash = try await md5Crypt(credentials.password)
            try "\(credentials.user):\(hash)\n".write(to: passwords, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: passwords.path)
            authentication = """
                auth_param basic program \(authenticator) \(passwords.path)
                auth_param basic realm haul-test
                acl authenticated proxy_auth REQUIRED
                http_access deny !authenticated

                """
        }
        let extraSSLPorts = sslPorts.map { "acl SSL_ports port \($0)\n" }.joined()
        // Debian 12's default rules, verbatim (comments left out), with the test's lines
        // where Debian includes /etc/squid/conf.d/*.conf.
        let configuration = """
            acl localnet src 10.0.0.0/8
            acl localnet src 172.16.0.0/12
            acl localnet src 192.168.0.0/16
            acl localnet src fc00::/7
            acl localnet src fe80::/10
            acl SSL_ports port 443
            \(extraSSLPorts)acl Safe_ports port 80
            acl Safe_ports port 21
            acl Safe_ports port 443
            acl Safe_ports port 70
            acl Safe_ports port 210
            acl Safe_ports port 1025-65535
            acl Safe_ports port 280
            acl Safe_ports port 488
            acl Safe_ports port 591
            acl Safe_ports port 777
            http_access deny !Safe_ports
            http_access deny CONNECT !SSL_ports
            http_access allow localhost manager
            http_access deny manager
            \(authentication)http_access allow localhost
            http_access deny all
            http_port 127.0.0.1:\(port)
            visible_hostname haul-test
            pid_filename none
            cache_log \(directory.path)/cache.log
            logformat haul %>p %Ss/%03>Hs %rm %ru %un
            access_log stdio:\(directory.path)/access.log haul
            logfile_rotate 0
            cache deny all
            shutdown_lifetime 0 seconds

            """
        let configurationPath = directory.appendingPathComponent("squid.conf")
        try configuration.write(to: configurationPath, atomically: true, encoding: .utf8)
        let serviceName = "haul" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let process: ChildProcess
        do {
            process = try ChildProcess(
                executable: executable, arguments: ["-N", "-n", serviceName, "-f", configurationPath.path])
        } catch {
            throw Failure.failedToStart("\(error)")
        }
        let squid = Squid(port: port, directory: directory, serviceName: serviceName, process: process)
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            if let termination = process.termination {
                squid.removeSegments()
                let text = squid.log()
                if text.contains("Address already in use") { return nil }
                throw Failure.failedToStart("it \(termination): \(text)")
            }
            if NginxServer.isListening(port: port, pid: process.pid) { return squid }
            if ContinuousClock.now > deadline {
                await squid.stop()
                throw Failure.failedToStart("not listening on port \(port) after 20 s: \(squid.log())")
            }
            await Task.yield()
        }
    }

    /// `password` hashed as `openssl passwd -1` does (MD5-crypt, which the helper reads).
    /// Waits for openssl without blocking a thread (never `waitUntilExit` here: it holds a
    /// thread of the concurrency pool, and two of them held at once stall every test).
    private static func md5Crypt(_ password: String) async throws -> String {
        guard let openssl = TestCertificates.openssl else { throw Failure.failedToStart("openssl is missing") }
        let output = ExecClosedPipe()
        let process = try ChildProcess(
            executable: openssl, arguments: ["passwd", "-1", password],
            standardOutput: .descriptor(output.fileHandleForWriting.fileDescriptor))
        try output.fileHandleForWriting.close()
        let termination = await process.wait()
        // The child has exited and its end of the pipe is closed: this read cannot wait.
        let hash = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard termination.succeeded else { throw Failure.failedToStart("openssl passwd failed") }
        return hash.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops squid, waits for it to exit and removes its directory and its shared-memory
    /// segments, which a killed squid leaves behind (its helpers exit when their input
    /// closes).
    func stop() async {
        process.signal(SIGKILL)
        _ = await process.wait()
        try? FileManager.default.removeItem(at: directory)
        removeSegments()
    }

    private func removeSegments() {
        let segments = URL(fileURLWithPath: "/dev/shm")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: segments.path)) ?? []
        where name.hasPrefix("\(serviceName)-") {
            try? FileManager.default.removeItem(at: segments.appendingPathComponent(name))
        }
    }
}
