@testable import Haul
import NIOCore
import Testing

/// Where a request to an HTTP/2 origin goes, without sockets: the pool's rule as a table.
@Suite("HTTP/2 placement")
struct HTTP2PlacementTests {
    typealias Connection = HTTP2Placement.Connection
    typealias Decision = HTTP2Placement.Decision

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var connections: [Connection]
        var connecting: Int
        var decision: Decision
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "nothing open: open one, and wait for it", connections: [], connecting: 0, decision: .open),
        Case(name: "the first is being opened: wait, open no other", connections: [], connecting: 1, decision: .wait),
        Case(
            name: "one idle connection: use it", connections: [Connection(id: 1, active: 0, limit: 100)],
            connecting: 0, decision: .use(1)),
        Case(
            name: "a new connection, before the server's preface: its first request goes at once",
            connections: [Connection(id: 1, active: 0, limit: HTTP2Placement.limitBeforePreface)], connecting: 0,
            decision: .use(1)),
        Case(
            name: "a new connection carrying its first request, before the server's preface: the next ones go on it too",
            connections: [Connection(id: 1, active: 1, limit: HTTP2Placement.limitBeforePreface)], connecting: 1,
            decision: .use(1)),
        Case(
            name: "before the server's preface, 100 streams are assumed: the 101st waits",
            connections: [Connection(id: 1, active: 100, limit: HTTP2Placement.limitBeforePreface)], connecting: 1,
            decision: .wait),
        Case(
            name: "the server's preface allowed 2, both carried: wait, though 100 were assumed before",
            connections: [Connection(id: 1, active: 2, limit: 2), Connection(id: 2, active: 2, limit: 2)],
            connecting: 0, decision: .wait),
        Case(
            name: "one busy connection: open a second (another core), and wait for it",
            connections: [Connection(id: 1, active: 1, limit: 100)], connecting: 0, decision: .open),
        Case(
            name: "the second is being opened: use the first meanwhile",
            connections: [Connection(id: 1, active: 5, limit: 100)], connecting: 1, decision: .use(1)),
        Case(
            name: "two open: the one with fewer streams",
            connections: [Connection(id: 1, active: 7, limit: 100), Connection(id: 2, active: 3, limit: 100)],
            connecting: 0, decision: .use(2)),
        Case(
            name: "two equally busy: the older",
            connections: [Connection(id: 2, active: 4, limit: 100), Connection(id: 1, active: 4, limit: 100)],
            connecting: 0, decision: .use(1)),
        Case(
            name: "the server's stream limit reached on both: wait, open no third",
            connections: [Connection(id: 1, active: 2, limit: 2), Connection(id: 2, active: 2, limit: 2)],
            connecting: 0, decision: .wait),
        Case(
            name: "the limit reached on the only one: open the second, and wait for it",
            connections: [Connection(id: 1, active: 2, limit: 2)], connecting: 0, decision: .open),
        Case(
            name: "a connection that said GOAWAY takes nothing: open another",
            connections: [Connection(id: 1, active: 0, limit: 100, accepting: false)], connecting: 0, decision: .open),
        Case(
            name: "one said GOAWAY, one is busy: replace the first, and wait for it",
            connections: [
                Connection(id: 1, active: 3, limit: 100, accepting: false), Connection(id: 2, active: 3, limit: 100),
            ], connecting: 0, decision: .open),
        Case(
            name: "one said GOAWAY, one is idle: use the idle one",
            connections: [
                Connection(id: 1, active: 3, limit: 100, accepting: false), Connection(id: 2, active: 0, limit: 100),
            ], connecting: 0, decision: .use(2)),
        Case(
            name: "a limit of 0 (the server takes nothing now): wait",
            connections: [Connection(id: 1, active: 0, limit: 0), Connection(id: 2, active: 0, limit: 0)],
            connecting: 0, decision: .wait),
    ]

    @Test(arguments: cases)
    func placesByStreamsLimitsAndGoAway(_ row: Case) {
        #expect(HTTP2Placement.place(connections: row.connections, connecting: row.connecting) == row.decision)
    }

    /// Requests arriving one after another onto one origin: never more than two
    /// connections, and the streams spread evenly over them.
    @Test func manyRequestsSpreadOverTwoConnections() throws {
        // Given an origin with nothing open
        var connections: [Connection] = []
        var connecting = 0
        // When 64 requests arrive, each connection coming up as soon as it is asked for
        for _ in 0..<64 {
            var decision = HTTP2Placement.place(connections: connections, connecting: connecting)
            if decision.open {
                connecting += 1
                connections.append(Connection(id: connections.count + 1, active: 0, limit: 100))
                connecting -= 1
                if decision.use == nil {
                    decision = HTTP2Placement.place(connections: connections, connecting: connecting)
                }
            }
            let id = try #require(decision.use)
            connections[connections.firstIndex { $0.id == id }!].active += 1
        }
        // Then two connections carry 32 streams each
        #expect(connections.map(\.active) == [32, 32])
    }
}

/// The HTTP/2 window's probe of the bandwidth-delay product, without sockets.
@Suite("Bandwidth probe")
struct BandwidthProbeTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test func aPingGoesOutWithDataOneAtATime() {
        // Given a probe with a 32 MiB window
        var probe = BandwidthProbe(window: 32 << 20, maxWindow: 64 << 20)
        // When data arrives, twice, before an answer
        let first = probe.received(16 << 10, at: Self.start)
        let second = probe.received(16 << 10, at: Self.start)
        // Then one PING goes out, with the first
        #expect(first && !second)
    }

    static let mib = 1 << 20
    /// (MiB in one round trip, window before, window after): a slow or near link does not
    /// bind the window, nor does half of it; near it, the window grows to twice the
    /// measure; far past it, up to the most.
    static let rows: [(Int, Int, Int)] = [(1, 32, 32), (16, 32, 32), (24, 32, 48), (40, 32, 64)]

    @Test(arguments: rows)
    func theWindowGrowsToTwiceWhatARoundTripCarries(row: (Int, Int, Int)) {
        let (carried, before, after) = (row.0 * Self.mib, row.1 * Self.mib, row.2 * Self.mib)
        // Given a probe whose PING is out
        var probe = BandwidthProbe(window: before, maxWindow: 64 * Self.mib)
        let sent = probe.received(1, at: Self.start)
        #expect(sent)
        // When `carried` bytes arrive before its answer
        _ = probe.received(carried, at: Self.start)
        let growth = probe.answered(at: Self.start + .milliseconds(40))
        // Then the window is twice the measure when that is more, within the most
        #expect(probe.window == after)
        #expect(growth == (after > before ? after - before : nil))
    }

    @Test func atTheMostNoMorePings() {
        var probe = BandwidthProbe(window: 64 << 20, maxWindow: 64 << 20)
        let sent = probe.received(1 << 20, at: Self.start)
        let growth = probe.answered(at: Self.start)
        #expect(!sent)
        #expect(growth == nil)
    }

    /// (milliseconds after an answer that found no growth, whether data then sends a PING):
    /// the next probe waits a second.
    static let quiet: [(Int, Bool)] = [(0, false), (1, false), (999, false), (1000, true), (5000, true)]

    @Test(arguments: quiet)
    func aProbeThatFoundNoGrowthWaitsASecond(row: (Int, Bool)) {
        // Given a probe whose answer found the window wide enough
        var probe = BandwidthProbe(window: 32 << 20, maxWindow: 64 << 20)
        let first = probe.received(16 << 10, at: Self.start)
        let firstGrowth = probe.answered(at: Self.start)
        #expect(first && firstGrowth == nil)
        // When data arrives some time later
        let sent = probe.received(16 << 10, at: Self.start + .milliseconds(Int64(row.0)))
        // Then a PING goes with it only once the second has passed
        #expect(sent == row.1)
    }

    @Test func aProbeThatGrewTheWindowIsFollowedAtOnce() {
        // Given a probe whose answer grew the window (a far, fast link)
        var probe = BandwidthProbe(window: 32 << 20, maxWindow: 64 << 20)
        let first = probe.received(1, at: Self.start)
        _ = probe.received(24 << 20, at: Self.start)
        let growth = probe.answered(at: Self.start + .milliseconds(40))
        #expect(first && growth != nil)
        // When the next data arrives
        let next = probe.received(1, at: Self.start + .milliseconds(40))
        // Then the next PING goes with it: the link may be wider still
        #expect(next)
    }

    /// Ten seconds of a near server's data, a part every 100 microseconds, each PING answered
    /// at once: the answers stay far below NIOHTTP2's limit of 200 control frames in 30 s
    /// (before, a PING went after every answer: about 50,000 here).
    @Test func aNearServerAnswersFewPings() {
        var probe = BandwidthProbe(window: 32 << 20, maxWindow: 64 << 20)
        var pings = 0
        for tick in 0..<100_000 {
            let now = Self.start + .microseconds(Int64(tick) * 100)
            if probe.received(16 << 10, at: now) {
                pings += 1
                _ = probe.answered(at: now + .microseconds(50))
            }
        }
        #expect(pings <= 11, "\(pings) PINGs in 10 s")
        #expect(pings >= 10)
    }
}
