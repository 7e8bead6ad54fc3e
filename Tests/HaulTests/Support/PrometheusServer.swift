import AsyncHTTPClient
import Foundation
import Haul
import NIOCore

/// A real Prometheus (Debian's `prometheus` package) for the metrics test: started on a
/// free port of 127.0.0.1 with a storage directory of its own, scraping one target every
/// second with a bearer token read from a file, and stopped afterwards. Its HTTP API
/// answers ``query(_:)``: once the target has seen two scrapes, the first one's samples
/// are there.
///
/// Prometheus is `/usr/bin/prometheus`, else the first on `PATH`; without one,
/// ``isAvailable`` is false.
final class PrometheusServer: Sendable {
    enum Failure: Error, CustomStringConvertible {
        case notInstalled
        case failedToStart(String)

        var description: String {
            switch self {
            case .notInstalled: "prometheus is not installed: run .ci/run or apt-get install prometheus"
            case .failedToStart(let detail): "prometheus did not start: \(detail)"
            }
        }
    }

    static let executable: String? = {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/prometheus" }
        return (["/usr/bin/prometheus"] + path).first { FileManager.default.isExecutableFile(atPath: $0) }
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

    /// Starts Prometheus scraping `target` (`host:port`) at `/metrics` every second, with
    /// `token` as its bearer token.
    static func start(scraping target: String, token: String) async throws -> PrometheusServer {
        guard let executable else { throw Failure.notInstalled }
        var lastFailure = Failure.failedToStart("no attempt")
        // The free port can be taken between probing and Prometheus' bind: try a few.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-prometheus-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let tokenFile = directory.appendingPathComponent("token")
            try Data(token.utf8).write(to: tokenFile)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: tokenFile.path)
            let configuration = """
                global:
                  scrape_interval: 1s
                  scrape_timeout: 1s
                scrape_configs:
                  - job_name: haul
                    authorization:
                      type: Bearer
                      credentials_file: \(tokenFile.path)
                    static_configs:
                      - targets: ['\(target)']

                """
            let configurationPath = directory.appendingPathComponent("prometheus.yml")
            try configuration.write(to: configurationPath, atomically: true, encoding: .utf8)
            let port = try NginxServer.freePort()
            let log = directory.appendingPathComponent("log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            let handle = try FileHandle(forWritingTo: log)
            defer { try? handle.close() }
            let process = try ChildProcess(
                executable: executable,
                arguments: [
                    "--config.file=\(configurationPath.path)", "--storage.tsdb.path=\(directory.path)/data",
                    "--web.listen-address=127.0.0.1:\(port)",
                ], standardOutput: .descriptor(handle.fileDescriptor), standardError: .descriptor(handle.fileDescriptor))
            let server = PrometheusServer(port: port, directory: directory, process: process)
            let deadline = ContinuousClock.now + .seconds(30)
            while true {
                if process.hasExited {
                    let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                    if text.contains("address already in use") { break }
                    throw Failure.failedToStart(text)
                }
                // (each check is a request to it, which waits for its answer)
                if await server.isReady() { return server }
                if ContinuousClock.now > deadline {
                    await server.stop()
                    throw Failure.failedToStart("not ready after 30 s")
                }
                await Task.yield()
            }
            lastFailure = .failedToStart("the port was taken")
            try? FileManager.default.removeItem(at: directory)
        }
        throw lastFailure
    }

    /// Whether `/-/ready` answers 200.
    private func isReady() async -> Bool {
        guard let response = try? await HTTPClient.shared.execute(
            HTTPClientRequest(url: "http://127.0.0.1:\(port)/-/ready"), timeout: .seconds(2))
        else { return false }
        _ = try? await response.body.collect(upTo: 1 << 16)
        return response.status == .ok
    }

    /// The value of an instant query's first sample, or `nil` while there is none.
    func query(_ expression: String) async throws -> Double? {
        var components = URLComponents(string: "http://127.0.0.1:\(port)/api/v1/query")!
        components.queryItems = [URLQueryItem(name: "query", value: expression)]
        let response = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: components.url!.absoluteString), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 1 << 20)
        let object = try JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any]
        let data = object?["data"] as? [String: Any]
        guard let first = (data?["result"] as? [[String: Any]])?.first, let value = first["value"] as? [Any],
            value.count == 2, let text = value[1] as? String
        else { return nil }
        return Double(text)
    }

    func stop() async {
        process.signal(SIGTERM)
        _ = await process.wait()
        try? FileManager.default.removeItem(at: directory)
    }
}
