import Foundation
import Haul
import HaulServer
import HaulTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// The API's OpenAPI 3.1 document (`Sources/HaulServer/Dashboard/openapi.json`): served at
/// `/api/v1/openapi.json`, naming every route the router has, and held to by the running
/// service under schemathesis.
@Suite("OpenAPI document")
struct OpenAPITests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func document() throws -> [String: Any] {
        let data = try Data(contentsOf: root.appendingPathComponent("Sources/HaulServer/Dashboard/openapi.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// Every route of the API's handlers (`group.get("downloads/{id}")` …), read from their
    /// sources, as `METHOD /path`.
    static func routesInSources() throws -> Set<String> {
        let directory = root.appendingPathComponent("Sources/HaulServer/API")
        var routes: Set<String> = []
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) where name.hasSuffix(".swift") {
            let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            for line in text.split(separator: "\n") {
                for method in ["get", "post", "patch", "put", "delete"] {
                    for prefix in ["group.\(method)(\"", "api.\(method)(\""] {
                        guard let start = line.range(of: prefix) else { continue }
                        let rest = line[start.upperBound...]
                        guard let end = rest.firstIndex(of: "\"") else { continue }
                        routes.insert("\(method.uppercased()) /\(rest[..<end])")
                    }
                }
            }
        }
        return routes
    }

    @Test func theDocumentNamesEveryRouteAndNoOther() throws {
        let document = try Self.document()
        #expect(document["openapi"] as? String == "3.1.0")
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        var documented: Set<String> = []
        for (path, operations) in paths {
            for method in operations.keys where ["get", "post", "patch", "put", "delete"].contains(method) {
                documented.insert("\(method.uppercased()) \(path)")
            }
        }
        let routes = try Self.routesInSources()
        #expect(routes.count > 20)
        #expect(routes.subtracting(documented).isEmpty, "routes the document lacks: \(routes.subtracting(documented).sorted())")
        #expect(documented.subtracting(routes).isEmpty, "operations no route has: \(documented.subtracting(routes).sorted())")
    }

    @Test func theServiceServesItBehindItsToken() async throws {
        try await ServiceAPITests.with { client, _, _ in
            let served = try await client.execute(
                uri: "/api/v1/openapi.json", method: .get, headers: ServiceAPITests.headers)
            #expect(served.status == .ok)
            #expect(served.headers[.contentType]?.hasPrefix("application/json") == true)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(buffer: served.body)) as? [String: Any])
            #expect(object["openapi"] as? String == "3.1.0")
            let anonymous = try await client.execute(
                uri: "/api/v1/openapi.json", method: .get, headers: [HTTPField.Name("Host")!: ServiceAPITests.host])
            #expect(anonymous.status == .unauthorized)
        }
    }
}

/// schemathesis (from PyPI), found on `PATH` or in pip's user and pyenv directories.
enum Schemathesis {
    static let executable: String? = {
        let environment = ProcessInfo.processInfo.environment
        let home = environment["HOME"] ?? "/root"
        let path = (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/schemathesis" }
        return (path + ["\(home)/.local/bin/schemathesis", "\(home)/.pyenv/shims/schemathesis", "/usr/local/bin/schemathesis"])
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }()
}

extension HeavyProcessTests {
    @Suite(
        "schemathesis against a running service",
        .enabled(if: Schemathesis.executable != nil, "schemathesis is not installed: run .ci/run or pip install schemathesis"),
        .timeLimit(.minutes(6)))
    struct SchemathesisTests {
        @Test func noRequestGetsA5xxOrAnAnswerThatBreaksTheDocument() async throws {
            try await CLIFixture.with { f, journal in
                let token = "schemathesis-\(UUID().uuidString)"
                var environment = Haul.environment
                environment["HAUL_TOKEN"] = token
                let directory = f.directory.appendingPathComponent("files").path
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                let service = try HaulProcess(
                    ["serve", "--listen", "127.0.0.1:0", "--journal", journal, "-d", directory, "-j", "2"],
                    environment: environment)
                let line = try #require(await service.line { $0.contains("listening on http://") })
                let address = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") })
                let run = try await HaulProcess(
                    Self.arguments(schema: "\(address)/api/v1/openapi.json", token: token),
                    environment: environment, executable: URL(fileURLWithPath: Schemathesis.executable!),
                    // (its caches and reports go to its working directory)
                    directory: f.directory.path
                ).wait()
                #expect(run.status == 0, "schemathesis found problems:\n\(run.stdout)\n\(run.stderr)")
                service.send(SIGTERM)
                #expect(await service.wait().status == 0)
            }
        }

        /// The run: the checks the issue names (no 5xx, every answer as the document says),
        /// a fixed seed, and the event stream left out (it never ends).
        static func arguments(schema: String, token: String) -> [String] {
            [
                "run", schema, "-H", "Authorization: Bearer \(token)", "--checks",
                "not_a_server_error,response_schema_conformance", "--max-examples", "25", "--exclude-path", "/events",
                "--generation-deterministic", "--request-timeout", "20", "--no-color",
            ]
        }
    }
}
