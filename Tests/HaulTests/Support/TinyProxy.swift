import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real forward proxy for the tests: Debian's `tinyproxy`, started in the foreground on a
/// free port of 127.0.0.1 with a configuration of its own, and stopped afterwards.
///
/// Its log records each request it is asked to forward, `CONNECT host:port` for tunnels:
/// ``requests()`` reads them, which is how the tests know a download went through it.
/// With ``Credentials`` it asks for them (`BasicAuth`), answering 407 without.
///
/// tinyproxy is `/usr/bin/tinyproxy`, else the first on `PATH`; when there is none,
/// ``isAvailable`` is false.
final class TinyProxy: Sendable {
    struct Credentials: Sendable {
        var user: String
        var password: String
    }

    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "tinyproxy is not installed: run .ci/run or apt-get install tinyproxy"
            case .failedToStart(let detail): "tinyproxy did not start: \(detail)"
            }
        }
    }

    static let executable: String? = {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/tinyproxy" }
        return (["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"] + path).first { access($0, X_OK) == 0 }
    }()

    static var isAvailable: Bool { executable != nil }

    let port: Int
    let directory: URL
    private let process: ChildProcess

    private init(port: Int, directory: URL, process: ChildProcess) {
        self.port = port
        self.directory = directory
        self.process = process
    }

    /// `http://127.0.0.1:PORT`, with `user:password@` when given.
    func url(credentials: Credentials? = nil) -> String {
        let userInfo = credentials.map { "\($0.user):\($0.password)@" } ?? ""
        return "http://\(userInfo)127.0.0.1:\(port)"
    }

    var logPath: String { directory.appendingPathComponent("tinyproxy.log").path }

    /// The log, for failure messages.
    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The requests tinyproxy was asked to forward, as their request lines: `CONNECT
    /// 127.0.0.1:8443 HTTP/1.1`, `GET http://… HTTP/1.1`. tinyproxy logs each as it reads
    /// it, before it connects onwards, so a download that went through is already there.
    func requests() -> [String] {
        log().split(separator: "\n").compactMap { line in
            guard line.hasPrefix("CONNECT"), let range = line.range(of: "): ", options: .backwards),
                line.contains("Request (file descriptor")
            else { return nil }
            return String(line[range.upperBound...])
        }
    }

    /// Runs `body` with a started proxy, stopping it afterwards whatever happens.
    static func with<T>(credentials: Credentials? = nil, _ body: (TinyProxy) async throws -> T) async throws -> T {
        let proxy = try await start(credentials: credentials)
        do {
            let value = try await body(proxy)
            await proxy.stop()
            return value
        } catch {
            await proxy.stop()
            throw error
        }
    }

    /// Starts tinyproxy and returns once it accepts connections.
    static func start(credentials: Credentials? = nil) async throws -> TinyProxy {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        // The free port can be taken between probing and tinyproxy's bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-tinyproxy-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            if let proxy = try await launch(
                executable: executable, port: try NginxServer.freePort(), directory: directory, credentials: credentials)
            {
                return proxy
            }
            lastFailure = .failedToStart("the port was taken")
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    private static func launch(
        executable: String, port: Int, directory: URL, credentials: Credentials?
    ) async throws -> TinyProxy? {
        let log = directory.appendingPathComponent("tinyproxy.log").path
        // No ConnectPort line: CONNECT is allowed to any port (the test servers' are random).
        let configuration = """
            Port \(port)
            Listen 127.0.0.1
            Timeout 30
            LogFile "\(log)"
            LogLevel Info
            PidFile "\(directory.path)/tinyproxy.pid"
            MaxClients 64
            Allow 127.0.0.1
            DisableViaHeader Yes
            \(credentials.map { "BasicAuth \($0.user) \($0.password)" } ?? "")

            """
        let configurationPath = directory.appendingPathComponent("tinyproxy.conf")
        try configuration.write(to: configurationPath, atomically: true, encoding: .utf8)
        let process: ChildProcess
        do {
            process = try ChildProcess(executable: executable, arguments: ["-d", "-c", configurationPath.path])
        } catch {
            throw Failure.failedToStart("\(error)")
        }
        let proxy = TinyProxy(port: port, directory: directory, process: process)
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let termination = process.termination {
                let text = proxy.log()
                if text.contains("Address already in use") || text.contains("Could not create listening") { return nil }
                throw Failure.failedToStart("it \(termination): \(text)")
            }
            if proxy.log().contains("Accepting connections"), NginxServer.canConnect(port: port) { return proxy }
            if ContinuousClock.now > deadline {
                await proxy.stop()
                throw Failure.failedToStart("not listening on port \(port) after 10 s: \(proxy.log())")
            }
            await Task.yield()
        }
    }

    /// Stops tinyproxy, waits for it to exit and removes its directory.
    ///
    /// SIGKILL: it has nothing to save.
    func stop() async {
        process.signal(SIGKILL)
        _ = await process.wait()
        try? FileManager.default.removeItem(at: directory)
    }
}
