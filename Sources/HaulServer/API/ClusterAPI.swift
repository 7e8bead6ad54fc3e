import Foundation
import HaulPostgres
package import Hummingbird

/// The shared queue's part of the API, under `/api/v1/cluster`, with `haul serve --queue`:
/// every job and worker of the queue, whichever machine runs them.
///
/// - `GET /cluster`: the queue's numbers (``ClusterSummaryView``), as the `cluster` event
///   carries them.
/// - `GET /cluster/jobs?state=running,failed&q=TEXT&sort=created&order=asc&offset=0&limit=100`:
///   `{"total": N, "offset": O, "counts": {state: n…}, "jobs": [ClusterJobView…]}`, one page
///   read with LIMIT and OFFSET; `counts` are the whole queue's.
/// - `POST /cluster/jobs` with `{"jobs": [DownloadInput…]}`: validated all or nothing
///   (``ClusterBatch``), then queued in one transaction; 201 with `{"ids": […], "added": N}`
///   (a job whose ID is queued already is not added twice).
/// - `GET /cluster/jobs/{id}`; `PATCH /cluster/jobs/{id}` with `{"state": "paused"}` or
///   `{"state": "queued"}` (resume); `POST /cluster/jobs/{id}/retry`; `DELETE
///   /cluster/jobs/{id}` cancels (the row stays, as `cancelled`). A running job's worker is
///   asked, and acts within its poll interval. A job the change does not apply to (pausing
///   a completed one) is a 409.
/// - `GET /cluster/workers`: `{"workers": [ClusterWorkerView…]}`.
///
/// Without a queue every one of them is a 404 that says so. A database that cannot be
/// reached is a 503 (`queueUnavailable`) naming the queue (never its password).
@available(macOS 14, iOS 17, tvOS 17, *)
package struct ClusterAPI: Sendable {
    let core: ServiceCore

    package init(core: ServiceCore) {
        self.core = core
    }

    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.get("cluster") { _, _ in try await self.guarded { try await self.summary($0) } }
        group.get("cluster/jobs") { request, _ in try await self.guarded { try await self.list(request, $0) } }
        group.post("cluster/jobs") { request, _ in try await self.guarded { try await self.add(request, $0) } }
        group.get("cluster/jobs/{id}") { _, context in
            let key = try Self.key(context)
            return try await self.guarded { try ServiceJSON.response(try await self.view(key, $0)) }
        }
        group.patch("cluster/jobs/{id}") { request, context in
            let key = try Self.key(context)
            return try await self.guarded { try await self.change(key, request, $0) }
        }
        group.post("cluster/jobs/{id}/retry") { _, context in
            let key = try Self.key(context)
            return try await self.guarded { try await self.retry(key, $0) }
        }
        group.delete("cluster/jobs/{id}") { _, context in
            let key = try Self.key(context)
            return try await self.guarded { try await self.cancel(key, $0) }
        }
        group.get("cluster/workers") { _, _ in try await self.guarded { try await self.workers($0) } }
    }

    /// Runs `body` with the queue: a 404 without one; the database's failures, and no
    /// answer within ``ClusterCore/requestTimeout``, as a 503.
    func guarded(_ body: @escaping @Sendable (PostgresQueue) async throws -> Response) async throws -> Response {
        guard let queue = core.cluster?.queue else {
            throw APIError(
                .notFound, code: "notFound",
                message: "this service has no shared queue: start it with haul serve --queue postgres://… (or HAUL_QUEUE_URL)")
        }
        do {
            return try await ClusterCore.within(ClusterCore.requestTimeout) { try await body(queue) }
        } catch let error as APIError {
            throw error
        } catch {
            throw APIError(
                .serviceUnavailable, code: "queueUnavailable",
                message: "the shared queue at \(queue.address) cannot be used: \(PostgresQueue.reason(error))")
        }
    }

    // MARK: - Reading

    func summary(_ queue: PostgresQueue) async throws -> Response {
        try ServiceJSON.response(try await ClusterCore.summary(of: queue))
    }

    struct Page: Encodable {
        var total: Int
        var offset: Int
        var counts: [String: Int]
        var jobs: [ClusterJobView]
    }

    func list(_ request: Request, _ queue: PostgresQueue) async throws -> Response {
        let parameters = request.uri.queryParameters
        var query = QueueJobQuery()
        if let text = parameters["state"].map(String.init), !text.isEmpty {
            var states: Set<QueueJobState> = []
            for name in text.split(separator: ",") {
                guard let state = QueueJobState(rawValue: String(name)) else {
                    throw APIError.invalid(
                        "state", "'\(name)' is not one of \(QueueJobState.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                states.insert(state)
            }
            query.states = states
        }
        if let text = parameters["q"].map(String.init), !text.isEmpty {
            // PostgreSQL's text holds no NUL: such a search would be the database's error.
            guard !text.contains("\u{0}") else { throw APIError.invalid("q", "must not hold a NUL character") }
            query.text = text
        }
        let ordering = try DownloadsAPI.ordering(parameters, as: QueueJobQuery.Sort.self)
        if let sort = ordering.sort { query.sort = sort }
        if let descending = ordering.descending { query.descending = descending }
        query.offset = try DownloadsAPI.integer(
            parameters["offset"].map(String.init), name: "offset", default: 0, range: 0...Int(Int32.max))
        query.limit = try DownloadsAPI.integer(
            parameters["limit"].map(String.init), name: "limit", default: 100, range: 1...DownloadsAPI.maximumPage)
        let page = try await queue.page(query)
        return try ServiceJSON.response(
            Page(
                total: page.total, offset: query.offset,
                counts: Dictionary(uniqueKeysWithValues: page.counts.map { ($0.key.rawValue, $0.value) }),
                jobs: page.jobs.map(ClusterJobView.init)))
    }

    struct WorkerList: Encodable {
        var workers: [ClusterWorkerView]
    }

    func workers(_ queue: PostgresQueue) async throws -> Response {
        try ServiceJSON.response(WorkerList(workers: try await queue.workerStatuses().map(ClusterWorkerView.init)))
    }

    // MARK: - Changing

    struct AddBody: Decodable {
        var jobs: [DownloadInput]
    }

    struct Added: Encodable {
        var ids: [String]
        /// How many were new (the others were queued already).
        var added: Int
    }

    func add(_ request: Request, _ queue: PostgresQueue) async throws -> Response {
        let input = try await DownloadsAPI.decode(AddBody.self, from: request)
        let requests: [QueueRequest]
        do {
            requests = try ClusterBatch.requests(for: input.jobs)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        let added = try await queue.enqueue(requests)
        return try ServiceJSON.response(Added(ids: requests.map(\.id), added: added), status: .created)
    }

    struct ChangeBody: Decodable {
        var state: String
    }

    func change(_ key: String, _ request: Request, _ queue: PostgresQueue) async throws -> Response {
        let body = try await DownloadsAPI.decode(ChangeBody.self, from: request)
        let before = try await view(key, queue)
        let changed: Int
        switch body.state {
        case "paused": changed = try await queue.pause([key])
        case "queued", "available": changed = try await queue.resume([key])
        default: throw APIError.invalid("state", "'\(body.state)' is not paused or queued")
        }
        guard changed > 0 else { throw Self.conflict(before, "cannot be \(body.state == "paused" ? "paused" : "resumed")") }
        return try ServiceJSON.response(try await view(key, queue))
    }

    func retry(_ key: String, _ queue: PostgresQueue) async throws -> Response {
        let before = try await view(key, queue)
        // Never an empty list: retry([]) means every job.
        guard try await queue.retry([key]) > 0 else { throw Self.conflict(before, "has nothing to retry") }
        return try ServiceJSON.response(try await view(key, queue))
    }

    func cancel(_ key: String, _ queue: PostgresQueue) async throws -> Response {
        let before = try await view(key, queue)
        guard try await queue.cancel([key]) > 0 else { throw Self.conflict(before, "has ended: nothing to cancel") }
        return try ServiceJSON.response(try await view(key, queue))
    }

    // MARK: - Helpers

    /// The view of one job, or 404.
    func view(_ key: String, _ queue: PostgresQueue) async throws -> ClusterJobView {
        guard let details = try await queue.job(key) else { throw APIError.notFound("job \(key) in the shared queue") }
        return ClusterJobView(details)
    }

    static func conflict(_ job: ClusterJobView, _ what: String) -> APIError {
        APIError(.conflict, code: "conflict", message: "job \(job.id) is \(job.state): it \(what)")
    }

    /// The `{id}` of the path, percent-decoded (IDs are usually URLs). No job's ID holds a
    /// NUL (PostgreSQL's text cannot): one that does is a 404, not the database's error.
    static func key(_ context: some RequestContext) throws -> String {
        let raw = try context.parameters.require("id")
        let key = raw.removingPercentEncoding ?? raw
        guard !key.contains("\u{0}") else { throw APIError.notFound("job \(raw) in the shared queue") }
        return key
    }
}
