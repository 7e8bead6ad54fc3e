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
        #expect(rule.shouldJoin(remaining: row.remaining, delivered: row.delivered, elapsed: row.elapsed) == row.join)
    }
}
