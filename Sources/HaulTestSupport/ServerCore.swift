import Foundation
import NIOCore

/// The shared, lock-protected state of one ``FaultServer``: registered files, fault
/// counters, gates, statistics, recorded requests and pending waiters.
///
/// Connection handlers (on event loops) and the public API (on any thread or task) both
/// go through this object. Continuations and gate callbacks are always resumed *outside*
/// the lock.
final class ServerCore: Sendable {
    /// A registered file as stored by the server.
    struct StoredFile: Sendable {
        var content: ByteBuffer
        /// The full entity tag (quoted), if any.
        var etag: String?
        /// The IMF-fixdate string, if any.
        var lastModified: String?
    }

    private struct RequestWaiter: Sendable {
        var count: Int
        var path: String?
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct ConnectionWaiter: Sendable {
        var count: Int
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct GateCountWaiter: Sendable {
        var gate: String
        var count: Int
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State: Sendable {
        var port = 0
        var host = "127.0.0.1"
        var nextID = 0
        var shuttingDown = false

        var files: [String: StoredFile] = [:]
        var fileVersions: [String: Int] = [:]
        var etagSerial = 0
        var faultCounters: [String: Int] = [:]
        var expiredTokens: Set<String> = []
        var mintedTokens = 0

        var releasedGates: Set<String> = []
        var gateWaiters: [String: [Int: @Sendable () -> Void]] = [:]

        var statistics = FaultServer.Statistics()
        var bytesByPath: [String: Int] = [:]
        var recorded: [RecordedRequest] = []
        var requestCountByPath: [String: Int] = [:]
        var connectionSerial = 0
        var channels: [ObjectIdentifier: any Channel] = [:]

        var requestWaiters: [Int: RequestWaiter] = [:]
        var connectionWaiters: [Int: ConnectionWaiter] = [:]
        var gateCountWaiters: [Int: GateCountWaiter] = [:]

        mutating func makeID() -> Int {
            self.nextID += 1
            return self.nextID
        }

        func requestCount(path: String?) -> Int {
            guard let path else { return self.recorded.count }
            return self.requestCountByPath[path, default: 0]
        }

        func gateWaiterCount(_ gate: String) -> Int {
            self.gateWaiters[gate]?.count ?? 0
        }

        /// Removes and returns the request waiters whose condition now holds.
        mutating func satisfiedRequestWaiters() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            for (id, waiter) in self.requestWaiters where self.requestCount(path: waiter.path) >= waiter.count {
                ready.append(waiter.continuation)
                self.requestWaiters.removeValue(forKey: id)
            }
            return ready
        }

        /// Removes and returns the connection waiters whose count has been reached.
        mutating func satisfiedConnectionWaiters() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            for (id, waiter) in self.connectionWaiters where self.statistics.connectionsAccepted >= waiter.count {
                ready.append(waiter.continuation)
                self.connectionWaiters.removeValue(forKey: id)
            }
            return ready
        }

        /// Removes and returns the gate-count waiters whose condition now holds.
        mutating func satisfiedGateCountWaiters() -> [CheckedContinuation<Void, Never>] {
            var ready: [CheckedContinuation<Void, Never>] = []
            for (id, waiter) in self.gateCountWaiters where self.gateWaiterCount(waiter.gate) >= waiter.count {
                ready.append(waiter.continuation)
                self.gateCountWaiters.removeValue(forKey: id)
            }
            return ready
        }
    }

    private let state = Locked(State())

    // MARK: - Server lifecycle

    var port: Int {
        get { self.state.withLock { $0.port } }
        set { self.state.withLock { $0.port = newValue } }
    }

    var host: String {
        get { self.state.withLock { $0.host } }
        set { self.state.withLock { $0.host = newValue } }
    }

    var baseURL: String { "http://\(self.host):\(self.port)" }

    /// Marks the server as shutting down, resumes every pending waiter and returns the
    /// connections that are still open (which the caller must close).
    func beginShutdown() -> [any Channel] {
        let (channels, continuations) = self.state.withLock { state -> ([any Channel], [CheckedContinuation<Void, Never>]) in
            state.shuttingDown = true
            let continuations =
                state.requestWaiters.values.map(\.continuation) + state.gateCountWaiters.values.map(\.continuation)
                + state.connectionWaiters.values.map(\.continuation)
            state.requestWaiters.removeAll()
            state.gateCountWaiters.removeAll()
            state.connectionWaiters.removeAll()
            return (Array(state.channels.values), continuations)
        }
        for continuation in continuations { continuation.resume() }
        return channels
    }

    /// The connections that are currently open.
    var openChannels: [any Channel] {
        self.state.withLock { Array($0.channels.values) }
    }

    // MARK: - Connections

    /// Registers a newly active connection. Returns its 1-based number, or `nil` if the
    /// server is shutting down (the caller must then close it).
    func connectionOpened(_ channel: any Channel) -> Int? {
        let (serial, ready) = self.state.withLock { state -> (Int?, [CheckedContinuation<Void, Never>]) in
            guard !state.shuttingDown else { return (nil, []) }
            state.connectionSerial += 1
            state.channels[ObjectIdentifier(channel)] = channel
            state.statistics.connectionsAccepted += 1
            state.statistics.openConnections += 1
            state.statistics.maxOpenConnections = max(
                state.statistics.maxOpenConnections,
                state.statistics.openConnections
            )
            return (state.connectionSerial, state.satisfiedConnectionWaiters())
        }
        for continuation in ready { continuation.resume() }
        return serial
    }

    func connectionClosed(_ channel: any Channel) {
        self.state.withLock { state in
            if state.channels.removeValue(forKey: ObjectIdentifier(channel)) != nil {
                state.statistics.openConnections -= 1
            }
        }
    }

    // MARK: - Requests

    /// Records an arriving request head and marks it in flight.
    func requestArrived(
        connection: Int,
        method: String,
        uri: String,
        target: RequestTarget,
        headers: [(name: String, value: String)]
    ) -> RecordedRequest {
        let (record, ready) = self.state.withLock { state -> (RecordedRequest, [CheckedContinuation<Void, Never>]) in
            let record = RecordedRequest(
                index: state.recorded.count,
                connection: connection,
                method: method,
                uri: uri,
                path: target.path,
                query: target.query,
                headers: headers
            )
            state.recorded.append(record)
            state.requestCountByPath[target.path, default: 0] += 1
            state.statistics.totalRequests += 1
            state.statistics.inFlightRequests += 1
            state.statistics.maxInFlightRequests = max(
                state.statistics.maxInFlightRequests,
                state.statistics.inFlightRequests
            )
            return (record, state.satisfiedRequestWaiters())
        }
        for continuation in ready { continuation.resume() }
        return record
    }

    /// Marks `count` requests as no longer in flight.
    func requestsFinished(_ count: Int = 1) {
        self.state.withLock { $0.statistics.inFlightRequests -= count }
    }

    /// Accounts body bytes that were successfully written for `path`.
    func bodyBytesWritten(_ count: Int, path: String) {
        self.state.withLock { state in
            state.statistics.bodyBytesServed += count
            state.bytesByPath[path, default: 0] += count
        }
    }

    /// Increments the per-path counter of a fault kind and reports whether this request
    /// is among the first `times` (all requests when `times` is `nil`).
    func consumeFault(_ kind: String, path: String, times: Int?) -> Bool {
        self.state.withLock { state in
            let key = "\(kind) \(path)"
            let seen = state.faultCounters[key, default: 0]
            state.faultCounters[key] = seen + 1
            guard let times else { return true }
            return seen < times
        }
    }

    /// Whether requests carrying `token=T` are refused as expired.
    func isExpired(token: String) -> Bool {
        self.state.withLock { $0.expiredTokens.contains(token) }
    }

    func expire(token: String) {
        _ = self.state.withLock { $0.expiredTokens.insert(token) }
    }

    /// A fresh token for `/sign/…`: `t1`, `t2`, … and whether it is the first.
    func mintToken() -> (token: String, first: Bool) {
        self.state.withLock { state in
            state.mintedTokens += 1
            return ("t\(state.mintedTokens)", state.mintedTokens == 1)
        }
    }

    func resetFaultCounters() {
        self.state.withLock { $0.faultCounters.removeAll() }
    }

    // MARK: - Statistics

    var statistics: FaultServer.Statistics {
        self.state.withLock { $0.statistics }
    }

    func bytesServed(path: String) -> Int {
        self.state.withLock { $0.bytesByPath[path, default: 0] }
    }

    func requests(path: String?) -> [RecordedRequest] {
        self.state.withLock { state in
            guard let path else { return state.recorded }
            return state.recorded.filter { $0.path == path }
        }
    }

    func resetStatistics() {
        self.state.withLock { state in
            let open = state.statistics.openConnections
            let inFlight = state.statistics.inFlightRequests
            state.statistics = FaultServer.Statistics(
                openConnections: open,
                maxOpenConnections: open,
                inFlightRequests: inFlight,
                maxInFlightRequests: inFlight
            )
            state.bytesByPath.removeAll()
            state.recorded.removeAll()
            state.requestCountByPath.removeAll()
        }
    }

    // MARK: - Files

    func setFile(_ name: String, content: ByteBuffer, etag: ServedFile.ETag, lastModified: ServedFile.LastModified) {
        self.state.withLock { state in
            let version = state.fileVersions[name, default: 0] + 1
            state.fileVersions[name] = version
            state.etagSerial += 1
            let etagValue: String?
            switch etag {
            case .automatic:
                etagValue = "\"v\(version)-\(state.etagSerial)\""
            case .none:
                etagValue = nil
            case .custom(let value):
                etagValue = value.hasPrefix("\"") || value.hasPrefix("W/\"") ? value : "\"\(value)\""
            }
            let lastModifiedValue: String?
            switch lastModified {
            case .automatic:
                lastModifiedValue = HTTPDate.format(HTTPDate.automaticBase.addingTimeInterval(TimeInterval(version)))
            case .none:
                lastModifiedValue = nil
            case .custom(let date):
                lastModifiedValue = HTTPDate.format(date)
            }
            state.files[name] = StoredFile(content: content, etag: etagValue, lastModified: lastModifiedValue)
        }
    }

    func removeFile(_ name: String) {
        self.state.withLock { _ = $0.files.removeValue(forKey: name) }
    }

    func file(_ name: String) -> StoredFile? {
        self.state.withLock { $0.files[name] }
    }

    // MARK: - Gates

    /// Registers a request that wants to pass `gate`. Returns `true` if the gate is already
    /// released (nothing is registered); otherwise `onRelease` is stored and called
    /// (from an arbitrary thread) when the gate is released.
    func enterGate(_ gate: String, id: Int, onRelease: @escaping @Sendable () -> Void) -> Bool {
        let (open, ready) = self.state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            if state.releasedGates.contains(gate) { return (true, []) }
            state.gateWaiters[gate, default: [:]][id] = onRelease
            return (false, state.satisfiedGateCountWaiters())
        }
        for continuation in ready { continuation.resume() }
        return open
    }

    /// Forgets a gate waiter whose connection went away.
    func leaveGate(_ gate: String, id: Int) {
        self.state.withLock { state in
            _ = state.gateWaiters[gate]?.removeValue(forKey: id)
            if state.gateWaiters[gate]?.isEmpty == true {
                state.gateWaiters.removeValue(forKey: gate)
            }
        }
    }

    func release(_ gate: String) {
        let callbacks = self.state.withLock { state -> [@Sendable () -> Void] in
            state.releasedGates.insert(gate)
            guard let waiters = state.gateWaiters.removeValue(forKey: gate) else { return [] }
            return Array(waiters.values)
        }
        for callback in callbacks { callback() }
    }

    func closeGate(_ gate: String) {
        self.state.withLock { _ = $0.releasedGates.remove(gate) }
    }

    func makeID() -> Int {
        self.state.withLock { $0.makeID() }
    }

    // MARK: - Waiting

    func waitForRequests(count: Int, path: String?) async {
        let id = self.makeID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLock { state -> Bool in
                    if state.shuttingDown || Task.isCancelled || state.requestCount(path: path) >= count {
                        return true
                    }
                    state.requestWaiters[id] = RequestWaiter(count: count, path: path, continuation: continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            self.state.withLock { $0.requestWaiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }

    func waitForConnections(count: Int) async {
        let id = self.makeID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLock { state -> Bool in
                    if state.shuttingDown || Task.isCancelled || state.statistics.connectionsAccepted >= count {
                        return true
                    }
                    state.connectionWaiters[id] = ConnectionWaiter(count: count, continuation: continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            self.state.withLock { $0.connectionWaiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }

    func waitForGateWaiters(_ gate: String, count: Int) async {
        let id = self.makeID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLock { state -> Bool in
                    if state.shuttingDown || Task.isCancelled || state.gateWaiterCount(gate) >= count {
                        return true
                    }
                    state.gateCountWaiters[id] = GateCountWaiter(gate: gate, count: count, continuation: continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            self.state.withLock { $0.gateCountWaiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }
}
