import Foundation
import Haul

/// aria2's JSON-RPC methods over the service's manager and journal: what `/jsonrpc`
/// answers over HTTP and WebSocket.
///
/// Every method acts through the operations Haul's own API uses (``DownloadBatch`` to check
/// an added download, ``DownloadManager/apply(_:to:)`` to pause, resume, cancel, reprioritise
/// and limit, ``DownloadManager/remove(_:deletingFiles:)``, the settings' setters), so the
/// two protocols cannot disagree. The actor owns what aria2 has and Haul does not: the GID
/// index, options given through RPC, and the mirrors of each download.
package actor Aria2RPC {
    /// The aria2 version whose RPC interface this follows, reported by `getVersion`.
    package static let version = "1.36.0"

    package static let methods = [
        "aria2.addUri", "aria2.addTorrent", "aria2.getPeers", "aria2.addMetalink", "aria2.remove", "aria2.pause",
        "aria2.forcePause", "aria2.pauseAll", "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll",
        "aria2.forceRemove", "aria2.changePosition", "aria2.changeUri", "aria2.tellStatus", "aria2.getUris", "aria2.getFiles",
        "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.getOption",
        "aria2.changeOption", "aria2.getGlobalOption", "aria2.changeGlobalOption", "aria2.purgeDownloadResult",
        "aria2.removeDownloadResult", "aria2.getVersion", "aria2.getSessionInfo", "aria2.shutdown",
        "aria2.forceShutdown", "aria2.getGlobalStat", "aria2.saveSession", "system.multicall", "system.listMethods",
        "system.listNotifications",
    ]

    let core: ServiceCore
    let rules: AccessRulesBox
    package let notifier: Aria2Notifier
    private let shutdown: @Sendable () async -> Void
    private var index = Aria2GIDIndex()
    /// Global options set through RPC (the live ones are read from the service each time).
    private var global = Aria2Options()
    /// Options each download was added or changed with through RPC.
    private var options: [DownloadID: Aria2Options] = [:]
    /// Every URI a download was added with (the first is the one Haul fetches).
    private var mirrors: [DownloadID: [String]] = [:]
    private let sessionID: String

    /// - Parameter shutdown: Stops the service gracefully (`aria2.shutdown`).
    package init(core: ServiceCore, rules: AccessRulesBox, shutdown: @escaping @Sendable () async -> Void = {}) {
        self.core = core
        self.rules = rules
        self.shutdown = shutdown
        notifier = Aria2Notifier()
        var generator = SystemRandomNumberGenerator()
        sessionID = (0..<20).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }.joined()
        notifier.start(following: core.manager)
    }

    var manager: DownloadManager { core.manager }

    // MARK: - Bodies and calls

    /// Answers a request body: the JSON text to send and the HTTP status aria2 would send.
    package func respond(to body: some Collection<UInt8>) async -> (status: Int, json: String) {
        switch Aria2Envelope.parse(body) {
        case .single(let entry):
            let reply = await answer(entry)
            return (reply.httpStatus, reply.value.json)
        case .batch(let entries):
            var replies: [JSONValue] = []
            for entry in entries { replies.append(await answer(entry).value) }
            return (200, JSONValue.array(replies).json)
        }
    }

    func answer(_ entry: Aria2Envelope.Entry) async -> Aria2Reply {
        switch entry {
        case .failure(let reply): return reply
        case .success(let request):
            return Aria2Reply(id: request.id, outcome: await call(request.method, request.params))
        }
    }

    /// Runs one method with its parameters (the token first, for the methods that need it).
    package func call(_ method: String, _ params: [JSONValue], nested: Bool = false) async -> Result<JSONValue, Aria2Error> {
        switch method {
        case "system.listMethods": return .success(.array(Self.methods.map { .string($0) }))
        case "system.listNotifications":
            return .success(.array(Aria2Notification.Kind.allCases.map { .string($0.rawValue) }))
        case "system.multicall":
            guard !nested else { return .failure(Aria2Error("Recursive system.multicall forbidden.")) }
            return await multicall(params)
        default: break
        }
        guard Self.methods.contains(method) else { return .failure(.noSuchMethod(method)) }
        guard case .string(let first)? = params.first, first.hasPrefix("token:"),
            AccessRules.constantTimeEquals(String(first.dropFirst(6)), rules.rules.token)
        else { return .failure(.unauthorized) }
        do {
            return .success(try await run(method, Array(params.dropFirst())))
        } catch {
            return .failure(error)
        }
    }

    private func multicall(_ params: [JSONValue]) async -> Result<JSONValue, Aria2Error> {
        guard let first = params.first else { return .failure(.missing(0)) }
        guard case .array(let calls) = first else { return .failure(.wrongType(0)) }
        var results: [JSONValue] = []
        for call in calls {
            guard case .object(let members) = call, case .string(let name)? = members["methodName"] else {
                results.append(Aria2Error("Missing methodName.").value)
                continue
            }
            let params: [JSONValue]
            switch members["params"] {
            case nil: params = []
            case .array(let given)?: params = given
            default:
                results.append(Aria2Error("Missing params.").value)
                continue
            }
            switch await self.call(name, params, nested: true) {
            case .success(let result): results.append([result])
            case .failure(let error): results.append(error.value)
            }
        }
        return .success(.array(results))
    }

    private func run(_ method: String, _ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        switch method {
        case "aria2.addUri": return try await addUri(p)
        case "aria2.addMetalink": return try await addMetalink(p)
        case "aria2.addTorrent":
            throw Aria2Error("Haul downloads over HTTP and HTTPS only: \(method) (BitTorrent) is not supported")
        case "aria2.getPeers": throw Aria2Error("Haul downloads over HTTP and HTTPS only: aria2.getPeers has no peers to list")
        case "aria2.remove", "aria2.forceRemove": return try await remove(p)
        case "aria2.pause", "aria2.forcePause": return try await pause(p)
        case "aria2.pauseAll", "aria2.forcePauseAll":
            try await applyAll(.pause, states: [.queued, .running, .waiting])
            return "OK"
        case "aria2.unpause": return try await unpause(p)
        case "aria2.unpauseAll":
            try await applyAll(.resume, states: [.paused])
            return "OK"
        case "aria2.tellStatus":
            let (id, view) = try await download(p, 0)
            return Aria2Fields.status(view, uris: uris(id, view), keys: try Self.keys(p, 1))
        case "aria2.getUris":
            let (id, view) = try await download(p, 0)
            return Aria2Fields.uris(view, uris: uris(id, view))
        case "aria2.changeUri": return try await changeUri(p)
        case "aria2.getFiles":
            let (id, view) = try await download(p, 0)
            return Aria2Fields.files(view, uris: uris(id, view))
        case "aria2.getServers":
            let (_, view) = try await download(p, 0)
            guard Aria2Status(view.state) == .active else {
                throw Aria2Error("No active download for GID#\(Aria2GID(id(view)).hex)")
            }
            return Aria2Fields.servers(view)
        case "aria2.tellActive": return try await tellActive(p)
        case "aria2.tellWaiting": return try await list(p, states: [.queued, .waiting, .paused], sort: .priority)
        case "aria2.tellStopped": return try await list(p, states: [.completed, .failed, .cancelled], sort: .created)
        case "aria2.changePosition": return try await changePosition(p)
        case "aria2.changeOption": return try await changeOption(p)
        case "aria2.getOption":
            let (id, view) = try await download(p, 0)
            return await optionsOf(id, view).value
        case "aria2.changeGlobalOption": return try await changeGlobalOption(p)
        case "aria2.getGlobalOption": return await globalOptions().value
        case "aria2.getGlobalStat": return try await globalStat()
        case "aria2.purgeDownloadResult":
            let ids = try await io { (journal: Journal) throws(DownloadError) in try journal.ids(in: [.completed, .failed, .cancelled]) }
            try await removeResults(ids)
            return "OK"
        case "aria2.removeDownloadResult":
            let (id, view) = try await download(p, 0)
            guard Aria2Status(view.state).isStopped else {
                throw Aria2Error("Could not remove download result of GID#\(Aria2GID(id).hex)")
            }
            try await removeResults([id])
            return "OK"
        case "aria2.getVersion":
            return ["version": .string(Self.version), "enabledFeatures": ["HTTPS", "Message Digest"]]
        case "aria2.getSessionInfo": return ["sessionId": .string(sessionID)]
        case "aria2.saveSession":
            // The journal is Haul's session, written as downloads change.
            await manager.flushJournal()
            return "OK"
        case "aria2.shutdown", "aria2.forceShutdown":
            let shutdown = self.shutdown
            Task { await shutdown() }
            return "OK"
        default: throw .noSuchMethod(method)
        }
    }

    // MARK: - Adding

    private func addUri(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        guard let first = p.first else { throw .missing(0) }
        guard case .array(let items) = first, items.allSatisfy({ $0.stringValue != nil }) else { throw .wrongType(0) }
        let uris = items.compactMap(\.stringValue)
        guard let uri = uris.first else { throw Aria2Error("No URI to download.") }
        let given = try Self.options(p, 1)
        var position: Int?
        if p.count > 2 {
            guard let number = p[2].integerValue else { throw .wrongType(2) }
            position = Int(number)
        }
        var headers: [String: String] = [:]
        if case .array(let lines)? = given.values["header"] {
            for line in lines.compactMap(\.stringValue) {
                if let header = Aria2Options.header(line) { headers[header.name] = header.value }
            }
        }
        let limit = (given["max-download-limit"] ?? global["max-download-limit"]).flatMap(Int.init) ?? 0
        // split: this download's connections, as haul get -x (a per-host cap set lower,
        // max-connection-per-server, clamps them when the download starts).
        let input = DownloadInput(
            url: uri, directory: given["dir"], name: given["out"], checksum: given["checksum"],
            headers: headers.isEmpty ? nil : headers, maxBytesPerSecond: limit > 0 ? limit : nil,
            connections: given["split"].flatMap(Int.init), mirrors: uris.count > 1 ? Array(uris.dropFirst()) : nil)
        let requests: [DownloadRequest]
        do {
            requests = try core.batch.requests(for: [input], field: "uris")
        } catch {
            throw Aria2Error(error.message)
        }
        // Added paused, it never starts (aria2 notifies nothing for it).
        let paused = given["pause"] == "true"
        let ids: [DownloadID]
        do {
            ids = try await core.add(requests, paused: paused)
        } catch let error as DownloadError {
            throw Aria2Error(error.message)
        } catch {
            throw Aria2Error("cannot read the journal")
        }
        let id = ids.first ?? requests[0].id
        let gid = index.insert(id)
        mirrors[id] = uris
        if !given.values.isEmpty { options[id] = given }
        if let position { _ = try await move(id, to: position, origin: .set) }
        return .string(gid.hex)
    }

    /// `aria2.addMetalink(metalink, options, position)`: every file of a Metalink 4
    /// document (base64), with its mirrors, size, digest and piece digests; answers their
    /// GIDs. A file's folders are made below `dir`, inside the download roots.
    private func addMetalink(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        guard let first = p.first else { throw .missing(0) }
        guard let text = first.stringValue, let data = Data(base64Encoded: text, options: .ignoreUnknownCharacters)
        else { throw .wrongType(0) }
        let given = try Self.options(p, 1)
        var position: Int?
        if p.count > 2 {
            guard let number = p[2].integerValue else { throw .wrongType(2) }
            position = Int(number)
        }
        let metalink: Metalink
        do throws(DownloadError) {
            metalink = try Metalink.parse(data)
        } catch {
            throw Aria2Error(error.message)
        }
        var headers: [String: String] = [:]
        if case .array(let lines)? = given.values["header"] {
            for line in lines.compactMap(\.stringValue) {
                if let header = Aria2Options.header(line) { headers[header.name] = header.value }
            }
        }
        let limit = (given["max-download-limit"] ?? global["max-download-limit"]).flatMap(Int.init) ?? 0
        var inputs: [DownloadInput] = []
        var uris: [[String]] = []
        for file in metalink.files {
            let urls = file.preferredSources(location: given["metalink-location"]).map(\.url.absoluteString)
            let (directory, name) = try folders(for: file.name, below: given["dir"])
            let checksum = file.strongestHash
            inputs.append(
                DownloadInput(
                    url: urls[0], directory: directory, name: name, checksum: checksum?.description,
                    expectedSize: file.size, headers: headers.isEmpty ? nil : headers,
                    maxBytesPerSecond: limit > 0 ? limit : nil, connections: given["split"].flatMap(Int.init),
                    mirrors: urls.count > 1 ? Array(urls.dropFirst()) : nil,
                    pieces: file.pieces.map {
                        DownloadInput.Pieces(algorithm: $0.algorithm.rawValue, length: $0.length, hashes: $0.hashes)
                    }))
            uris.append(urls)
        }
        let requests: [DownloadRequest]
        do {
            requests = try core.batch.requests(for: inputs, field: "metalink")
        } catch {
            throw Aria2Error(error.message)
        }
        let ids: [DownloadID]
        do {
            ids = try await core.add(requests, paused: given["pause"] == "true")
        } catch let error as DownloadError {
            throw Aria2Error(error.message)
        } catch {
            throw Aria2Error("cannot read the journal")
        }
        var gids: [JSONValue] = []
        for (id, urls) in zip(ids.count == requests.count ? ids : requests.map(\.id), uris) {
            let gid = index.insert(id)
            mirrors[id] = urls
            if !given.values.isEmpty { options[id] = given }
            gids.append(.string(gid.hex))
        }
        if let position, let first = ids.first { _ = try await move(first, to: position, origin: .set) }
        return .array(gids)
    }

    /// The directory (inside the roots) and file name for a Metalink file's `name`, which
    /// may hold folders: they are made below `base` (the download's `dir`), one at a time,
    /// never through a symbolic link, so nothing is made outside the roots.
    private func folders(for name: String, below base: String?) throws(Aria2Error) -> (String?, String) {
        var components = name.split(separator: "/").map(String.init)
        let file = components.removeLast()
        guard !components.isEmpty else { return (base, file) }
        var path: String
        do {
            path = try core.batch.directory(base, field: "dir")
        } catch {
            throw Aria2Error(error.message)
        }
        for component in components {
            path += "/" + component
            var info = stat()
            if lstat(path, &info) != 0 {
                guard errno == ENOENT, mkdir(path, 0o755) == 0 || errno == EEXIST else {
                    throw Aria2Error("cannot make the folder \(name): \(String(cString: strerror(errno)))")
                }
            } else if (info.st_mode & S_IFMT) != S_IFDIR {
                throw Aria2Error("\(name): a folder on its way is not a folder (or is a symbolic link)")
            }
        }
        return (path, file)
    }

    /// `aria2.changeUri(gid, fileIndex, delUris, addUris[, position])`: removes `delUris`
    /// from the download's URIs (each once), then inserts `addUris` at `position` (at the
    /// end without one); answers `[deleted, added]`. The first URI is where the content is
    /// fetched from, the others its mirrors: a running download goes on from them where it
    /// stood (a fresh signed URL in place of an expired one, say).
    private func changeUri(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, view) = try await download(p, 0)
        guard p.count > 3 else { throw .missing(p.count) }
        guard p[1].integerValue == 1 else { throw Aria2Error("fileIndex must be 1: a Haul download has one file") }
        guard case .array(let removing) = p[2], removing.allSatisfy({ $0.stringValue != nil }) else { throw .wrongType(2) }
        guard case .array(let adding) = p[3], adding.allSatisfy({ $0.stringValue != nil }) else { throw .wrongType(3) }
        var position: Int?
        if p.count > 4 {
            guard let number = p[4].integerValue, number >= 0 else { throw .wrongType(4) }
            position = Int(number)
        }
        var list = uris(id, view)
        var deleted = 0
        for uri in removing.compactMap(\.stringValue) {
            if let index = list.firstIndex(of: uri) {
                list.remove(at: index)
                deleted += 1
            }
        }
        var added: [String] = []
        for uri in adding.compactMap(\.stringValue) {
            guard let url = URL(string: uri), url.isMirrorAddress else { throw Aria2Error("'\(uri)' is not an http or https URI (without user info)") }
            added.append(uri)
        }
        list.insert(contentsOf: added, at: min(position ?? list.count, list.count))
        guard let first = list.first.flatMap(URL.init(string:)) else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) would have no URI left")
        }
        guard deleted > 0 || !added.isEmpty else { return [.int(0), .int(0)] }
        let rest = list.dropFirst().compactMap(URL.init(string:))
        guard !(try await apply(.sources(first: first, mirrors: rest), to: [id])).isEmpty else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) has ended: its URIs cannot change")
        }
        mirrors[id] = list
        return [.int(Int64(deleted)), .int(Int64(added.count))]
    }

    // MARK: - Stopping

    private func remove(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, view) = try await download(p, 0)
        guard view.state.isUnfinished, !(try await apply(.cancel, to: [id])).isEmpty else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) cannot be removed now")
        }
        return .string(Aria2GID(id).hex)
    }

    private func pause(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, view) = try await download(p, 0)
        let status = Aria2Status(view.state)
        guard status == .active || status == .waiting, !(try await apply(.pause, to: [id])).isEmpty else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) cannot be paused now")
        }
        return .string(Aria2GID(id).hex)
    }

    private func unpause(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, view) = try await download(p, 0)
        guard view.state == .paused, !(try await apply(.resume, to: [id])).isEmpty else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) cannot be unpaused now")
        }
        return .string(Aria2GID(id).hex)
    }

    private func applyAll(_ action: ServiceAction, states: Set<JobState>) async throws(Aria2Error)
    {
        await manager.flushJournal()
        let ids = try await io { (journal: Journal) throws(DownloadError) in try journal.ids(in: states) }
        _ = try await apply(action, to: ids)
    }

    /// Applies `action` through the manager and tells the dashboard. (aria2's notifications
    /// come from the manager's events: a download that changed only in the journal was
    /// waiting, and aria2 pauses or removes a waiting download without a notification.)
    private func apply(_ action: ServiceAction, to ids: [DownloadID]) async throws(Aria2Error) -> [DownloadID] {
        guard !ids.isEmpty else { return [] }
        let manager = self.manager
        do {
            return try await core.announce {
                (try await manager.apply(action, to: ids), action.announcedState)
            }.changed
        } catch let error as DownloadError {
            throw Aria2Error(error.message)
        } catch {
            throw Aria2Error("cannot read the journal")
        }
    }

    private func removeResults(_ ids: [DownloadID]) async throws(Aria2Error) {
        guard !ids.isEmpty else { return }
        let removed: [DownloadID]
        do {
            removed = try await manager.remove(ids, deletingFiles: false)
        } catch {
            throw Aria2Error(error.message)
        }
        for id in removed {
            index.remove(id)
            options[id] = nil
            mirrors[id] = nil
        }
        await core.hub.publishRemoved(removed)
    }

    // MARK: - Lists

    private func tellActive(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let keys = try Self.keys(p, 0)
        await manager.flushJournal()
        let ids = try await io { (journal: Journal) throws(DownloadError) in try journal.ids(in: [.running, .queued]) }
        let live = await manager.liveStatus(of: ids)
        let active = ids.filter { live[$0]?.state == .running }
        let views = try await views(active)
        return .array(views.map { view in Aria2Fields.status(view, uris: uris(id(view), view), keys: keys) })
    }

    private func list(_ p: [JSONValue], states: Set<JobState>, sort: JobQuery.Sort) async throws(Aria2Error) -> JSONValue {
        guard p.count > 0 else { throw .missing(0) }
        guard let offset = p[0].integerValue else { throw .wrongType(0) }
        guard p.count > 1 else { throw .missing(1) }
        guard let num = p[1].integerValue else { throw .wrongType(1) }
        let keys = try Self.keys(p, 2)
        await manager.flushJournal()
        let descending = sort == .priority
        let total = try await io { (journal: Journal) throws(DownloadError) in
            try journal.page(JobQuery(states: states, sort: sort, descending: descending, limit: 1)).total
        }
        let window = Aria2Window(offset: Int(clamping: offset), num: Int(clamping: num), total: total)
        guard window.count > 0 else { return [] }
        let (_, rows) = try await io { (journal: Journal) throws(DownloadError) in
            try journal.page(
                JobQuery(states: states, sort: sort, descending: descending, offset: window.start, limit: window.count))
        }
        let live = await manager.liveStatus(of: rows.map(\.id))
        var views = rows.map { DownloadView($0, live: live[$0.id]) }
        if window.reversed { views.reverse() }
        for view in views { index.insert(id(view)) }
        return .array(views.map { view in Aria2Fields.status(view, uris: uris(id(view), view), keys: keys) })
    }

    // MARK: - Queue and options

    private func changePosition(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, _) = try await download(p, 0)
        guard p.count > 1 else { throw .missing(1) }
        guard let pos = p[1].integerValue else { throw .wrongType(1) }
        guard p.count > 2 else { throw .missing(2) }
        guard let text = p[2].stringValue else { throw .wrongType(2) }
        guard let origin = Aria2PositionOrigin(rawValue: text) else { throw Aria2Error("Illegal argument.") }
        return .int(Int64(try await move(id, to: Int(clamping: pos), origin: origin)))
    }

    /// The waiting downloads in queue order (at most the first 10,000).
    private func queue() async throws(Aria2Error) -> [JobSnapshot] {
        await manager.flushJournal()
        return try await io { (journal: Journal) throws(DownloadError) in
            try journal.page(
                JobQuery(states: [.queued, .waiting, .paused], sort: .priority, descending: true, limit: 10_000)
            ).jobs
        }
    }

    /// Moves `id` in the waiting queue; returns where it stands afterwards.
    private func move(_ id: DownloadID, to pos: Int, origin: Aria2PositionOrigin) async throws(Aria2Error) -> Int {
        let queue = try await queue()
        guard let current = queue.firstIndex(where: { $0.id == id }) else {
            throw Aria2Error("GID#\(Aria2GID(id).hex) not found in the waiting queue.")
        }
        let priorities = queue.map { DownloadPriority(rawValue: $0.priority) ?? .normal }
        let target = origin.target(pos: pos, current: current, count: queue.count)
        let priority = Aria2QueueMove.priority(queue: priorities, current: current, target: target)
        if priority != priorities[current] { _ = try await apply(.priority(priority), to: [id]) }
        return try await self.queue().firstIndex { $0.id == id } ?? current
    }

    private func changeOption(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        let (id, view) = try await download(p, 0)
        guard p.count > 1 else { throw .missing(1) }
        let given = try Self.options(p, 1)
        let current = await optionsOf(id, view)
        for name in ["dir", "out"] {
            if let value = given[name], value != current[name] {
                throw .badOption(name, "Haul cannot move a download once added: remove it and add it again.")
            }
        }
        if let limit = given["max-download-limit"].flatMap(Int.init) {
            guard view.state.isUnfinished else {
                throw Aria2Error("GID#\(Aria2GID(id).hex) has ended: its speed limit cannot change.")
            }
            _ = try await apply(.rateLimit(limit == 0 ? nil : limit), to: [id])
        }
        options[id] = given.over(options[id] ?? Aria2Options())
        return "OK"
    }

    private func changeGlobalOption(_ p: [JSONValue]) async throws(Aria2Error) -> JSONValue {
        guard p.count > 0 else { throw .missing(0) }
        let given = try Self.options(p, 0)
        // Everything is checked before anything changes.
        if let directory = given["dir"] {
            do {
                try core.setDefaultDirectory(directory)
            } catch {
                throw .badOption("dir", error.message)
            }
        }
        let slots = given["max-concurrent-downloads"].flatMap(Int.init)
        let perHost = given["max-connection-per-server"].flatMap(Int.init)
        // split: the connections of each large download from now on, as haul get -x (a
        // max-connection-per-server set lower clamps them).
        let connections = given["split"].flatMap(Int.init)
        if slots != nil || perHost != nil || connections != nil {
            await manager.setLimits(slots: slots, perHost: perHost, connections: connections)
        }
        if let overall = given["max-overall-download-limit"].flatMap(Int.init) {
            manager.setRateLimits(overall: overall == 0 ? nil : overall, perHost: manager.perHostRateLimit)
        }
        global = given.over(global)
        return "OK"
    }

    /// The global options: aria2's defaults for what Haul does not have, the service's
    /// live values for what it has, and what RPC set.
    private func globalOptions() async -> Aria2Options {
        let limits = await manager.limits
        var live = Aria2Options(Self.defaults).over(Aria2Options())
        live = global.over(live)
        live.values["dir"] = .string(core.batch.defaultDirectory)
        live.values["max-concurrent-downloads"] = .number(limits.slots)
        live.values["max-connection-per-server"] = .number(min(limits.perHost, 16))
        live.values["split"] = .number(min(limits.connections, 16))
        live.values["max-overall-download-limit"] = .number(manager.overallRateLimit ?? 0)
        return live
    }

    /// A download's options: the global ones it inherits, where it goes, its speed limit,
    /// and what RPC gave it.
    private func optionsOf(_ id: DownloadID, _ view: DownloadView) async -> Aria2Options {
        var values = await globalOptions().values
        // Global-only options are not a download's (aria2 leaves them out of getOption).
        for name in ["max-concurrent-downloads", "max-overall-download-limit", "max-overall-upload-limit", "enable-rpc", "rpc-listen-port", "check-certificate"] {
            values[name] = nil
        }
        var result = (options[id] ?? Aria2Options()).over(Aria2Options(values))
        result.values["dir"] = .string(PathText.directory(of: view.destination))
        result.values["out"] = .string(view.name)
        if view.state.isUnfinished {
            result.values["max-download-limit"] = .number(await manager.rateLimit(of: id) ?? 0)
        }
        return result
    }

    /// aria2's defaults for the options a front-end shows and Haul does not act on.
    static let defaults: [String: JSONValue] = [
        "split": "4", "max-download-limit": "0", "max-tries": "5", "retry-wait": "0", "timeout": "60",
        "connect-timeout": "60", "continue": "true", "allow-overwrite": "false", "auto-file-renaming": "true",
        "min-split-size": "20971520", "user-agent": "haul", "check-certificate": "true", "max-upload-limit": "0",
        "max-overall-upload-limit": "0", "seed-ratio": "1.0", "lowest-speed-limit": "0", "enable-rpc": "true",
        "rpc-listen-port": "6800", "file-allocation": "none", "always-resume": "true", "max-resume-failure-tries": "0",
    ]

    private func globalStat() async throws(Aria2Error) -> JSONValue {
        let stats: StatsView
        do {
            stats = try await EventHub.stats(manager: manager, journal: core.journal)
        } catch {
            throw Aria2Error("cannot read the journal")
        }
        func count(_ states: [JobState]) -> Int { states.reduce(0) { $0 + (stats.counts[$1.rawValue] ?? 0) } }
        let stopped = count([.completed, .failed, .cancelled])
        return [
            "downloadSpeed": .number(Int64(stats.bytesPerSecond)), "uploadSpeed": "0",
            "numActive": .number(count([.running])), "numWaiting": .number(count([.queued, .waiting, .paused])),
            "numStopped": .number(stopped), "numStoppedTotal": .number(stopped),
        ]
    }

    // MARK: - Helpers

    private func id(_ view: DownloadView) -> DownloadID { DownloadID(view.id) }

    private func uris(_ id: DownloadID, _ view: DownloadView) -> [String] {
        mirrors[id] ?? [view.url]
    }

    /// The download parameter `index` names by GID, and its view.
    private func download(_ p: [JSONValue], _ position: Int) async throws(Aria2Error) -> (DownloadID, DownloadView) {
        guard position < p.count else { throw .missing(position) }
        guard let text = p[position].stringValue else { throw .wrongType(position) }
        var found = index.lookup(text)
        if case .failure = found, Aria2GIDIndex.isValid(text) {
            // Added through Haul's own API or the CLI since the index was read: read it again.
            try await reloadIndex()
            found = index.lookup(text)
        }
        let id = try found.get()
        guard let view = try await views([id]).first else {
            index.remove(id)
            throw Aria2Error("GID \(text) is not found")
        }
        return (id, view)
    }

    private func reloadIndex() async throws(Aria2Error) {
        await manager.flushJournal()
        let ids = try await io { (journal: Journal) throws(DownloadError) in try journal.ids(in: Set(JobState.allCases)) }
        var fresh = Aria2GIDIndex()
        for id in ids { fresh.insert(id) }
        index = fresh
    }

    private func views(_ ids: [DownloadID]) async throws(Aria2Error) -> [DownloadView] {
        do {
            return try await core.views(ids)
        } catch {
            throw Aria2Error("cannot read the journal")
        }
    }

    private func io<T: Sendable>(_ body: @escaping @Sendable (Journal) throws(DownloadError) -> T) async throws(Aria2Error) -> T {
        let journal = core.journal
        do {
            return try await ServiceCore.io(on: core.manager.threadPool) { () throws(DownloadError) in try body(journal) }
        } catch {
            throw Aria2Error("cannot read the journal")
        }
    }

    /// `keys` at parameter `index`: an array of strings, or absent.
    static func keys(_ p: [JSONValue], _ index: Int) throws(Aria2Error) -> Set<String>? {
        guard index < p.count else { return nil }
        guard case .array(let items) = p[index], items.allSatisfy({ $0.stringValue != nil }) else {
            throw .wrongType(index)
        }
        return items.isEmpty ? nil : Set(items.compactMap(\.stringValue))
    }

    static func options(_ p: [JSONValue], _ index: Int) throws(Aria2Error) -> Aria2Options {
        try Aria2Options.parse(index < p.count ? p[index] : nil, index: index).get()
    }
}
