import NIOConcurrencyHelpers
import NIOCore

/// Whether a download whose first response runs on as its first segment (see
/// ``ResponseHandover``) is joined by its other connections: only where they pay. A plain
/// value; `SplitRuleTests` check the table.
///
/// A new connection costs what the first request cost before its head came (`setup`:
/// the TCP and TLS handshakes and the server's first answer; over a far link, several
/// round trips), and brings nothing meanwhile. So the others join only when the rest of
/// the content would keep the first connection busy for longer than ``payback`` times
/// that, at the rate it has delivered since its first byte. The rate is read once it has
/// been measured over one `setup` at least (and ``minimumWindow``): read sooner, it is
/// the start of the transfer's, not the link's.
///
/// - A server that limits each connection, or a slow one, is split as soon as it is
///   measured (on 127.0.0.1, within milliseconds): the rest would take seconds.
/// - A far server that fills the link over one connection is not: at a 40 ms round trip a
///   new HTTPS connection costs 3 round trips or more, longer than what is left.
/// - Once the rule says join, every connection granted joins; it is not asked again.
///
/// Over HTTP/2, when nobody asked for the split (``probes``), the others would be streams
/// of the first one's connection or of its one sibling (``HTTP2Placement``). They bring
/// more only from a server that limits each request (nginx's `limit_rate`, Apache's
/// `mod_ratelimit`): where the connection, the link or the CPU is what limits, streams
/// share it, and splitting a fast download costs (measured on 127.0.0.1: four streams took
/// 1.23x the time of one, the CPU being what limited).
///
/// - A download slower than ``probeAbove`` since its first byte is joined as over
///   HTTP/1.1: at that rate the streams' CPU costs nothing that shows, and a server
///   that limits each request gives every stream its own rate (nginx at 20 MB/s a
///   request: joined within 50 ms, where a probe took 0.3 s to decide).
/// - A faster one, where splitting may cost, is probed: one stream joins first, once the
///   rest would take at least ``probeFloor`` at the first one's rate, measured over its
///   second window (``Windows``: the first holds the burst a server sends before its limit
///   bites); the rest join only if the two streams together then bring at least
///   ``probeGain`` times that rate (``probePays(before:during:)``), else the two share
///   what is left.
struct SplitRule: Hashable, Sendable {
    /// How many times its setup the rest must take before a connection is worth opening.
    static let payback = 2.0
    /// The shortest time the rate is measured over.
    static let minimumWindow: Duration = .milliseconds(10)
    /// Over HTTP/2: the rate (bytes per second since the first byte) below which the others
    /// join without a probe, as over HTTP/1.1. 64 MB/s: where the CPU limits one HTTPS
    /// stream, it receives several times that (one core on 127.0.0.1: 500 MB/s and more), so
    /// a download measured slower is held back by the server or the link, and streams cost
    /// nothing that shows. A server's opening burst keeps the measure above it for the first
    /// tens of milliseconds: one sending each request 20 MB/s is joined after about 50 ms.
    static let probeAbove = 64e6
    /// Over HTTP/2: the least time the rest must take, at the first stream's rate, for a
    /// probe. A near server sending hundreds of MB/s ends sooner on one stream.
    static let probeFloor: Duration = .seconds(1)
    /// Over HTTP/2: a window a rate is measured over lasts this long, or until it has
    /// ``probeBytes``, whichever comes first. A server that limits each request sends in
    /// bursts (nginx: 64 KiB at a time); a window holds many of them.
    static let probeWindow: Duration = .seconds(1)
    /// Over HTTP/2: the bytes that end a window (see ``probeWindow``): the first stream's
    /// before the probe, both streams' during it (so twice as many).
    static let probeBytes: Int64 = 2 << 20
    /// Over HTTP/2: how much more the two streams must bring together during the probe
    /// than the first one alone before it, for the rest to join. Streams that share a
    /// limit bring about 1x; streams limited one by one, about 2x.
    static let probeGain = 1.3

    /// The first stream's rate over successive windows of ``probeWindow`` or
    /// ``probeBytes``: what a probe is judged against is the latest one's.
    struct Windows: Hashable, Sendable {
        var start: ContinuousClock.Instant
        var bytes: Int64 = 0
        /// Windows measured so far.
        var completed = 0
        /// Bytes per second over the latest one.
        var latest: Double?

        init(start: ContinuousClock.Instant) { self.start = start }

        /// Counts `count` bytes at `now` (none: time passing without a part); a window
        /// closes once it is long enough (at least `setup`, too).
        mutating func add(_ count: Int64, at now: ContinuousClock.Instant, setup: Duration) {
            bytes += count
            let elapsed = now - start
            guard elapsed >= max(setup, SplitRule.minimumWindow),
                elapsed >= SplitRule.probeWindow || bytes >= SplitRule.probeBytes
            else { return }
            latest = Double(bytes) / elapsed.inSeconds
            completed += 1
            start = now
            bytes = 0
        }
    }

    /// What the first request cost before its head came.
    var setup: Duration
    /// Whether the others would be HTTP/2 streams nobody asked for: one probes first.
    var probes = false

    /// What the other connections do now.
    enum Decision: Hashable, Sendable {
        /// Not now: asked again as more bytes come (the server may slow down).
        case notYet
        /// Every one joins.
        case join
        /// One joins, as a probe (``probes``); the rest wait for ``probePays(before:during:)``.
        case probe
    }

    /// What the other connections do, given the bytes still `remaining` and the bytes
    /// `delivered` over `elapsed` since the first one; over HTTP/2, at ``probeAbove`` or
    /// faster, a probe also needs the first stream's second window measured (`windows`).
    func decide(remaining: Int64, delivered: Int64, elapsed: Duration, windows: Windows? = nil) -> Decision {
        guard remaining > 0, elapsed >= max(setup, Self.minimumWindow) else { return .notYet }
        let seconds = elapsed.inSeconds
        guard delivered > 0, seconds > 0 else { return .join }
        let rate = Double(delivered) / seconds
        guard Double(remaining) / rate > Self.payback * setup.inSeconds else { return .notYet }
        guard probes, rate >= Self.probeAbove else { return .join }
        guard let windows, windows.completed >= 2, let latest = windows.latest else { return .notYet }
        return latest == 0 || Double(remaining) / latest >= Self.probeFloor.inSeconds ? .probe : .notYet
    }

    /// After a probe joined: whether the rest join (`true`), stay out (`false`), or it is
    /// too soon to say (`nil`), given the first stream's rate `before` the probe (bytes per
    /// second) and what both streams brought `during` it, counted from the probe's first
    /// byte.
    func probePays(before: Double, during: SegmentTable.EndGame.Delivery) -> Bool? {
        guard during.elapsed >= max(setup, Self.minimumWindow),
            during.elapsed >= Self.probeWindow || during.bytes >= 2 * Self.probeBytes
        else { return nil }
        guard before > 0, let rate = during.rate else { return during.bytes > 0 }
        return rate >= Self.probeGain * before
    }
}

/// The other connections of a download whose first response runs on as its first
/// segment, parked until ``SplitRule`` says they pay (``received(_:at:on:first:)``, told of
/// each body part of the download's responses), or the transfer no longer needs them
/// (``close()``). Over HTTP/2 one of them may go first, as the rule's probe.
final class SegmentJoining: Sendable {
    /// A probe under way: the first stream's rate before it, and what both streams have
    /// brought since the probe's first byte.
    private struct Probe {
        var before: Double
        var since: ContinuousClock.Instant?
        var bytes: Int64 = 0
    }

    private struct State {
        var rule: SplitRule
        /// The first part's time; the bytes received since.
        var firstPart: ContinuousClock.Instant?
        var delivered: Int64 = 0
        /// The first response's rate, window by window, for a probe (``SplitRule/probes``).
        var windows: SplitRule.Windows?
        /// Bytes the first response has not brought yet.
        var remaining: Int64
        var decided: Bool?
        var probe: Probe?
        /// The probe's admission, when no connection was parked to take it: the next one to
        /// ask takes it.
        var probeUntaken = false
        var parked: [CheckedContinuation<Bool, Never>] = []
        /// Asks the rule again when no part comes: a response that stalls is measured too.
        var check: Scheduled<Void>?
    }

    /// What a step of the rule lets go: connections to admit (and how many the transfer
    /// then runs, dividing the first segment's rest when they are the first to join), or
    /// connections not needed.
    private enum Release {
        case admit([CheckedContinuation<Bool, Never>], running: Int, dividing: Bool)
        case refuse([CheckedContinuation<Bool, Never>])
    }

    private let state: NIOLockedValueBox<State>
    /// Whether one connection may join first, as the rule's probe (``SplitRule/probes``):
    /// then the parts of the connections that join count too.
    let probes: Bool
    /// How many connections the transfer runs in all, once every one joined.
    private let connections: Int
    /// Carried out as connections join: `running` of them in all from now; when
    /// `dividing`, the first segment's rest is divided among them (the first to join;
    /// later ones split the largest remainder as they claim).
    private let onJoin: @Sendable (_ running: Int, _ dividing: Bool) -> Void

    /// For a content of `total` bytes, whose first response starts at its first byte, and
    /// `connections` in all.
    init(
        rule: SplitRule, total: Int64, connections: Int,
        onJoin: @escaping @Sendable (_ running: Int, _ dividing: Bool) -> Void
    ) {
        self.state = NIOLockedValueBox(State(rule: rule, remaining: total))
        self.probes = rule.probes
        self.connections = connections
        self.onJoin = onJoin
    }

    /// Waits until the connection may join (`true`), or is not needed (`false`; also when
    /// the calling task is cancelled).
    func admitted() async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLockedValue { state -> Bool? in
                    if let decided = state.decided { return decided }
                    if Task.isCancelled { return false }
                    if state.probeUntaken {
                        state.probeUntaken = false
                        return true
                    }
                    state.parked.append(continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            // The transfer is stopping (its connections are cancelled together).
            close()
        }
    }

    /// A body part of `count` bytes came at `now`, on `loop`: of the first response when
    /// `first`, else of a connection that joined (the probe's, while it runs).
    func received(_ count: Int, at now: ContinuousClock.Instant, on loop: any EventLoop, first: Bool) {
        var scheduling = false
        let release = state.withLockedValue { state -> Release? in
            guard state.decided == nil else { return nil }
            if var probe = state.probe {
                if probe.since == nil {
                    // The window starts with the probe's first byte.
                    guard !first else { return nil }
                    probe.since = now
                }
                probe.bytes += Int64(count)
                state.probe = probe
                return Self.judge(&state, at: now, connections: connections)
            }
            guard first else { return nil }
            state.remaining -= Int64(count)
            guard state.firstPart != nil else {
                state.firstPart = now
                if state.rule.probes { state.windows = SplitRule.Windows(start: now) }
                scheduling = true
                return nil
            }
            state.delivered += Int64(count)
            state.windows?.add(Int64(count), at: now, setup: state.rule.setup)
            return Self.decide(&state, at: now, connections: connections)
        }
        if scheduling { schedule(on: loop) }
        if let release { carryOut(release) }
    }

    /// Asks the rule at `now`, before any probe: what to let go.
    private static func decide(_ state: inout State, at now: ContinuousClock.Instant, connections: Int) -> Release? {
        guard let first = state.firstPart else { return nil }
        let elapsed = now - first
        switch state.rule.decide(
            remaining: state.remaining, delivered: state.delivered, elapsed: elapsed, windows: state.windows)
        {
        case .notYet:
            return nil
        case .join:
            return admitAll(&state, running: connections, dividing: true)
        case .probe:
            state.probe = Probe(before: state.windows?.latest ?? 0)
            guard !state.parked.isEmpty else {
                state.probeUntaken = true
                return .admit([], running: 2, dividing: true)
            }
            return .admit([state.parked.removeFirst()], running: 2, dividing: true)
        }
    }

    /// Asks the rule at `now` whether the probe paid: what to let go.
    private static func judge(_ state: inout State, at now: ContinuousClock.Instant, connections: Int) -> Release? {
        guard let probe = state.probe, let since = probe.since,
            let pays = state.rule.probePays(
                before: probe.before, during: SegmentTable.EndGame.Delivery(bytes: probe.bytes, elapsed: now - since))
        else { return nil }
        guard pays else {
            state.decided = false
            state.check?.cancel()
            state.check = nil
            defer { state.parked = [] }
            return .refuse(state.parked)
        }
        return admitAll(&state, running: connections, dividing: false)
    }

    private static func admitAll(_ state: inout State, running: Int, dividing: Bool) -> Release {
        state.decided = true
        state.probeUntaken = false
        state.check?.cancel()
        state.check = nil
        defer { state.parked = [] }
        return .admit(state.parked, running: running, dividing: dividing)
    }

    /// Asks the rule again after the window it measures over, and after each such window,
    /// until it has decided.
    private func schedule(on loop: any EventLoop) {
        let window = state.withLockedValue { max($0.rule.setup, SplitRule.minimumWindow) }
        let connections = self.connections
        let check = loop.scheduleTask(in: .nanoseconds(Int64(window.inSeconds * 1e9))) { [weak self] in
            guard let self else { return }
            let (release, again) = state.withLockedValue { state -> (Release?, Bool) in
                guard state.decided == nil else { return (nil, false) }
                let now = ContinuousClock.now
                let release: Release?
                if state.probe == nil {
                    // Time passing without a part counts too: a stream that stalls.
                    state.windows?.add(0, at: now, setup: state.rule.setup)
                    release = Self.decide(&state, at: now, connections: connections)
                } else {
                    release = Self.judge(&state, at: now, connections: connections)
                }
                return (release, state.decided == nil)
            }
            if let release { carryOut(release) }
            if again { schedule(on: loop) }
        }
        let stale = state.withLockedValue { state -> Bool in
            guard state.decided == nil else { return true }
            state.check = check
            return false
        }
        if stale { check.cancel() }
    }

    private func carryOut(_ release: Release) {
        switch release {
        case .admit(let admitted, let running, let dividing):
            onJoin(running, dividing)
            for continuation in admitted { continuation.resume(returning: true) }
        case .refuse(let refused):
            for continuation in refused { continuation.resume(returning: false) }
        }
    }

    /// The parked connections are not needed: the first one ended (done, failed or
    /// stopped) before the rule said join, or a connection that joined ended.
    func close() {
        let parked = state.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            guard state.decided == nil else { return [] }
            state.decided = false
            state.probeUntaken = false
            state.check?.cancel()
            state.check = nil
            defer { state.parked = [] }
            return state.parked
        }
        for continuation in parked { continuation.resume(returning: false) }
    }
}
