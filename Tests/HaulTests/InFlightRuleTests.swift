@testable import Haul
import Testing

/// How many downloads may be in flight against a host, from what it answered, without
/// sockets: the rule as a table, then the scheduler carrying it out.
@Suite("In-flight rule")
struct InFlightRuleTests {
    typealias Answer = InFlightRule.Answer

    /// A case: the caps somebody set (`nil`: the defaults, 10 slots and 6 per host), what
    /// host `h` answered in turn, and what is then allowed for it and in all.
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var slots: Int?
        var perHost: Int?
        var answers: [Answer]
        var forHost: Int
        var inAll: Int
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "a host not heard from: 6, in 10 slots", slots: nil, perHost: nil, answers: [], forHost: 6, inAll: 10),
        Case(name: "HTTP/1.1: 6", slots: nil, perHost: nil, answers: [.http1], forHost: 6, inAll: 10),
        Case(name: "HTTP/2: 64 streams, the default slots grow with it", slots: nil, perHost: nil, answers: [.http2], forHost: 64, inAll: 64),
        Case(name: "HTTP/2 with -j 16: the slots hold", slots: 16, perHost: nil, answers: [.http2], forHost: 64, inAll: 16),
        Case(name: "HTTP/2 with --per-host 8: the cap holds", slots: nil, perHost: 8, answers: [.http2], forHost: 8, inAll: 10),
        Case(name: "busy once: halved", slots: nil, perHost: nil, answers: [.http1, .busy], forHost: 3, inAll: 10),
        Case(name: "busy over HTTP/2: 32", slots: nil, perHost: nil, answers: [.http2, .busy], forHost: 32, inAll: 32),
        Case(name: "busy again and again: down to 1", slots: nil, perHost: nil, answers: [.busy, .busy, .busy, .busy], forHost: 1, inAll: 10),
        Case(name: "each answer without complaint gives one back", slots: nil, perHost: nil, answers: [.busy, .busy, .http1], forHost: 2, inAll: 10),
        Case(name: "back at the cap, no further", slots: nil, perHost: nil, answers: [.busy, .http1, .http1, .http1, .http1], forHost: 6, inAll: 10),
        Case(name: "HTTP/2 then HTTP/1.1 (another server behind the name): 6", slots: nil, perHost: nil, answers: [.http2, .http1], forHost: 6, inAll: 10),
        Case(name: "a connection chose h2, nothing answered yet: 64 at once", slots: nil, perHost: nil, answers: [.choseHTTP2], forHost: 64, inAll: 64),
        Case(name: "busy over HTTP/2, then a new connection chose h2: the share stays halved", slots: nil, perHost: nil, answers: [.http2, .busy, .choseHTTP2], forHost: 32, inAll: 32),
        Case(name: "h2 chosen with --per-host 8: the cap holds", slots: nil, perHost: 8, answers: [.choseHTTP2], forHost: 8, inAll: 10),
    ]

    @Test(arguments: cases)
    func allowsByProtocolCapsAndBusyAnswers(_ row: Case) {
        var rule = InFlightRule(
            perHost: row.perHost ?? 6, perHostWasSet: row.perHost != nil, slots: row.slots ?? 10,
            slotsWereSet: row.slots != nil)
        for answer in row.answers { rule.heard(answer, from: "h:443") }
        #expect(rule.allowed(for: "h:443") == row.forHost)
        #expect(rule.allowedInAll == row.inAll)
        // Another host is not touched by what this one answered
        #expect(rule.allowed(for: "other:443") == (row.perHost ?? 6))
    }

    static func machine(slotsSet: Bool) -> SchedulerMachine {
        SchedulerMachine(
            limits: .init(
                slots: 10, perHost: 6, connectionsPerDownload: 4, admissionWindow: 1000, perHostCapsConnections: false,
                slotsWereSet: slotsSet))
    }

    static func started(_ actions: [SchedulerMachine.Action]) -> Int {
        actions.filter { if case .start = $0 { true } else { false } }.count
    }

    @Test func aHostThatAnswersOverHTTP2TakesMoreInFlightAtOnce() {
        // Given 100 downloads from one host, with the default limits
        var machine = Self.machine(slotsSet: false)
        var started = 0
        for index in 0..<100 {
            started += Self.started(machine.handle(.submitted(DownloadID("\(index)"), host: "h:443", priority: .normal)))
        }
        // Then 6 start, as for any host not heard from
        #expect(started == 6)
        // When the first ends, its host having answered over HTTP/2
        started += Self.started(machine.handle(.answered(host: "h:443", .http2)))
        started += Self.started(machine.handle(.transferEnded(DownloadID("0"))))
        // Then 64 run at once
        #expect(machine.runningCount(host: "h:443") == 64)
        #expect(started == 65)
    }

    @Test func slotsSomebodySetHoldForAnHTTP2Host() {
        var machine = Self.machine(slotsSet: true)
        for index in 0..<100 {
            _ = machine.handle(.submitted(DownloadID("\(index)"), host: "h:443", priority: .normal))
        }
        _ = machine.handle(.answered(host: "h:443", .http2))
        _ = machine.handle(.transferEnded(DownloadID("0")))
        #expect(machine.runningCount(host: "h:443") == 10)
    }

    @Test func aBusyHostRunsFewerUntilItServesAgain() {
        var machine = Self.machine(slotsSet: false)
        for index in 0..<20 {
            _ = machine.handle(.submitted(DownloadID("\(index)"), host: "h:80", priority: .normal))
        }
        #expect(machine.runningCount(host: "h:80") == 6)
        // A 503: the host's allowance is halved, and ends start nothing until under it
        _ = machine.handle(.answered(host: "h:80", .busy))
        #expect(Self.started(machine.handle(.transferEnded(DownloadID("0")))) == 0)
        #expect(Self.started(machine.handle(.transferEnded(DownloadID("1")))) == 0)
        #expect(Self.started(machine.handle(.transferEnded(DownloadID("2")))) == 0)
        #expect(Self.started(machine.handle(.transferEnded(DownloadID("3")))) == 1)
        #expect(machine.runningCount(host: "h:80") == 3)
        // Answers without complaint give it back one at a time
        _ = machine.handle(.answered(host: "h:80", .http1))
        #expect(machine.runningCount(host: "h:80") == 4)
    }
}
