import Foundation
package import Haul
package import Hummingbird
import NIOCore
import NIOPosix

/// The downloads part of the API, under `/api/v1`:
///
/// - `POST /downloads` with `{"downloads": [DownloadInput…]}`: validated all or nothing
///   (``DownloadBatch``), then queued in the journal; 201 with `{"ids": […]}`.
/// - `GET /downloads?state=queued,running&offset=0&limit=100`: journal order (oldest
///   first); `{"total": N, "offset": O, "downloads": [JobSnapshot…]}`.
/// - `GET /downloads/{id}`: one ``JobSnapshot``, or 404.
/// - `GET /stats`: the manager's ``AggregateProgress``.
///
/// The journal is read on the I/O pool, never on an event loop or the concurrency pool.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct DownloadsAPI: Sendable {
    /// The largest request body accepted; larger ones get 413.
    package static let maximumBody = 1 << 20
    /// The most downloads one page lists.
    package static let maximumPage = 1_000

    let manager: DownloadManager
    let journal: Journal
    let batch: DownloadBatch

    package init(manager: DownloadManager, journal: Journal, batch: DownloadBatch) {
        self.manager = manager
        self.journal = journal
        self.batch = batch
    }

    /// Adds the routes to `group` (the `/api/v1` group).
    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.post("downloads") { request, context in try await self.add(request, context: context) }
        group.get("downloads") { request, context in try await self.list(request, context: context) }
        group.get("downloads/{id}") { request, context in try await self.one(request, context: context) }
        group.get("stats") { request, context in try await self.stats(request, context: context) }
    }

    // MARK: - Handlers

    struct AddBody: Decodable {
        var downloads: [DownloadInput]
    }

    struct Added: Encodable {
        var ids: [String]
    }

    func add(_ request: Request, context: some RequestContext) async throws -> Response {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: Self.maximumBody)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "tooLarge", message: "the body is over \(Self.maximumBody) bytes")
        }
        let input: AddBody
        do {
            input = try ServiceJSON.decoder.decode(AddBody.self, from: Data(buffer: body))
        } catch let error as DecodingError {
            throw APIError.invalid(Self.path(of: error), Self.reason(of: error))
        }
        let requests: [DownloadRequest]
        do {
            requests = try batch.requests(for: input.downloads)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        do {
            try await manager.enqueue(requests)
        } catch {
            throw APIError(.badRequest, code: error.code.description, message: error.message)
        }
        return try ServiceJSON.response(Added(ids: requests.map(\.id.rawValue)), status: .created)
    }

    struct Page: Encodable {
        var total: Int
        var offset: Int
        var downloads: [JobSnapshot]
    }

    func list(_ request: Request, context: some RequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        var states: Set<JobState>?
        if let text = query["state"].map(String.init), !text.isEmpty {
            var wanted: Set<JobState> = []
            for name in text.split(separator: ",") {
                guard let state = JobState(rawValue: String(name)) else {
                    throw APIError.invalid(
                        "state", "'\(name)' is not one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                wanted.insert(state)
            }
            states = wanted
        }
        let offset = try Self.integer(query["offset"].map(String.init), name: "offset", default: 0, range: 0...Int.max)
        let limit = try Self.integer(
            query["limit"].map(String.init), name: "limit", default: 100, range: 1...Self.maximumPage)
        await manager.flushJournal()
        let (journal, filter) = (self.journal, states)
        let jobs = try await Self.io { () throws(DownloadError) in try journal.jobs(in: filter) }
        let page = offset < jobs.count ? Array(jobs[offset..<min(jobs.count, offset + limit)]) : []
        return try ServiceJSON.response(Page(total: jobs.count, offset: offset, downloads: page))
    }

    func one(_ request: Request, context: some RequestContext) async throws -> Response {
        // IDs are usually URLs: a client sends them percent-encoded.
        let raw = try context.parameters.require("id")
        let id = DownloadID(raw.removingPercentEncoding ?? raw)
        await manager.flushJournal()
        let journal = self.journal
        guard let job = try await Self.io({ () throws(DownloadError) in try journal.job(id) }) else {
            throw APIError.notFound("download \(id.rawValue)")
        }
        return try ServiceJSON.response(job)
    }

    struct Stats: Encodable {
        var bytesPerSecond: Double
        var completedBytes: Int64
        var totalBytes: Int64?
        var queued: Int
        var running: Int
        var paused: Int
        var waiting: Int
        var completed: Int
        var failed: Int
    }

    func stats(_ request: Request, context: some RequestContext) async throws -> Response {
        let progress = await manager.progress
        return try ServiceJSON.response(
            Stats(
                bytesPerSecond: progress.bytesPerSecond, completedBytes: progress.completedBytes,
                totalBytes: progress.totalBytes, queued: progress.queued, running: progress.running,
                paused: progress.paused, waiting: progress.waiting, completed: progress.completed,
                failed: progress.failed))
    }

    // MARK: - Helpers

    static func integer(_ text: String?, name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw APIError.invalid(name, "'\(text)' is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    /// Runs a blocking journal call on the I/O pool.
    static func io<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T) async throws -> T {
        do {
            return try await NIOThreadPool.singleton.runIfActive { () throws -> T in try body() }
        } catch let error as DownloadError {
            throw APIError(.internalServerError, code: error.code.description, message: error.message)
        }
    }

    /// `downloads[1].url` for a decoding error's coding path.
    static func path(of error: DecodingError) -> String {
        let context: DecodingError.Context
        var key: (any CodingKey)?
        switch error {
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c): context = c
        case .keyNotFound(let missing, let c):
            context = c
            key = missing
        @unknown default: return "body"
        }
        var path = ""
        for component in context.codingPath + (key.map { [$0] } ?? []) {
            if let index = component.intValue {
                path += "[\(index)]"
            } else {
                path += path.isEmpty ? component.stringValue : ".\(component.stringValue)"
            }
        }
        return path.isEmpty ? "body" : path
    }

    static func reason(of error: DecodingError) -> String {
        switch error {
        case .keyNotFound: "is required"
        case .typeMismatch(let type, _): "must be \(type == String.self ? "a string" : "a \(type)")"
        case .valueNotFound: "must not be null"
        case .dataCorrupted: "is not valid JSON"
        @unknown default: "is not valid"
        }
    }
}
