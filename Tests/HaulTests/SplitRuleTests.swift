@testable import Haul
import Testing

/// When the other connections join a download's first response: the rule as a table.
@Suite("Split rule")
struct SplitRuleTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var setup: Duration
        var remaining: Int64
        var delivered: Int64
        var elapsed: Duration
        var join: Bool
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "not measured for one setup yet: not now", setup: .milliseconds(120), remaining: 60 << 20,
            delivered: 1 << 20, elapsed: .milliseconds(100), join: false),
        Case(
            name: "not measured for the minimum window yet (127.0.0.1): not now", setup: .microseconds(300),
            remaining: 60 << 20, delivered: 256 << 10, elapsed: .milliseconds(5), join: false),
        Case(
            name: "a server limiting each connection to 4 MiB/s: the rest takes seconds, join",
            setup: .milliseconds(2), remaining: 24 << 20, delivered: 40 << 10, elapsed: .milliseconds(10),
            join: true),
        Case(
            name: "a far server filling the link over one connection (300 MB/s, 165 ms setup): the rest takes 0.17 s, not now",
            setup: .milliseconds(165), remaining: 50 << 20, delivered: 50 << 20, elapsed: .milliseconds(170),
            join: false),
        Case(
            name: "the same server slowing down to 20 MB/s: the rest takes 2.5 s, join", setup: .milliseconds(165),
            remaining: 50 << 20, delivered: 20 << 20, elapsed: .seconds(1), join: true),
        Case(
            name: "a response that stalled after a burst: its rate falls as the time goes, join",
            setup: .milliseconds(1), remaining: 22 << 20, delivered: 2 << 20, elapsed: .milliseconds(20), join: true),
        Case(
            name: "nothing left: never", setup: .milliseconds(1), remaining: 0, delivered: 1 << 20,
            elapsed: .seconds(1), join: false),
        Case(
            name: "just over twice the setup left: join", setup: .seconds(1), remaining: 21 << 20,
            delivered: 10 << 20, elapsed: .seconds(1), join: true),
        Case(
            name: "just under twice the setup left: not now", setup: .seconds(1), remaining: 19 << 20,
            delivered: 10 << 20, elapsed: .seconds(1), join: false),
    ]

    @Test(arguments: cases)
    func joinsOnlyWhereItPays(_ row: Case) {
        let rule = SplitRule(setup: row.setup)
        let decision = rule.decide(remaining: row.remaining, delivered: row.delivered, elapsed: row.elapsed)
        #expect(decision == (row.join ? .join : .notYet))
    }

    /// Over HTTP/2, when nobody asked for the split: a download slower than
    /// ``SplitRule/probeAbove`` since its first byte is joined as over HTTP/1.1; a faster one
    /// is probed by one stream first, and only where the rest would take a while at the
    /// first stream's rate over its second window (the first holds the server's opening
    /// burst).
    struct ProbeCase: Sendable, CustomTestStringConvertible {
        var name: String
        var setup: Duration = .milliseconds(2)
        var remaining: Int64
        var delivered: Int64
        var elapsed: Duration
        /// Windows measured, and the latest one's rate (bytes per second).
        var windows: Int
        var latest: Double?
        var decision: SplitRule.Decision
        var testDescription: String { name }
    }

    static let probeCases: [ProbeCase] = [
        ProbeCase(
            name: "a near server at 400 MB/s: the rest takes 0.16 s, one stream ends it", remaining: 60 << 20,
            delivered: 4 << 20, elapsed: .milliseconds(10), windows: 2, latest: 400e6, decision: .notYet),
        ProbeCase(
            name: "a 10 GB file from a near server at 400 MB/s: the rest takes 26 s, so a probe",
            remaining: 10_000 << 20, delivered: 4 << 20, elapsed: .milliseconds(10), windows: 2, latest: 400e6,
            decision: .probe),
        ProbeCase(
            name: "a server sending each request 100 MB/s, 1 GB left: the rest takes 10 s, a probe",
            remaining: 1_000 << 20, delivered: 30 << 20, elapsed: .milliseconds(300), windows: 2, latest: 100e6,
            decision: .probe),
        ProbeCase(
            name: "the same with only its first window (the opening burst) measured: not yet",
            remaining: 1_000 << 20, delivered: 2 << 20, elapsed: .milliseconds(15), windows: 1, latest: 140e6,
            decision: .notYet),
        ProbeCase(
            name: "a server sending each request 20 MB/s, during its burst (2 MiB in 30 ms, 70 MB/s): not yet",
            remaining: 62 << 20, delivered: 2 << 20, elapsed: .milliseconds(30), windows: 1, latest: 70e6,
            decision: .notYet),
        ProbeCase(
            name: "the same at 50 ms (2.5 MiB, 52 MB/s since the first byte): joined as over HTTP/1.1",
            remaining: 61 << 20 + 512 << 10, delivered: 2 << 20 + 512 << 10, elapsed: .milliseconds(50),
            windows: 1, latest: 70e6, decision: .join),
        ProbeCase(
            name: "a server sending 256 KiB/s in bursts: joined as over HTTP/1.1", remaining: 3 << 20,
            delivered: 512 << 10, elapsed: .seconds(2), windows: 2, latest: 262_144, decision: .join),
        ProbeCase(
            name: "a far server during its ramp (setup 165 ms, 31 MB/s since the first byte): joined as over HTTP/1.1",
            setup: .milliseconds(165), remaining: 48 << 20, delivered: 12 << 20, elapsed: .milliseconds(400),
            windows: 2, latest: 60e6, decision: .join),
        ProbeCase(
            name: "a far server past its ramp (setup 165 ms, 150 MB/s): the rest takes 0.5 s, not yet",
            setup: .milliseconds(165), remaining: 48 << 20, delivered: 60 << 20, elapsed: .milliseconds(420),
            windows: 2, latest: 100e6, decision: .notYet),
        ProbeCase(
            name: "a fast stream, then a window without a byte (it stalled mid-way): a probe", remaining: 800 << 20,
            delivered: 200 << 20, elapsed: .seconds(2), windows: 2, latest: 0, decision: .probe),
        ProbeCase(
            name: "a stream that stalled after its head: joined", remaining: 8 << 20, delivered: 0,
            elapsed: .milliseconds(20), windows: 0, decision: .join),
        ProbeCase(
            name: "not measured for one setup yet: not yet", setup: .milliseconds(120), remaining: 60 << 20,
            delivered: 1 << 20, elapsed: .milliseconds(100), windows: 0, decision: .notYet),
    ]

    @Test(arguments: probeCases)
    func overHTTP2ASlowDownloadJoinsAFastOneProbesWhereTheRestTakesAWhile(_ row: ProbeCase) {
        let rule = SplitRule(setup: row.setup, probes: true)
        var windows = SplitRule.Windows(start: .now)
        windows.completed = row.windows
        windows.latest = row.latest
        let decision = rule.decide(
            remaining: row.remaining, delivered: row.delivered, elapsed: row.elapsed, windows: windows)
        #expect(decision == row.decision)
    }

    /// A window closes after ``SplitRule/probeBytes`` or ``SplitRule/probeWindow``,
    /// whichever comes first, and never before the setup.
    @Test func windowsCloseOnBytesOrTime() {
        let start = ContinuousClock.now
        var windows = SplitRule.Windows(start: start)
        windows.add(1 << 20, at: start + .milliseconds(50), setup: .milliseconds(2))
        #expect(windows.completed == 0)
        windows.add(1 << 20, at: start + .milliseconds(100), setup: .milliseconds(2))
        #expect(windows.completed == 1)
        #expect(windows.latest == Double(2 << 20) / 0.1)
        windows.add(64 << 10, at: start + .milliseconds(600), setup: .milliseconds(2))
        #expect(windows.completed == 1)
        windows.add(0, at: start + .milliseconds(1100), setup: .milliseconds(2))
        #expect(windows.completed == 2)
        #expect(windows.latest == Double(64 << 10))
        // A far server's window lasts its setup at least.
        var far = SplitRule.Windows(start: start)
        far.add(2 << 20, at: start + .milliseconds(100), setup: .milliseconds(165))
        #expect(far.completed == 0)
        far.add(0, at: start + .milliseconds(165), setup: .milliseconds(165))
        #expect(far.completed == 1)
    }

    struct VerdictCase: Sendable, CustomTestStringConvertible {
        var name: String
        /// The first stream's rate before the probe, bytes per second.
        var before: Double
        /// What both streams brought since the probe's first byte.
        var bytes: Int64
        var elapsed: Duration
        var pays: Bool?
        var testDescription: String { name }
    }

    static let verdictCases: [VerdictCase] = [
        VerdictCase(
            name: "each request held to 20 MB/s: two streams bring 40 MB/s, the rest join", before: 20e6,
            bytes: 4 << 20, elapsed: .milliseconds(105), pays: true),
        VerdictCase(
            name: "one link shared by both streams: 1.05x, the rest stay out", before: 100e6, bytes: 105_000_000,
            elapsed: .seconds(1), pays: false),
        VerdictCase(
            name: "just over the gain (1.35x): join", before: 1e6, bytes: 1_350_000, elapsed: .seconds(1), pays: true),
        VerdictCase(
            name: "just under the gain (1.25x): stay out", before: 1e6, bytes: 1_250_000, elapsed: .seconds(1),
            pays: false),
        VerdictCase(
            name: "a burst server after 300 ms and 200 KiB: too soon", before: 262_144, bytes: 200 << 10,
            elapsed: .milliseconds(300), pays: nil),
        VerdictCase(
            name: "a probe that brought nothing in a second: stay out", before: 1e6, bytes: 0, elapsed: .seconds(1),
            pays: false),
        VerdictCase(
            name: "a first stream that had stalled, and bytes since: join", before: 0, bytes: 64 << 10,
            elapsed: .seconds(1), pays: true),
    ]

    @Test(arguments: verdictCases)
    func theRestJoinOnlyWhenTheProbeBroughtMore(_ row: VerdictCase) {
        let rule = SplitRule(setup: .milliseconds(2), probes: true)
        let during = SegmentTable.EndGame.Delivery(bytes: row.bytes, elapsed: row.elapsed)
        #expect(rule.probePays(before: row.before, during: during) == row.pays)
    }
}
