import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A real SOCKS5 server for the tests: Debian's `danted` (Dante), started in the
/// foreground on a free port of 127.0.0.1 with a configuration of its own, and stopped
/// afterwards.
///
/// It runs with `debug: 1`, whose log shows each request as the client sent it: the
/// address type (`ATYP: 1` an IPv4 address, `3` a host name, `4` an IPv6 address) and the
/// address. ``requests()`` reads them, which is how the tests know what Haul gave the proxy.
/// `blocking` adds a rule refusing connections to that port of 127.0.0.1 (reply 2, "not
/// allowed by the ruleset").
///
/// danted is `/usr/sbin/danted`, else the first on `PATH`; when there is none,
/// ``isAvailable`` is false.
final class DanteProxy: Sendable {
    /// One SOCKS request as Dante logged it.
    struct Request: Hashable, CustomStringConvertible {
        /// The SOCKS address type: 1 IPv4, 3 a host name, 4 IPv6.
        var addressType: Int
        /// The address as Dante prints it: `localhost.8080`, `127.0.0.1.8080`.
        var address: String

        var description: String { "ATYP \(addressType) \(address)" }
    }

    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "danted is not installed: run .ci/run or apt-get install dante-server"
            case .failedToStart(let detail): "danted did not start: \(detail)"
            }
        }
    }

    static let executable: String? = {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/danted" }
        return (["/usr/sbin/danted"] + path).first { access($0, X_OK) == 0 }
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

    /// `socks5h://127.0.0.1:PORT`, or with the given scheme.
    func url(scheme: String = "socks5h") -> String { "\(scheme)://127.0.0.1:\(port)" }

    var logPath: String { directory.appendingPathComponent("danted.log").path }

    /// The log, for failure messages.
    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The SOCKS requests the proxy received, in order, from lines such as `dorequest():
    /// command 1 request received … Packet: VER: 5 CMD: 1 FLAG: 0 ATYP: 3 address:
    /// localhost.8080`. Dante logs each as it reads it, before it acts on it.
    func requests() -> [Request] {
        log().split(separator: "\n").compactMap { line in
            guard line.contains("request received"), let packet = line.range(of: "ATYP: ") else { return nil }
            let rest = line[packet.upperBound...]
            guard let space = rest.firstIndex(of: " "), let type = Int(rest[..<space]),
                let address = rest.range(of: "address: ")
            else { return nil }
            return Request(
                addressType: type,
                address: String(rest[address.upperBound...]).trimmingCharacters(in: .whitespaces))
        }
    }

    /// Runs `body` with a started proxy, stopping it afterwards whatever happens.
    static func with<T>(blocking: Int? = nil, _ body: (DanteProxy) async throws -> T) async throws -> T {
        let proxy = try await start(blocking: blocking)
        do {
            let value = try await body(proxy)
            await proxy.stop()
            return value
        } catch {
            await proxy.stop()
            throw error
        }
    }

    /// Starts danted and returns once it accepts connections.
    static func start(blocking: Int? = nil) async throws -> DanteProxy {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        // The free port can be taken between probing and danted's bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("haul-danted-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            if let proxy = try await launch(
                executable: executable, port: try NginxServer.freePort(), directory: directory, blocking: blocking)
            {
                return proxy
            }
            lastFailure = .failedToStart("the port was taken")
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    private static func launch(
        executable: String, port: Int, directory: URL, blocking: Int?
    ) async throws -> DanteProxy? {
        let log = directory.appendingPathComponent("danted.log").path
        // As root, Dante wants users to switch to; as anyone else it stays who it is.
        let users = getuid() == 0 ? "user.privileged: root\nuser.unprivileged: nobody\n" : ""
        let block =
            blocking.map {
                """
                socks block {
                    from: 127.0.0.0/8 to: 127.0.0.1/32 port = \($0)
                    log: error
                }

                """
            } ?? ""
        let configuration = """
            logoutput: \(log)
            debug: 1
            internal: 127.0.0.1 port = \(port)
            external: 127.0.0.1
            clientmethod: none
            socksmethod: none
            \(users)client pass {
                from: 127.0.0.0/8 to: 0.0.0.0/0
                log: error
            }
            \(block)socks pass {
                from: 127.0.0.0/8 to: 0.0.0.0/0
                command: connect
                log: connect error
            }

            """
        let configurationPath = directory.appendingPathComponent("danted.conf")
        try configuration.write(to: configurationPath, atomically: true, encoding: .utf8)
        let process: ChildProcess
        do {
            process = try ChildProcess(executable: executable, arguments: ["-f", configurationPath.path, "-p", directory.appendingPathComponent("danted.pid").path, "-N", "1"])
        } catch {
            throw Failure.failedToStart("\(error)")
        }
        let proxy = DanteProxy(port: port, directory: directory, process: process)
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            if let termination = process.termination {
                let text = proxy.log()
                if text.contains("Address already in use") { return nil }
                throw Failure.failedToStart("it \(termination): \(text)")
            }
            if NginxServer.isListening(port: port, pid: process.pid) { return proxy }
            if ContinuousClock.now > deadline {
                await proxy.stop()
                throw Failure.failedToStart("not listening on port \(port) after 10 s: \(proxy.log())")
            }
            await Task.yield()
        }
    }

    /// Stops danted (its mother process and, with it, its children), waits for it to exit
    /// and removes its directory.
    func stop() async {
        process.signal(SIGKILL)
        _ = await process.wait()
        // The children notice their mother is gone and exit; none holds the directory.
        try? FileManager.default.removeItem(at: directory)
    }
}
