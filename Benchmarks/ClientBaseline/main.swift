// The floor under Haul's cost per file: a plain loop on AsyncHTTPClient, the client Haul
// is built on, fetching every URL of a list into a file of its own, PARALLEL (default 16)
// at a time, with nothing else: no journal, no fsync, no rename, no events, no retries.
// What Haul spends beyond this on the same list is Haul's own per-file work.
//
//     HAUL_BENCHMARKS=1 swift build -c release --product haul-client-baseline
//     .build/release/haul-client-baseline LIST OUTDIR [PARALLEL]
//
// `Benchmarks/compare.sh` runs it as the `ahc-loop` row of workload 3 when
// AHC_BIN=path/to/haul-client-baseline is set; CA_FILE=PEM trusts that authority for https
// URLs. MODE=memory only collects the bodies (the client's own cost). Exits 1 on any
// failure or non-200 status.

import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import NIOSSL

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: haul-client-baseline LIST OUTDIR [PARALLEL]\n".utf8))
    exit(2)
}
let parallel = arguments.count > 3 ? Int(arguments[3]) ?? 16 : 16
let urls = try String(contentsOfFile: arguments[1], encoding: .utf8).split(separator: "\n").map(String.init)
let output = arguments[2]

var configuration = HTTPClient.Configuration()
configuration.connectionPool = HTTPClient.Configuration.ConnectionPool(
    idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: parallel)
if let bundle = ProcessInfo.processInfo.environment["CA_FILE"], !bundle.isEmpty {
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.trustRoots = .file(bundle)
    configuration.tlsConfiguration = tls
}
let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)

/// With MODE=memory the bodies are only collected, never written: the client's own cost.
let memoryOnly = ProcessInfo.processInfo.environment["MODE"] == "memory"

/// Fetches one URL into OUTDIR/<last path component> with AsyncHTTPClient's own file delegate.
@Sendable func fetch(_ url: String) async throws {
    if memoryOnly {
        let response = try await client.execute(request: try HTTPClient.Request(url: url)).get()
        guard response.status == .ok, response.body != nil else { throw Failure("\(url): \(response.status)") }
        return
    }
    let name = url.split(separator: "/").last.map(String.init) ?? "index"
    let delegate = try FileDownloadDelegate(path: output + "/" + name)
    let response = try await client.execute(request: try HTTPClient.Request(url: url), delegate: delegate).get()
    guard response.head.status == .ok else { throw Failure("\(url): \(response.head.status)") }
}

struct Failure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

var failed = false
do {
    try await withThrowingTaskGroup(of: Void.self) { group in
        var pending = urls.makeIterator()
        for _ in 0..<parallel {
            guard let url = pending.next() else { break }
            group.addTask { try await fetch(url) }
        }
        while try await group.next() != nil {
            if let url = pending.next() { group.addTask { try await fetch(url) } }
        }
    }
} catch {
    FileHandle.standardError.write(Data("haul-client-baseline: \(error)\n".utf8))
    failed = true
}
try await client.shutdown()
exit(failed ? 1 : 0)
