import AsyncHTTPClient
import Foundation
package import Haul
import NIOCore
import NIOHTTP1

/// The CLI's side of a running service: when `haul serve` runs for the journal, `haul get`,
/// `list`, `pause`, `cancel`, `retry` and `resume` go through its API instead of the
/// journal. It finds the service by the address file beside the journal (only while the
/// service holds its lock), and authenticates with `$HAUL_TOKEN` or the token file, which
/// only the journal's owner can read; the token goes in a header, never in a URL.
package final class ServiceClient: Sendable {
    /// A failed call, with the API's message.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package var status: Int
        package var code: String
        package var message: String
        package var description: String { message }
    }

    /// The service's address (`127.0.0.1:6800`).
    package let address: String
    private let token: String
    private let journalPath: String
    private let client: HTTPClient

    /// The client of the service running for `journalPath`, or `nil` when none runs.
    ///
    /// - Throws: ``Failure`` when a service runs but its token cannot be read.
    package init?(journalPath: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(Failure)
    {
        let files = ServiceFiles(journalPath: journalPath)
        guard let address = files.runningAddress() else { return nil }
        do throws(ServiceFiles.Failure) {
            guard let (token, _) = try files.existingToken(environment: environment) else {
                throw ServiceFiles.Failure(message: "\(files.tokenPath) is missing")
            }
            self.token = token
        } catch {
            throw Failure(
                status: 0, code: "token",
                message: "a service runs at \(address), but its token cannot be used (\(error.message)): "
                    + "set $\(ServiceFiles.tokenVariable)")
        }
        self.address = address
        self.journalPath = journalPath
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .seconds(5))
        configuration.redirectConfiguration = .disallow
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Closes the connection pool; call it once, when done.
    package func close() async {
        try? await client.shutdown()
    }

    // MARK: - Calls

    struct Added: Decodable {
        var ids: [String]
    }

    /// Queues downloads; returns their IDs.
    package func add(_ downloads: [DownloadInput]) async throws(Failure) -> [String] {
        let data = try await call(.POST, "/api/v1/downloads", json: ByteBuffer(bytes: Self.addBody(downloads)))
        return try decode(Added.self, data).ids
    }

    /// The body of ``add(_:)``, `{"downloads":[…]}`, written by hand: `JSONEncoder` was the
    /// largest cost of sending thousands of downloads.
    static func addBody(_ downloads: [DownloadInput]) -> [UInt8] {
        var json = Array(#"{"downloads":["#.utf8)
        json.reserveCapacity(downloads.count * 96)
        func raw(_ text: StaticString) { text.withUTF8Buffer { json.append(contentsOf: $0) } }
        for (index, input) in downloads.enumerated() {
            raw(index == 0 ? #"{"url":"# : #",{"url":"#)
            JSONText.appendQuoted(input.url, to: &json)
            func member(_ key: StaticString, _ value: String?) {
                guard let value else { return }
                raw(key)
                JSONText.appendQuoted(value, to: &json)
            }
            if let mirrors = input.mirrors, !mirrors.isEmpty {
                raw(#","urls":["#)
                JSONText.appendQuoted(input.url, to: &json)
                for mirror in mirrors {
                    raw(",")
                    JSONText.appendQuoted(mirror, to: &json)
                }
                raw("]")
            }
            member(#","directory":"#, input.directory)
            member(#","name":"#, input.name)
            member(#","priority":"#, input.priority)
            member(#","checksum":"#, input.checksum)
            if let size = input.expectedSize {
                raw(#","expectedSize":"#)
                json += String(size).utf8
            }
            if let headers = input.headers {
                raw(#","headers":{"#)
                for (offset, header) in headers.sorted(by: { $0.key < $1.key }).enumerated() {
                    if offset > 0 { raw(",") }
                    JSONText.appendQuoted(header.key, to: &json)
                    raw(":")
                    JSONText.appendQuoted(header.value, to: &json)
                }
                raw("}")
            }
            if let rate = input.maxBytesPerSecond {
                raw(#","maxBytesPerSecond":"#)
                json += String(rate).utf8
            }
            if let connections = input.connections {
                raw(#","connections":"#)
                json += String(connections).utf8
            }
            if let pieces = input.pieces {
                raw(#","pieces":{"algorithm":"#)
                JSONText.appendQuoted(pieces.algorithm, to: &json)
                raw(#","length":"#)
                json += String(pieces.length).utf8
                raw(#","hashes":["#)
                for (offset, hash) in pieces.hashes.enumerated() {
                    if offset > 0 { raw(",") }
                    JSONText.appendQuoted(hash, to: &json)
                }
                raw("]}")
            }
            if let zsync = input.zsync { raw(zsync ? #","zsync":true"# : #","zsync":false"#) }
            if let hls = input.hls {
                raw(#","hls":"#)
                if hls.enabled, hls.variant != nil || hls.renditions != nil || hls.duration != nil {
                    var fields: [String] = []
                    if let renditions = hls.renditions { fields.append(#""renditions":\#(renditions)"#) }
                    if let variant = hls.variant {
                        var field: [UInt8] = Array(#""variant":"#.utf8)
                        JSONText.appendQuoted(variant, to: &field)
                        fields.append(String(decoding: field, as: UTF8.self))
                    }
                    if let duration = hls.duration { fields.append(#""duration":\#(duration)"#) }
                    json += ("{" + fields.joined(separator: ",") + "}").utf8
                } else {
                    raw(hls.enabled ? "true" : "false")
                }
            }
            if let seeds = input.seeds {
                raw(#","seeds":["#)
                for (offset, seed) in seeds.enumerated() {
                    if offset > 0 { raw(",") }
                    JSONText.appendQuoted(seed, to: &json)
                }
                raw("]")
            }
            raw("}")
        }
        raw("]}")
        return json
    }

    struct Page: Decodable {
        var total: Int
        var downloads: [DownloadView]
    }

    /// Every download in `states` (all when `nil`), oldest first, a page at a time.
    package func list(states: Set<JobState>?) async throws(Failure) -> [DownloadView] {
        var all: [DownloadView] = []
        let filter = states.map { "&state=" + $0.map(\.rawValue).sorted().joined(separator: ",") } ?? ""
        while true {
            let page = try decode(
                Page.self, try await call(.GET, "/api/v1/downloads?limit=1000&offset=\(all.count)\(filter)"))
            all += page.downloads
            if page.downloads.isEmpty || all.count >= page.total { return all }
        }
    }

    struct Affected: Decodable {
        var affected: Int
    }

    /// `pause`, `resume`, `retry` or `remove` for `ids`, or for every download in `states`.
    package func bulk(_ action: String, ids: [String]? = nil, states: [JobState]? = nil) async throws(Failure) -> Int {
        struct Body: Encodable {
            var action: String
            var ids: [String]?
            var states: [String]?
        }
        let body = Body(action: action, ids: ids, states: states?.map(\.rawValue))
        return try decode(Affected.self, try await call(.POST, "/api/v1/downloads/bulk", body: body)).affected
    }

    /// The service's events until the service stops, those `filter` admits; after
    /// `lastEventID`, when given, so that a reconnection first gets what it missed (or a
    /// `resync` event).
    package func events(after lastEventID: UInt64? = nil, filter: EventFilter = .all) async throws(Failure)
        -> AsyncThrowingStream<ServiceEvent, any Error>
    {
        var query: [String] = []
        if let types = filter.types { query.append("types=" + types.sorted().joined(separator: ",")) }
        if let states = filter.states { query.append("states=" + states.map(\.rawValue).sorted().joined(separator: ",")) }
        let path = "/api/v1/events" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        var request = HTTPClientRequest(url: "http://\(address)\(path)")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Accept", value: "text/event-stream")
        if let lastEventID { request.headers.add(name: "Last-Event-ID", value: String(lastEventID)) }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: .hours(24 * 365))
        } catch {
            throw Failure(status: 0, code: "network", message: "cannot reach the service at \(address): \(error)")
        }
        guard response.status == .ok else {
            throw Failure(status: Int(response.status.code), code: "http", message: "events: HTTP \(response.status.code)")
        }
        return AsyncThrowingStream { continuation in
            let task = Task {
                var parser = EventStreamParser()
                do {
                    for try await buffer in response.body {
                        for event in parser.feed(buffer.readableBytesView) { continuation.yield(event) }
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// One download, or `nil` when the service has no such download.
    package func download(_ id: String) async throws(Failure) -> DownloadView? {
        let path = "/api/v1/downloads/" + (id.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(["/"])) ?? id)
        do {
            return try decode(DownloadView.self, try await call(.GET, path))
        } catch where error.status == 404 {
            return nil
        }
    }

    /// Whether the service still runs for the journal (its lock is held and its address is
    /// this client's).
    package var serviceRuns: Bool {
        ServiceFiles(journalPath: journalPath).runningAddress() == address
    }

    // MARK: - HTTP

    private func call(_ method: HTTPMethod, _ path: String) async throws(Failure) -> Data {
        try await call(method, path, body: nil as Int?)
    }

    private func call(_ method: HTTPMethod, _ path: String, body: (some Encodable)?) async throws(Failure) -> Data {
        try await call(method, path, json: body.flatMap { try? ServiceJSON.encoder.encode($0) }.map { ByteBuffer(bytes: $0) })
    }

    /// A call with `json` as its body, if any.
    private func call(_ method: HTTPMethod, _ path: String, json: ByteBuffer?) async throws(Failure) -> Data {
        var request = HTTPClientRequest(url: "http://\(address)\(path)")
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(json)
        }
        let response: HTTPClientResponse
        let data: Data
        do {
            response = try await client.execute(request, timeout: .seconds(60))
            data = Data(buffer: try await response.body.collect(upTo: 64 << 20))
        } catch {
            throw Failure(status: 0, code: "network", message: "cannot reach the service at \(address): \(error)")
        }
        guard (200..<300).contains(response.status.code) else {
            let detail = try? ServiceJSON.decoder.decode(ErrorBody.self, from: data).error
            throw Failure(
                status: Int(response.status.code), code: detail?.code ?? "http",
                message: detail?.message ?? "HTTP \(response.status.code) from the service")
        }
        return data
    }

    struct ErrorBody: Decodable {
        struct Detail: Decodable {
            var code: String
            var message: String
        }
        var error: Detail
    }

    private func decode<T: Decodable>(_ type: T.Type, _ data: Data) throws(Failure) -> T {
        do {
            return try ServiceJSON.decoder.decode(T.self, from: data)
        } catch {
            throw Failure(status: 0, code: "invalidResponse", message: "the service's answer cannot be read: \(error)")
        }
    }
}

/// Splits a Server-Sent Events byte stream into events: `id:`, `event:` and `data:` lines,
/// ended by a blank line. Comments and `retry:` lines are skipped.
package struct EventStreamParser: Sendable {
    private var line: [UInt8] = []
    private var id: UInt64?
    private var kind = "message"
    private var data: [UInt8] = []
    private var hasData = false

    package init() {}

    package mutating func feed(_ bytes: some Sequence<UInt8>) -> [ServiceEvent] {
        var events: [ServiceEvent] = []
        if bytes.withContiguousStorageIfAvailable({ feed($0, into: &events) }) == nil {
            Array(bytes).withUnsafeBufferPointer { feed($0, into: &events) }
        }
        return events
    }

    /// Takes each whole line of `bytes` (the first one completing what an earlier call left
    /// over), keeping the unfinished last one for the next call.
    private mutating func feed(_ bytes: UnsafeBufferPointer<UInt8>, into events: inout [ServiceEvent]) {
        var start = bytes.startIndex
        while start != bytes.endIndex {
            guard let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                line.append(contentsOf: bytes[start...])
                return
            }
            if line.isEmpty {
                take(bytes[start..<newline], into: &events)
            } else {
                line.append(contentsOf: bytes[start..<newline])
                take(line[...], into: &events)
                line.removeAll(keepingCapacity: true)
            }
            start = newline + 1
        }
    }

    private mutating func take<Line: RandomAccessCollection<UInt8>>(_ whole: Line, into events: inout [ServiceEvent])
    where Line.SubSequence == Line {
        var line = whole
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        if line.isEmpty {
            if hasData { events.append(ServiceEvent(id: id, kind: kind, data: Data(data))) }
            id = nil
            kind = "message"
            data.removeAll(keepingCapacity: true)
            hasData = false
        } else if let value = Self.value(of: Self.eventField, in: line) {
            kind = String(decoding: value, as: UTF8.self)
        } else if let value = Self.value(of: Self.dataField, in: line) {
            if hasData { data.append(UInt8(ascii: "\n")) }
            data.append(contentsOf: value)
            hasData = true
        } else if let value = Self.value(of: Self.idField, in: line) {
            id = UInt64(String(decoding: value, as: UTF8.self))
        }
    }

    private static let eventField = Array("event".utf8)
    private static let dataField = Array("data".utf8)
    private static let idField = Array("id".utf8)

    /// The value of a `field: value` line (one space after the colon is not part of it).
    private static func value<Line: RandomAccessCollection<UInt8>>(of name: [UInt8], in line: Line) -> Line?
    where Line.SubSequence == Line {
        guard line.count > name.count, line.starts(with: name) else { return nil }
        var value = line.dropFirst(name.count)
        guard value.first == UInt8(ascii: ":") else { return nil }
        value = value.dropFirst()
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        return value
    }
}
