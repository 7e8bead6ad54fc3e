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
struct SplitRule: Hashable, Sendable {
    /// How many times its setup the rest must take before a connection is worth opening.
    static let payback = 2.0
    /// The shortest time the rate is measured over.
    static let minimumWindow: Duration = .milliseconds(10)

    /// What the first request cost before its head came.
    var setup: Duration

    /// Whether the other connections should join now, given the bytes still `remaining`
    /// and the bytes `delivered` over `elapsed` since the first one. `false` is "not now":
    /// asked again as more bytes come (the server may slow down).
    func shouldJoin(remaining: Int64, delivered: Int64, elapsed: Duration) -> Bool {
        guard remaining > 0, elapsed >= max(setup, Self.minimumWindow) else { return false }
        let seconds = elapsed.inSeconds
        guard delivered > 0, seconds > 0 else { return true }
        let rate = Double(delivered) / seconds
        return Double(remaining) / rate > Self.payback * setup.inSeconds
    }
}

/// The other connections of a download whose first response runs on as its first
/// segment, parked until ``SplitRule`` says they pay (``received(_:at:)``, told of each
/// body part of that response), or the transfer no longer needs them (``close()``).
final class SegmentJoining: Sendable {
    private struct State {
        var rule: SplitRule
        /// The first part's time; the bytes received since.
        var firstPart: ContinuousClock.Instant?
        var delivered: Int64 = 0
        /// Bytes the first response has not brought yet.
        var remaining: Int64
        var decided: Bool?
        var parked: [CheckedContinuation<Bool, Never>] = []
        /// Asks the rule again when no part comes: a response that stalls is measured too.
        var check: Scheduled<Void>?
    }

    private let state: NIOLockedValueBox<State>
    /// Carried out once, when the rule says join (the first segment's rest is divided).
    private let onJoin: @Sendable () -> Void

    /// For a content of `total` bytes, whose first response starts at its first byte.
    init(rule: SplitRule, total: Int64, onJoin: @escaping @Sendable () -> Void) {
        self.state = NIOLockedValueBox(State(rule: rule, remaining: total))
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

    /// A body part of `count` bytes of the first response came at `now`, on `loop`.
    func received(_ count: Int, at now: ContinuousClock.Instant, on loop: any EventLoop) {
        var scheduling = false
        let parked = state.withLockedValue { state -> [CheckedContinuation<Bool, Never>]? in
            guard state.decided == nil else { return nil }
            state.remaining -= Int64(count)
            guard state.firstPart != nil else {
                state.firstPart = now
                scheduling = true
                return nil
            }
            state.delivered += Int64(count)
            return Self.decide(&state, at: now)
        }
        if scheduling { schedule(on: loop) }
        if let parked { join(parked) }
    }

    /// Asks the rule at `now`: the connections to admit when it says join.
    private static func decide(_ state: inout State, at now: ContinuousClock.Instant)
        -> [CheckedContinuation<Bool, Never>]?
    {
        guard let first = state.firstPart,
            state.rule.shouldJoin(remaining: state.remaining, delivered: state.delivered, elapsed: now - first)
        else { return nil }
        state.decided = true
        state.check?.cancel()
        state.check = nil
        defer { state.parked = [] }
        return state.parked
    }

    /// Asks the rule again after the window it measures over, and after each such window,
    /// until it has decided.
    private func schedule(on loop: any EventLoop) {
        let window = state.withLockedValue { max($0.rule.setup, SplitRule.minimumWindow) }
        let check = loop.scheduleTask(in: .nanoseconds(Int64(window.inSeconds * 1e9))) { [weak self] in
            guard let self else { return }
            let (parked, again) = state.withLockedValue { state -> ([CheckedContinuation<Bool, Never>]?, Bool) in
                guard state.decided == nil else { return (nil, false) }
                let parked = Self.decide(&state, at: .now)
                return (parked, parked == nil)
            }
            if let parked { join(parked) }
            if again { schedule(on: loop) }
        }
        let stale = state.withLockedValue { state -> Bool in
            guard state.decided == nil else { return true }
            state.check = check
            return false
        }
        if stale { check.cancel() }
    }

    private func join(_ parked: [CheckedContinuation<Bool, Never>]) {
        onJoin()
        for continuation in parked { continuation.resume(returning: true) }
    }

    /// The parked connections are not needed: the first one ended (done, failed or
    /// stopped) before the rule said join.
    func close() {
        let parked = state.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            guard state.decided == nil else { return [] }
            state.decided = false
            state.check?.cancel()
            state.check = nil
            defer { state.parked = [] }
            return state.parked
        }
        for continuation in parked { continuation.resume(returning: false) }
    }
}
