import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Tracks hosts that cannot be reached, probing each with backoff until it answers.
///
/// A probe is a plain TCP connect to the host's port (or to its proxy's), closed at once,
/// on the manager's event loops. Restored hosts are announced on ``restored``.
actor HostReachability {
    /// A host and port, with the key the scheduler uses for it.
    struct Endpoint: Hashable, Sendable {
        let host: String
        let port: Int
        /// The proxy requests to this host go through, if any: what a probe connects to.
        var proxyHost: String? = nil
        var proxyPort: Int? = nil
        var key: String { "\(host.lowercased()):\(port)" }
    }

    nonisolated let restored: AsyncStream<String>
    /// Hosts that have answered at least once in this process.
    private nonisolated let answered = NIOLockedValueBox<Set<String>>([])
    private let restoredContinuation: AsyncStream<String>.Continuation
    private var probes: [String: (endpoint: Endpoint, task: Task<Void, Never>)] = [:]
    private let initialDelay: Duration
    private let maxDelay: Duration
    private let timeout: Duration
    /// The event loops the probes connect on.
    private nonisolated let eventLoopGroup: any EventLoopGroup

    init(initialDelay: Duration, maxDelay: Duration, timeout: Duration, eventLoopGroup: any EventLoopGroup) {
        (restored, restoredContinuation) = AsyncStream.makeStream(of: String.self)
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.timeout = timeout
        self.eventLoopGroup = eventLoopGroup
    }

    /// Records that the host `key` answered a request.
    nonisolated func noteAnswered(_ key: String) {
        _ = answered.withLockedValue { $0.insert(key) }
    }

    /// Whether the host `key` has answered before. A host that never answered is more
    /// likely misspelt than offline, so its failures are not treated as a lost network.
    nonisolated func hasAnswered(_ key: String) -> Bool {
        answered.withLockedValue { $0.contains(key) }
    }

    /// Whether `key` is currently considered down.
    func isDown(_ key: String) -> Bool { probes[key] != nil }

    /// Marks `endpoint` down and starts probing it, unless that is already happening.
    func markDown(_ endpoint: Endpoint) {
        guard probes[endpoint.key] == nil else { return }
        startProbing(endpoint, after: initialDelay)
    }

    /// Probes every down host now (the platform says the network came back).
    func probeAllNow() {
        for (_, probe) in probes {
            probe.task.cancel()
            startProbing(probe.endpoint, after: .zero)
        }
    }

    /// Stops all probing.
    func shutdown() {
        for (_, probe) in probes { probe.task.cancel() }
        probes = [:]
        restoredContinuation.finish()
    }

    private func startProbing(_ endpoint: Endpoint, after firstDelay: Duration) {
        let (initial, maximum, timeout) = (initialDelay, maxDelay, self.timeout)
        let task = Task {
            var delay = firstDelay
            while !Task.isCancelled {
                if delay > .zero {
                    do { try await Task.sleep(for: delay) } catch { return }
                }
                if await self.probe(endpoint, timeout: timeout) {
                    self.hostAnswered(endpoint.key)
                    return
                }
                delay = min(max(delay * 2, initial), maximum)
            }
        }
        probes[endpoint.key] = (endpoint, task)
    }

    private func hostAnswered(_ key: String) {
        guard probes.removeValue(forKey: key) != nil else { return }
        restoredContinuation.yield(key)
    }

    /// Whether a TCP connection to `endpoint` can be made within `timeout`.
    nonisolated func probe(_ endpoint: Endpoint, timeout: Duration) async -> Bool {
        let nanoseconds = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(.nanoseconds(nanoseconds))
        do {
            let channel = try await bootstrap.connect(
                host: endpoint.proxyHost ?? endpoint.host, port: endpoint.proxyPort ?? endpoint.port
            ).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }
}
