/// The rules of Haul's speed limits, as a value: token buckets for the limit across all
/// downloads, per host and per download, and which waiting body parts may go now.
///
/// A transfer asks before it releases each body part it received
/// (``request(_:at:)``); until the part goes, AsyncHTTPClient asks for no more, so the
/// socket is not read and TCP slows the sender: back-pressure, not buffering.
///
/// - **Buckets.** Each limit is a bucket that fills at its rate up to a burst of a quarter
///   of a second's bytes (at least 64 KiB). A part goes when every bucket it draws from is
///   not in debt, and is charged to each in full, which may put a bucket in debt: a part
///   larger than the burst waits after it, not before, and nothing is split.
/// - **Fairness.** Waiting parts are released downloads-least-served first (the bytes each
///   download was released, a new one starting level with the least served), so that
///   active downloads share a limit evenly (max-min: one held back by its own limit leaves
///   the rest to the others), and the segments of one download share its share.
/// - **Changes** apply at once: a bucket's debt is repaid at its new rate, so a raised
///   limit frees waiting parts as soon as ``release(at:)`` runs again.
/// - **No spinning.** ``release(at:)`` says when the earliest waiting part can go; the
///   executor sleeps until then.
struct RateSchedule: Sendable {
    /// A body part waiting to be released.
    struct Part: Sendable, Equatable {
        var id: UInt64
        var download: DownloadID
        var host: String
        var bytes: Int
    }

    /// One limit's bucket.
    struct Bucket: Sendable, Equatable {
        private(set) var rate: Double
        /// Bytes that may go now; negative while in debt.
        private(set) var tokens: Double
        private(set) var updated: ContinuousClock.Instant

        /// The most bytes a full bucket lets through at once: 0.25 s, and at least 64 KiB.
        static func burst(for rate: Double) -> Double { max(65_536, rate / 4) }

        init(rate: Int, at now: ContinuousClock.Instant) {
            self.rate = Double(rate)
            tokens = Self.burst(for: Double(rate))
            updated = now
        }

        mutating func refill(at now: ContinuousClock.Instant) {
            guard now > updated else { return }
            let elapsed = now - updated
            tokens = min(Self.burst(for: rate), tokens + rate * elapsed.inSeconds)
            updated = now
        }

        mutating func change(to rate: Int, at now: ContinuousClock.Instant) {
            refill(at: now)
            self.rate = Double(rate)
            tokens = min(tokens, Self.burst(for: Double(rate)))
        }

        mutating func charge(_ bytes: Int) { tokens -= Double(bytes) }

        var isInDebt: Bool { tokens < 0 }

        /// How long until it is out of debt.
        var timeToRepay: Duration {
            guard tokens < 0 else { return .zero }
            return .nanoseconds(Int64((-tokens / rate * 1e9).rounded(.up)))
        }
    }

    /// The limit across every download, if any.
    private(set) var overall: Bucket?
    /// The limit of each host (`host:port`), if any, and the hosts' buckets.
    private(set) var perHostRate: Int?
    private var hosts: [String: Bucket] = [:]
    /// The downloads with a limit of their own.
    private var downloads: [DownloadID: Bucket] = [:]
    /// Parts waiting, in the order they came.
    private(set) var waiting: [Part] = []
    /// Bytes released per download: the order of fair release.
    private var served: [DownloadID: Double] = [:]
    /// The downloads whose transfers run, and their hosts: who shares a limit now.
    private var running: [DownloadID: String] = [:]

    init() {}

    // MARK: - Limits

    /// Sets (or, with `nil`, lifts) the limit across every download.
    mutating func setOverall(_ rate: Int?, at now: ContinuousClock.Instant) {
        guard let rate else {
            overall = nil
            return
        }
        if overall == nil { overall = Bucket(rate: rate, at: now) } else { overall?.change(to: rate, at: now) }
    }

    /// Sets (or lifts) the limit of every host, each on its own.
    mutating func setPerHost(_ rate: Int?, at now: ContinuousClock.Instant) {
        perHostRate = rate
        guard let rate else {
            hosts = [:]
            return
        }
        for key in hosts.keys { hosts[key]?.change(to: rate, at: now) }
    }

    /// Sets (or lifts) the limit of one download.
    mutating func setLimit(_ rate: Int?, for download: DownloadID, at now: ContinuousClock.Instant) {
        guard let rate else {
            downloads[download] = nil
            return
        }
        if downloads[download] == nil {
            downloads[download] = Bucket(rate: rate, at: now)
        } else {
            downloads[download]?.change(to: rate, at: now)
        }
    }

    /// The lowest limit that applies to a download from `host`, if any.
    func effectiveLimit(of download: DownloadID, host: String) -> Int? {
        let rates = [overall?.rate, perHostRate.map(Double.init), downloads[download]?.rate].compactMap { $0 }
        return rates.min().map { Int($0) }
    }

    // MARK: - Paced requests

    /// How many bytes each request of a download limited to `limit` bytes per second should
    /// ask for, so that the socket is read in small, even steps; `nil` when the limit is
    /// high enough for one request to run to the end.
    ///
    /// The limits hold a body part back, but a part is what one read of the socket brought
    /// in, and a single read of SwiftNIO takes up to 256 KiB (4 reads of up to 64 KiB):
    /// at 100 KB/s a limited download would read 256 KiB at once and then nothing for 2.6 s.
    /// Asking for 1/16 of a second's bytes at a time bounds every read to that, and any 2 s
    /// window to within about 3% of the limit. From 4 MiB/s up a read is at most 1/16 of a
    /// second's bytes anyway. Below 100 KB/s requests stay at 6 KiB: each costs some CPU
    /// (16 downloads at 10 KB/s make 26 requests a second in all), and each response's
    /// head, about 300 bytes, counts against the limit (see `JobCore.charge`).
    static func pacedRequestSize(forLimit limit: Int) -> Int64? {
        let size = Int64(limit) / 16
        guard size < pacingReadSize else { return nil }
        return max(minimumPacedRequest, size)
    }

    /// A download's transfer started (from `host`): it shares the limits from now on.
    mutating func began(_ download: DownloadID, host: String) {
        running[download] = host
    }

    /// A download's transfer stopped (paused, interrupted, waiting to retry or ended).
    mutating func ended(_ download: DownloadID) {
        running[download] = nil
    }

    /// The rate a download from `host` can expect: the lowest of its own limit, its host's
    /// limit shared evenly among the running downloads from that host, and the overall
    /// limit shared among all running downloads; `nil` when no limit applies. What its
    /// requests are paced by.
    func expectedRate(of download: DownloadID, host: String) -> Int? {
        guard overall != nil || perHostRate != nil || downloads[download] != nil else { return nil }
        let extra = running[download] == nil ? 1 : 0
        let rates = [
            overall.map { $0.rate / Double(running.count + extra) },
            perHostRate.map { rate in
                Double(rate) / Double(running.values.reduce(extra) { $1 == host ? $0 + 1 : $0 })
            },
            downloads[download]?.rate,
        ].compactMap { $0 }
        return rates.min().map { Int($0) }
    }

    /// The most one read of the socket can bring in (SwiftNIO: 4 reads of 64 KiB).
    static let pacingReadSize: Int64 = 256 << 10
    /// The smallest request a paced download makes.
    static let minimumPacedRequest: Int64 = 6 << 10

    /// The size from which a download limited so that its requests are paced
    /// (``pacedRequestSize(forLimit:)``) is fetched in such steps, as a segmented download
    /// is: a smaller one is no more than one read.
    static func pacedDownloadThreshold(requestSize: Int64) -> Int64 {
        max(pacingReadSize, 4 * requestSize)
    }

    /// Whether any download has a limit of its own.
    var hasDownloadLimits: Bool { !downloads.isEmpty }

    /// The download's own limit, if it has one.
    func limit(of download: DownloadID) -> Int? {
        downloads[download].map { Int($0.rate) }
    }

    /// Whether any limit applies to a download from `host`: when none does, its parts
    /// need not ask.
    func applies(to download: DownloadID, host: String) -> Bool {
        overall != nil || perHostRate != nil || downloads[download] != nil
    }

    /// Forgets a download that ended: its limit, its fairness count and its waiting parts,
    /// whose IDs are returned (to be let go: their transfer is over).
    mutating func forget(_ download: DownloadID) -> [UInt64] {
        downloads[download] = nil
        served[download] = nil
        running[download] = nil
        let dropped = waiting.filter { $0.download == download }.map(\.id)
        waiting.removeAll { $0.download == download }
        return dropped
    }

    // MARK: - Parts

    /// A part asks to go at `now`: `true` when it may go at once (it is charged), `false`
    /// when it waits for a later ``release(at:)``.
    mutating func request(_ part: Part, at now: ContinuousClock.Instant) -> Bool {
        if served[part.download] == nil { served[part.download] = served.values.min() ?? 0 }
        refill(at: now)
        if waiting.isEmpty, canGo(part) {
            charge(part, at: now)
            return true
        }
        waiting.append(part)
        return false
    }

    /// Releases the waiting parts that may go at `now`, least-served download first.
    /// Returns their IDs, and how long until the next one can go (`nil` when none waits).
    mutating func release(at now: ContinuousClock.Instant) -> (released: [UInt64], next: Duration?) {
        refill(at: now)
        var released: [UInt64] = []
        while true {
            let candidates = waiting.indices.filter { canGo(waiting[$0]) }
            guard
                let best = candidates.min(by: {
                    (served[waiting[$0].download] ?? 0, $0) < (served[waiting[$1].download] ?? 0, $1)
                })
            else { break }
            let part = waiting.remove(at: best)
            charge(part, at: now)
            released.append(part.id)
        }
        let next = waiting.map(wait(for:)).min()
        return (released, next.map { max($0, .milliseconds(1)) })
    }

    // MARK: - Buckets

    private mutating func refill(at now: ContinuousClock.Instant) {
        overall?.refill(at: now)
        for key in hosts.keys { hosts[key]?.refill(at: now) }
        for key in downloads.keys { downloads[key]?.refill(at: now) }
    }

    private func canGo(_ part: Part) -> Bool {
        !(overall?.isInDebt ?? false) && !(hosts[part.host]?.isInDebt ?? false)
            && !(downloads[part.download]?.isInDebt ?? false)
    }

    private mutating func charge(_ part: Part, at now: ContinuousClock.Instant) {
        overall?.charge(part.bytes)
        if let perHostRate {
            if hosts[part.host] == nil { hosts[part.host] = Bucket(rate: perHostRate, at: now) }
            hosts[part.host]?.charge(part.bytes)
        }
        downloads[part.download]?.charge(part.bytes)
        served[part.download, default: 0] += Double(part.bytes)
    }

    private func wait(for part: Part) -> Duration {
        max(
            overall?.timeToRepay ?? .zero, hosts[part.host]?.timeToRepay ?? .zero,
            downloads[part.download]?.timeToRepay ?? .zero)
    }
}
