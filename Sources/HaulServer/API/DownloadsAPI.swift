import Foundation
import Haul
package import Hummingbird
import NIOCore
import NIOPosix

/// The downloads part of the API, under `/api/v1`:
///
/// - `POST /downloads` with `{"downloads": [DownloadInput…]}`: validated all or nothing
///   (``DownloadBatch``), then queued in the journal; 201 with `{"ids": […]}`.
/// - `GET /downloads?state=queued,running&q=TEXT&sort=created&order=asc&offset=0&limit=100`:
///   `{"total": N, "offset": O, "downloads": [DownloadView…]}`, one page read from the
///   journal with LIMIT and OFFSET.
/// - `GET /downloads/{id}`, `PATCH /downloads/{id}` (`url` or `urls`: new addresses of
///   the same content, the download resuming from them; `priority`, `state`: `paused` or
///   `queued`), `POST /downloads/{id}/retry`, `DELETE /downloads/{id}?files=keep|delete`.
/// - `POST /downloads/bulk`: `{"action": "pause|resume|retry|cancel|remove", "ids": […]}` or
///   `"states": […]` instead of IDs, `"files"` for `remove`; `{"affected": N}`.
/// - `GET /stats`: speed, bytes and counts per state.
///
/// The journal is read on the I/O pool, never on an event loop or the concurrency pool.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct DownloadsAPI: Sendable {
    /// The largest request body accepted; larger ones get 413.
    package static let maximumBody = 1 << 20
    /// The most downloads one page lists.
    package static let maximumPage = 1_000

    let core: ServiceCore

    package init(core: ServiceCore) {
        self.core = core
    }

    var manager: DownloadManager { core.manager }
    var journal: Journal { core.journal }

    /// Adds the routes to `group` (the `/api/v1` group).
    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.post("downloads") { request, context in try await self.add(request, context: context) }
        group.get("downloads") { request, context in try await self.list(request, context: context) }
        group.post("downloads/bulk") { request, context in try await self.bulk(request, context: context) }
        group.get("downloads/{id}") { request, context in try await self.one(request, context: context) }
        group.patch("downloads/{id}") { request, context in try await self.change(request, context: context) }
        group.post("downloads/{id}/retry") { request, context in try await self.retry(request, context: context) }
        group.delete("downloads/{id}") { request, context in try await self.remove(request, context: context) }
        group.get("stats") { request, context in try await self.stats(request, context: context) }
    }

    // MARK: - Adding and listing

    struct AddBody: Decodable {
        var downloads: [DownloadInput]
        /// Add them paused: they wait until resumed.
        var paused: Bool?
    }

    struct Added: Encodable {
        var ids: [String]
    }

    func add(_ request: Request, context: some RequestContext) async throws -> Response {
        let input = try await Self.decode(AddBody.self, from: request)
        var requests: [DownloadRequest]
        do {
            requests = try core.batch.requests(for: input.downloads)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        for (index, download) in input.downloads.enumerated() where download.isDelta {
            requests[index] = try await delta(for: download, replacing: requests[index], field: "downloads[\(index)]")
        }
        let paused = input.paused ?? false
        let ids: [DownloadID]
        do {
            ids = try await core.add(requests, paused: paused)
        } catch let error as DownloadError {
            throw APIError(.badRequest, code: error.code.description, message: error.message)
        }
        return try ServiceJSON.response(Added(ids: ids.map(\.rawValue)), status: .created)
    }

    /// The delta download for `input`, checked as `placeholder` (a download of its control
    /// file into the directory it names): the control file fetched into memory with the
    /// download's headers and the service's network settings, the seeds checked against the
    /// roots. The file is named as given, else as the control file names its target.
    func delta(for input: DownloadInput, replacing placeholder: DownloadRequest, field: String) async throws
        -> DownloadRequest
    {
        let seeds: [URL]
        do {
            seeds = try core.batch.seeds(of: input, field: field)
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        guard case .directory(let directory, let name) = placeholder.destination else {
            throw APIError.invalid("\(field).directory", "a delta download builds its file here: give a local directory")
        }
        var fetch = DownloadRequest(
            url: placeholder.url, destination: .memory(limit: DeltaSource.controlFileLimit), headers: placeholder.headers)
        fetch.sensitiveHeaderNames = placeholder.sensitiveHeaderNames
        let delta: DeltaSource
        do throws(DownloadError) {
            let control = try await manager.download(fetch).result
            delta = try DeltaSource(controlFile: control.data ?? Data(), at: control.finalURL, seeds: seeds)
        } catch {
            throw APIError(
                .badRequest, code: error.code.description,
                message: "the zsync control file: \(error.message)", field: "\(field).url")
        }
        var request = DownloadRequest(
            delta: delta, destination: .directory(directory, name: name ?? delta.suggestedFileName),
            priority: placeholder.priority, headers: placeholder.headers)
        request.sensitiveHeaderNames = placeholder.sensitiveHeaderNames
        request.maxBytesPerSecond = placeholder.maxBytesPerSecond
        request.connections = placeholder.connections
        return request
    }

    struct Page: Encodable {
        var total: Int
        var offset: Int
        var downloads: [DownloadView]
    }

    func list(_ request: Request, context: some RequestContext) async throws -> Response {
        let parameters = request.uri.queryParameters
        var query = JobQuery()
        if let text = parameters["state"].map(String.init), !text.isEmpty {
            query.states = try Self.states(text, field: "state")
        }
        query.text = parameters["q"].map(String.init)
        let ordering = try Self.ordering(parameters, as: JobQuery.Sort.self)
        if let sort = ordering.sort { query.sort = sort }
        if let descending = ordering.descending { query.descending = descending }
        query.offset = try Self.integer(parameters["offset"].map(String.init), name: "offset", default: 0, range: 0...Int.max)
        query.limit = try Self.integer(
            parameters["limit"].map(String.init), name: "limit", default: 100, range: 1...Self.maximumPage)
        await manager.flushJournal()
        let (journal, wanted) = (self.journal, query)
        let (total, jobs) = try await io { () throws(DownloadError) in try journal.page(wanted) }
        let live = await manager.liveStatus(of: jobs.map(\.id))
        return try ServiceJSON.response(
            Page(total: total, offset: query.offset, downloads: jobs.map { DownloadView($0, live: live[$0.id]) }))
    }

    func one(_ request: Request, context: some RequestContext) async throws -> Response {
        try ServiceJSON.response(try await view(self.id(context)))
    }

    // MARK: - Changing

    struct ChangeBody: Decodable {
        var priority: String?
        var state: String?
        /// The download's own speed limit in bytes per second; 0 for none.
        var maxBytesPerSecond: Int?
        /// A new address of the same content, in place of the URL (a fresh signed URL).
        var url: String?
        /// The content's addresses: the first in place of the URL, the others its mirrors.
        var urls: [String]?
    }

    /// An address a client gave: `http` or `https`, with a host and no user info.
    static func address(_ text: String, field: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = url.host, !host.isEmpty
        else { throw APIError.invalid(field, "'\(text)' is not an http or https URL") }
        guard url.user == nil, url.password == nil else {
            throw APIError.invalid(field, "an address must not hold user info: give credentials in headers")
        }
        return url
    }

    func change(_ request: Request, context: some RequestContext) async throws -> Response {
        let id = try await self.id(context)
        let body = try await Self.decode(ChangeBody.self, from: request)
        var actions: [ServiceAction] = []
        if let word = body.priority {
            guard let priority = DownloadBatch.priorities[word] else {
                throw APIError.invalid(
                    "priority", "'\(word)' is not one of \(DownloadBatch.priorities.keys.sorted().joined(separator: ", "))")
            }
            actions.append(.priority(priority))
        }
        if let state = body.state {
            switch state {
            case "paused": actions.append(.pause)
            case "queued", "running": actions.append(.resume)
            default: throw APIError.invalid("state", "'\(state)' is not paused or queued")
            }
        }
        var sources: ServiceAction?
        if let urls = body.urls {
            guard body.url == nil else { throw APIError.invalid("urls", "give url or urls, not both") }
            guard !urls.isEmpty, urls.count <= 64 else { throw APIError.invalid("urls", "give 1 to 64 addresses") }
            let addresses = try urls.enumerated().map { try Self.address($1, field: "urls[\($0)]") }
            sources = .sources(first: addresses[0], mirrors: Array(addresses.dropFirst()))
        } else if let url = body.url {
            sources = .sources(first: try Self.address(url, field: "url"), mirrors: nil)
        }
        if let rate = body.maxBytesPerSecond, !(0...SettingsAPI.maximumRate).contains(rate) {
            throw APIError.invalid(
                "maxBytesPerSecond", "must be a number of bytes per second in 0...\(SettingsAPI.maximumRate) (0: no limit)")
        }
        _ = try await view(id)
        if let sources {
            let changed = try await Self.mapped { () async throws(DownloadError) in
                try await manager.apply(sources, to: [id])
            }
            guard !changed.isEmpty else {
                throw APIError(
                    .conflict, code: "finished",
                    message: "\(id.rawValue) has completed or is run by another process: its addresses cannot change")
            }
        }
        if let rate = body.maxBytesPerSecond {
            let changed = try await Self.mapped { () async throws(DownloadError) in
                try await manager.apply(.rateLimit(rate == 0 ? nil : rate), to: [id])
            }
            guard !changed.isEmpty else {
                throw APIError(
                    .conflict, code: "finished",
                    message: "\(id.rawValue) has ended: a speed limit is set on a download that has not")
            }
        }
        let views = try await core.announce { [actions] in
            var state: JobState?
            for action in actions {
                let changed = try await Self.mapped { () async throws(DownloadError) in try await manager.apply(action, to: [id]) }
                if !changed.isEmpty, let announced = action.announcedState { state = announced }
            }
            return ([id], state)
        }.views
        guard let view = views.first else { throw APIError.notFound("download \(id.rawValue)") }
        return try ServiceJSON.response(view)
    }

    func retry(_ request: Request, context: some RequestContext) async throws -> Response {
        let id = try await self.id(context)
        let before = try await view(id)
        let views = try await core.announce {
            let changed = try await Self.mapped { () async throws(DownloadError) in try await manager.apply(.retry, to: [id]) }
            guard !changed.isEmpty else {
                throw APIError(
                    .conflict, code: "conflict", message: "download \(id.rawValue) is \(before.state.rawValue): nothing to retry")
            }
            return (changed, ServiceAction.retry.announcedState)
        }.views
        guard let view = views.first else { throw APIError.notFound("download \(id.rawValue)") }
        return try ServiceJSON.response(view)
    }

    func remove(_ request: Request, context: some RequestContext) async throws -> Response {
        let id = try await self.id(context)
        let deleting = try Self.files(request.uri.queryParameters["files"].map(String.init), field: "files")
        _ = try await view(id)
        let removed = try await Self.mapped { () async throws(DownloadError) in try await manager.remove([id], deletingFiles: deleting) }
        guard !removed.isEmpty else {
            throw APIError(.conflict, code: "conflict", message: "download \(id.rawValue) is run by another process")
        }
        await core.hub.publishRemoved(removed)
        return Response(status: .noContent)
    }

    struct BulkBody: Decodable {
        var action: String
        var ids: [String]?
        var states: [String]?
        var files: String?
    }

    struct Affected: Encodable {
        var affected: Int
    }

    func bulk(_ request: Request, context: some RequestContext) async throws -> Response {
        let body = try await Self.decode(BulkBody.self, from: request)
        let ids: [DownloadID]
        switch (body.ids, body.states) {
        case (let given?, nil):
            ids = try await named(given, field: "ids")
        case (nil, let names?):
            let states = try Self.states(names.joined(separator: ","), field: "states")
            let journal = self.journal
            await manager.flushJournal()
            ids = try await io { () throws(DownloadError) in try journal.ids(in: states) }
        default:
            throw APIError.invalid("ids", "give either ids or states")
        }
        let action: ServiceAction
        switch body.action {
        case "pause": action = .pause
        case "resume": action = .resume
        case "retry": action = .retry
        case "cancel": action = .cancel
        case "remove":
            let deleting = try Self.files(body.files, field: "files")
            let changed = try await Self.mapped { () async throws(DownloadError) in
                try await manager.remove(ids, deletingFiles: deleting)
            }
            await core.hub.publishRemoved(changed)
            return try ServiceJSON.response(Affected(affected: changed.count))
        default:
            throw APIError.invalid("action", "'\(body.action)' is not one of pause, resume, retry, cancel, remove")
        }
        let changed = try await core.announce {
            let changed = try await Self.mapped { () async throws(DownloadError) in try await manager.apply(action, to: ids) }
            return (changed, action.announcedState)
        }.changed
        return try ServiceJSON.response(Affected(affected: changed.count))
    }

    func stats(_ request: Request, context: some RequestContext) async throws -> Response {
        try ServiceJSON.response(try await EventHub.stats(manager: manager, journal: journal))
    }

    // MARK: - Helpers

    /// The view of one download, or 404.
    func view(_ id: DownloadID) async throws -> DownloadView {
        guard let view = try await core.views([id]).first else { throw APIError.notFound("download \(id.rawValue)") }
        return view
    }

    /// The download the `{id}` of the path names. IDs are usually URLs: a client sends
    /// them percent-encoded. See ``named(_:field:)``.
    func id(_ context: some RequestContext) async throws -> DownloadID {
        let raw = try context.parameters.require("id")
        return try await named([raw.removingPercentEncoding ?? raw], field: "id")[0]
    }

    /// The downloads `texts` name: each an ID, or a URL where it names one download (the
    /// same URL to several places is several downloads, see ``JobIdentity``); a text
    /// that names none stays as given (the caller says it is not found). A URL that names
    /// several, none by its ID, is a 400 on `field` that lists them.
    func named(_ texts: [String], field: String) async throws -> [DownloadID] {
        let journal = self.journal
        await manager.flushJournal()
        do {
            return try await ServiceCore.io(on: manager.threadPool) { () throws(DownloadError) in
                try texts.map { text throws(DownloadError) in try journal.job(named: text) ?? DownloadID(text) }
            }
        } catch let error as DownloadError {
            guard error.code == .invalidRequest else {
                throw APIError(.internalServerError, code: error.code.description, message: error.message)
            }
            throw APIError.invalid(field, error.message)
        }
    }

    /// A request body of at most ``maximumBody`` bytes, decoded; a bad field is a 400
    /// naming it.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: maximumBody)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "tooLarge", message: "the body is over \(maximumBody) bytes")
        }
        do {
            return try ServiceJSON.decoder.decode(T.self, from: Data(buffer: body))
        } catch let error as DecodingError {
            throw APIError.invalid(path(of: error), reason(of: error))
        }
    }

    static func states(_ text: String, field: String) throws -> Set<JobState> {
        var wanted: Set<JobState> = []
        for name in text.split(separator: ",") {
            guard let state = JobState(rawValue: String(name)) else {
                throw APIError.invalid(
                    field, "'\(name)' is not one of \(JobState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            wanted.insert(state)
        }
        return wanted
    }

    /// `files=keep` (the default) or `files=delete`.
    static func files(_ text: String?, field: String) throws -> Bool {
        switch text {
        case nil, "keep": false
        case "delete": true
        case let other?: throw APIError.invalid(field, "'\(other)' is not keep or delete")
        }
    }

    /// Runs a manager call, its ``DownloadError`` as a 500 that says what happened.
    static func mapped<T>(_ body: () async throws(DownloadError) -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw APIError(.internalServerError, code: error.code.description, message: error.message)
        }
    }

    /// The `sort` and `order` query parameters: one of `Sort`'s names (if given), and
    /// whether `order` is `desc` (`asc` or absent: false).
    static func ordering<Sort: RawRepresentable & CaseIterable>(
        _ parameters: Parameters, as _: Sort.Type
    ) throws -> (sort: Sort?, descending: Bool?) where Sort.RawValue == String {
        var sort: Sort?
        if let text = parameters["sort"].map(String.init) {
            guard let named = Sort(rawValue: text) else {
                throw APIError.invalid(
                    "sort", "'\(text)' is not one of \(Sort.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            sort = named
        }
        var descending: Bool?
        if let order = parameters["order"].map(String.init) {
            guard order == "asc" || order == "desc" else { throw APIError.invalid("order", "'\(order)' is not asc or desc") }
            descending = order == "desc"
        }
        return (sort, descending)
    }

    static func integer(_ text: String?, name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw APIError.invalid(name, "'\(text)' is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    /// Runs a blocking journal call on the manager's I/O pool.
    func io<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T) async throws -> T {
        do {
            return try await ServiceCore.io(on: manager.threadPool, body)
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
