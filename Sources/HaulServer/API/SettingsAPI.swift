package import Hummingbird

/// `GET` and `PATCH /api/v1/settings`: slots, the per-host cap, the speed limits (overall
/// and per host, in bytes per second, 0 for none) and the default directory, changed while
/// the service runs. The download roots are fixed at start.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct SettingsAPI: Sendable {
    /// The highest per-host cap accepted (the HTTP client's pool is sized for it).
    package static let maximumPerHost = 32
    package static let maximumSlots = 1_000

    let core: ServiceCore

    package init(core: ServiceCore) {
        self.core = core
    }

    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.get("settings") { _, _ in try await self.current() }
        group.patch("settings") { request, _ in try await self.change(request) }
    }

    struct Settings: Codable {
        var maxConcurrentDownloads: Int?
        var maxConnectionsPerHost: Int?
        var maxBytesPerSecond: Int?
        var maxBytesPerSecondPerHost: Int?
        var defaultDirectory: String?
        var downloadRoots: [String]?
    }

    /// The most a speed limit may be: 1 TiB/s.
    static let maximumRate = 1 << 40

    func current() async throws -> Response {
        let limits = await core.manager.limits
        let batch = core.batch
        return try ServiceJSON.response(
            Settings(
                maxConcurrentDownloads: limits.slots, maxConnectionsPerHost: limits.perHost,
                maxBytesPerSecond: core.manager.overallRateLimit ?? 0,
                maxBytesPerSecondPerHost: core.manager.perHostRateLimit ?? 0,
                defaultDirectory: batch.defaultDirectory,
                downloadRoots: batch.roots + batch.objectRoots.map(\.description)))
    }

    func change(_ request: Request) async throws -> Response {
        let body = try await DownloadsAPI.decode(Settings.self, from: request)
        if body.downloadRoots != nil {
            throw APIError.invalid("downloadRoots", "the download roots are set when the service starts (-d, --root)")
        }
        if let slots = body.maxConcurrentDownloads, !(1...Self.maximumSlots).contains(slots) {
            throw APIError.invalid("maxConcurrentDownloads", "must be in 1...\(Self.maximumSlots)")
        }
        if let perHost = body.maxConnectionsPerHost, !(1...Self.maximumPerHost).contains(perHost) {
            throw APIError.invalid("maxConnectionsPerHost", "must be in 1...\(Self.maximumPerHost)")
        }
        for (field, rate) in [("maxBytesPerSecond", body.maxBytesPerSecond), ("maxBytesPerSecondPerHost", body.maxBytesPerSecondPerHost)] {
            if let rate, !(0...Self.maximumRate).contains(rate) {
                throw APIError.invalid(field, "must be a number of bytes per second in 0...\(Self.maximumRate) (0: no limit)")
            }
        }
        // Everything is checked before anything changes.
        if let directory = body.defaultDirectory {
            do {
                try core.setDefaultDirectory(directory)
            } catch {
                throw APIError.invalid("defaultDirectory", error.message)
            }
        }
        await core.manager.setLimits(slots: body.maxConcurrentDownloads, perHost: body.maxConnectionsPerHost)
        if body.maxBytesPerSecond != nil || body.maxBytesPerSecondPerHost != nil {
            let manager = core.manager
            func limit(_ given: Int?, else current: Int?) -> Int? { given.map { $0 == 0 ? nil : $0 } ?? current }
            manager.setRateLimits(
                overall: limit(body.maxBytesPerSecond, else: manager.overallRateLimit),
                perHost: limit(body.maxBytesPerSecondPerHost, else: manager.perHostRateLimit))
        }
        return try await current()
    }
}
