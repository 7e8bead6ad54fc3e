@testable import Haul
import Testing

/// The scheduler's policies, event by event, without sockets: slots, per-host caps,
/// priorities, FIFO, replace-oldest, connections and admission from the store.
@Suite("SchedulerMachine")
struct SchedulerMachineTests {
    typealias Event = SchedulerMachine.Event
    typealias Action = SchedulerMachine.Action

    static func machine(
        slots: Int = 10, perHost: Int = 6, connections: Int = 4, window: Int = 100,
        overflow: SchedulerMachine.Overflow = .queue, perHostIsSet: Bool = true
    ) -> SchedulerMachine {
        SchedulerMachine(
            limits: .init(
                slots: slots, perHost: perHost, connectionsPerDownload: connections, admissionWindow: window,
                perHostCapsConnections: perHostIsSet),
            overflow: overflow)
    }

    static func id(_ name: String) -> DownloadID { DownloadID(name) }

    static func submit(_ name: String, host: String = "a:80", _ priority: DownloadPriority = .normal) -> Event {
        .submitted(id(name), host: host, priority: priority)
    }

    /// The IDs a list of actions starts, in order.
    static func started(_ actions: [Action]) -> [String] {
        actions.compactMap { if case .start(let id, _) = $0 { id.rawValue } else { nil } }
    }

    /// A sequence of events and, after the last, the actions expected of it.
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var machine: SchedulerMachine
        var events: [Event]
        var last: [Action]
        var testDescription: String { name }
    }

    @Test(arguments: [
        // per-host cap, set?, the manager's connections, the request's own, granted
        (6, false, 4, nil, 4), (6, false, 4, 8, 8), (6, true, 4, 8, 6), (3, true, 4, nil, 3), (6, false, 4, 0, 1),
    ] as [(Int, Bool, Int, Int?, Int)])
    func aDownloadsConnections(perHost: Int, isSet: Bool, manager: Int, asked: Int?, granted: Int) {
        let limits = SchedulerMachine.Limits(
            slots: 10, perHost: perHost, connectionsPerDownload: manager, admissionWindow: 10,
            perHostCapsConnections: isSet)
        #expect(limits.connections(asked: asked) == granted)
    }

    @Test(arguments: [
        Row(
            name: "a free slot starts a submitted download at once, with the connection budget",
            machine: machine(), events: [submit("1")], last: [.start(id("1"), connections: 4)]),
        Row(
            name: "a per-host cap that was set clamps the connection budget",
            machine: machine(perHost: 2, connections: 8), events: [submit("1")],
            last: [.start(id("1"), connections: 2)]),
        Row(
            name: "the default per-host cap does not: asking for 8 connections gives 8",
            machine: machine(perHost: 6, connections: 8, perHostIsSet: false), events: [submit("1")],
            last: [.start(id("1"), connections: 8)]),
        Row(
            name: "a per-host cap set while running clamps the connections of what starts next",
            machine: machine(slots: 1, perHost: 6, connections: 8, perHostIsSet: false),
            events: [submit("1"), submit("2"), .limitsChanged(slots: nil, perHost: 3), .transferEnded(id("1"))],
            last: [.start(id("2"), connections: 3)]),
        Row(
            name: "a download's own connections are granted under the same rule: a set per-host cap clamps them",
            machine: machine(perHost: 3, connections: 4),
            events: [.submitted(id("1"), host: "a:80", priority: .normal, connections: 8)],
            last: [.start(id("1"), connections: 3)]),
        Row(
            name: "a download's own connections hold across a requeue behind a busy slot",
            machine: machine(slots: 1, perHost: 6, connections: 4, perHostIsSet: false),
            events: [submit("1"), .submitted(id("2"), host: "a:80", priority: .normal, connections: 1),
                     .transferEnded(id("1"))],
            last: [.start(id("2"), connections: 1)]),
        Row(
            name: "new connections apply to downloads that start next",
            machine: machine(slots: 1, perHost: 6, connections: 4, perHostIsSet: false),
            events: [submit("1"), submit("2"), .limitsChanged(slots: nil, perHost: nil, connections: 10),
                     .transferEnded(id("1"))],
            last: [.start(id("2"), connections: 10)]),
        Row(
            name: "with every slot taken a new download waits",
            machine: machine(slots: 1), events: [submit("1"), submit("2")], last: []),
        Row(
            name: "a freed slot goes to the next in line",
            machine: machine(slots: 1), events: [submit("1"), submit("2"), .transferEnded(id("1"))],
            last: [.start(id("2"), connections: 4)]),
        Row(
            name: "a download whose host is at its cap is passed over, not blocking the others",
            machine: machine(slots: 3, perHost: 1),
            events: [submit("1", host: "a:80"), submit("2", host: "a:80"), submit("3", host: "b:80")],
            last: [.start(id("3"), connections: 1)]),
        Row(
            name: "a withdrawn download never starts",
            machine: machine(slots: 1),
            events: [submit("1"), submit("2"), submit("3"), .withdrawn(id("2")), .transferEnded(id("1"))],
            last: [.start(id("3"), connections: 4)]),
        Row(
            name: "a stopping transfer keeps its slot until it ends",
            machine: machine(slots: 1), events: [submit("1"), submit("2"), .stopping(id("1"))], last: []),
        Row(
            name: "an end reported for a download that was not running changes nothing",
            machine: machine(slots: 1), events: [submit("1"), submit("2"), .transferEnded(id("2"))], last: []),
        Row(
            name: "more slots start waiting downloads at once",
            machine: machine(slots: 1),
            events: [submit("1"), submit("2"), submit("3"), .limitsChanged(slots: 3, perHost: nil)],
            last: [.start(id("2"), connections: 4), .start(id("3"), connections: 4)]),
        Row(
            name: "a higher per-host cap starts what the host held back",
            machine: machine(slots: 5, perHost: 1),
            events: [submit("1"), submit("2"), .limitsChanged(slots: nil, perHost: 2)],
            last: [.start(id("2"), connections: 2)]),
        Row(
            name: "fewer slots let running downloads finish and start nothing",
            machine: machine(slots: 3),
            events: [submit("1"), submit("2"), submit("3"), submit("4"), .limitsChanged(slots: 1, perHost: nil),
                     .transferEnded(id("1"))],
            last: []),
        Row(
            name: "limits never go below one",
            machine: machine(slots: 2),
            events: [submit("1"), .transferEnded(id("1")), .limitsChanged(slots: 0, perHost: 0), submit("2")],
            last: [.start(id("2"), connections: 1)]),
        Row(
            name: "after shutdown nothing starts",
            machine: machine(slots: 1), events: [submit("1"), submit("2"), .shutDown, .transferEnded(id("1"))],
            last: []),
    ])
    func policy(_ row: Row) {
        var machine = row.machine
        var last: [Action] = []
        for event in row.events { last = machine.handle(event) }
        #expect(last == row.last)
    }

    @Test func priorityFirstThenFirstComeFirstServed() {
        var machine = Self.machine(slots: 1)
        _ = machine.handle(Self.submit("running"))
        for (name, priority) in [("low", DownloadPriority.low), ("n1", .normal), ("high", .high), ("n2", .normal),
                                 ("veryHigh", .veryHigh), ("veryLow", .veryLow)] {
            #expect(machine.handle(Self.submit(name, priority)) == [])
        }
        var order: [String] = []
        var ending = "running"
        while true {
            let started = Self.started(machine.handle(.transferEnded(Self.id(ending))))
            guard let next = started.first else { break }
            order.append(next)
            ending = next
        }
        #expect(order == ["veryHigh", "high", "n1", "n2", "low", "veryLow"])
        #expect(machine.isIdle)
    }

    @Test func aRaisedPriorityMovesAheadAndKeepsItsPlaceAmongEquals() {
        var machine = Self.machine(slots: 1)
        _ = machine.handle(Self.submit("running"))
        _ = machine.handle(Self.submit("h1", .high))
        _ = machine.handle(Self.submit("n1"))
        _ = machine.handle(Self.submit("h2", .high))
        // n1 came before h2: raised to high, it goes before h2 but after h1.
        #expect(machine.handle(.priorityChanged(Self.id("n1"), .high)) == [])
        var order: [String] = []
        var ending = "running"
        while let next = Self.started(machine.handle(.transferEnded(Self.id(ending)))).first {
            order.append(next)
            ending = next
        }
        #expect(order == ["h1", "n1", "h2"])
    }

    @Test func aDownloadSubmittedAgainWhileItsTransferEndsQueuesAtTheBackOnceTheSlotIsFree() {
        var machine = Self.machine(slots: 1)
        _ = machine.handle(Self.submit("1"))
        _ = machine.handle(Self.submit("2"))
        // Its transfer was interrupted and requeued: the lifecycle submits it before the end.
        #expect(machine.handle(Self.submit("1")) == [])
        #expect(machine.runningCount == 1 && machine.queuedCount == 1)
        #expect(Self.started(machine.handle(.transferEnded(Self.id("1")))) == ["2"])
        #expect(machine.isQueued(Self.id("1")))
        #expect(Self.started(machine.handle(.transferEnded(Self.id("2")))) == ["1"])
    }

    @Test func aRequeueWithdrawnBeforeTheEndDoesNotQueue() {
        var machine = Self.machine(slots: 1)
        _ = machine.handle(Self.submit("1"))
        _ = machine.handle(Self.submit("1"))
        _ = machine.handle(.withdrawn(Self.id("1")))
        #expect(machine.handle(.transferEnded(Self.id("1"))) == [])
        #expect(machine.isIdle)
    }

    @Test func perHostCapsCountEachHostApart() {
        var machine = Self.machine(slots: 10, perHost: 2)
        var started: [String] = []
        for index in 0..<4 { started += Self.started(machine.handle(Self.submit("a\(index)", host: "a:80"))) }
        for index in 0..<4 { started += Self.started(machine.handle(Self.submit("b\(index)", host: "b:443"))) }
        #expect(started == ["a0", "a1", "b0", "b1"])
        #expect(machine.runningCount(host: "a:80") == 2)
        #expect(machine.runningCount(host: "b:443") == 2)
        #expect(Self.started(machine.handle(.transferEnded(Self.id("b0")))) == ["b2"])
        #expect(Self.started(machine.handle(.transferEnded(Self.id("a1")))) == ["a2"])
    }

    // MARK: - Replace oldest

    @Test func replaceOldestEvictsTheDownloadThatStartedLongestAgo() {
        var machine = Self.machine(slots: 2, overflow: .replaceOldest)
        _ = machine.handle(Self.submit("old"))
        _ = machine.handle(Self.submit("young"))
        #expect(machine.handle(Self.submit("new")) == [.evict(Self.id("old"))])
        // The eviction frees the slot when the transfer ends; the new one takes it.
        #expect(Self.started(machine.handle(.transferEnded(Self.id("old")))) == ["new"])
        #expect(machine.handle(Self.submit("newer")) == [.evict(Self.id("young"))])
    }

    @Test func replaceOldestEvictsOncePerWaitingDownloadCountingTransfersAlreadyStopping() {
        var machine = Self.machine(slots: 3, overflow: .replaceOldest)
        for name in ["1", "2", "3"] { _ = machine.handle(Self.submit(name)) }
        // A pause is already making room for one.
        #expect(machine.handle(.stopping(Self.id("2"))) == [])
        #expect(machine.handle(Self.submit("4")) == [])
        #expect(machine.handle(Self.submit("5")) == [.evict(Self.id("1"))])
        #expect(machine.handle(Self.submit("6")) == [.evict(Self.id("3"))])
        // Nobody is left to evict: the seventh waits.
        #expect(machine.handle(Self.submit("7")) == [])
    }

    @Test func queueingPolicyNeverEvicts() {
        var machine = Self.machine(slots: 1, overflow: .queue)
        _ = machine.handle(Self.submit("1"))
        #expect(machine.handle(Self.submit("2")) == [])
    }

    // MARK: - Admission from the store

    @Test func theStoreIsAskedForAWindowOnceAtATime() {
        var machine = Self.machine(slots: 2, window: 10)
        #expect(machine.handle(.storeMayHaveWork) == [.admit(limit: 10)])
        #expect(machine.isAdmitting)
        // A second notice while admitting asks nothing more.
        #expect(machine.handle(.storeMayHaveWork) == [])
        #expect(!machine.isIdle)
        // The window's jobs come in; two start.
        var started: [String] = []
        for index in 0..<10 { started += Self.started(machine.handle(Self.submit("\(index)"))) }
        #expect(started == ["0", "1"])
        // A full window: the store may have more, but the queue (8) is above half the window.
        #expect(machine.handle(.admissionEnded(asked: 10, found: 10, failed: false)) == [])
        #expect(machine.storeMayHaveWork)
        // Once the queue runs under half the window, the next admission tops it up.
        var actions: [Action] = []
        for index in 0..<4 { actions = machine.handle(.transferEnded(Self.id("\(index)"))) }
        #expect(machine.queuedCount == 4)
        #expect(actions == [.start(Self.id("5"), connections: 4), .admit(limit: 6)])
    }

    @Test func aShortAnswerMeansTheStoreIsDrained() {
        var machine = Self.machine(window: 10)
        _ = machine.handle(.storeMayHaveWork)
        _ = machine.handle(Self.submit("1"))
        #expect(machine.handle(.admissionEnded(asked: 10, found: 1, failed: false)) == [])
        #expect(!machine.storeMayHaveWork)
        _ = machine.handle(.transferEnded(Self.id("1")))
        #expect(machine.isIdle)
    }

    @Test func workAnnouncedDuringAnAdmissionIsAskedForAfterIt() {
        var machine = Self.machine(window: 10)
        #expect(machine.handle(.storeMayHaveWork) == [.admit(limit: 10)])
        // A job is queued in the store (a retry) after the admission's read found nothing.
        #expect(machine.handle(.storeMayHaveWork) == [])
        // The short answer does not hide it: the store is asked again at once.
        #expect(machine.handle(.admissionEnded(asked: 10, found: 0, failed: false)) == [.admit(limit: 10)])
        #expect(!machine.isIdle)
        // That one's short answer, with no news meanwhile, means the store is drained.
        #expect(machine.handle(.admissionEnded(asked: 10, found: 0, failed: false)) == [])
        #expect(machine.isIdle)
    }

    @Test func aFailedAdmissionIsRetriedAtTheNextEventNotInALoop() {
        var machine = Self.machine(window: 10)
        _ = machine.handle(.storeMayHaveWork)
        #expect(machine.handle(.admissionEnded(asked: 10, found: 0, failed: true)) == [])
        #expect(!machine.isAdmitting)
        #expect(!machine.isIdle)
        #expect(machine.handle(.storeMayHaveWork) == [.admit(limit: 10)])
    }

    @Test func nothingIsAdmittedAfterShutdownAndLeftoverWorkIsNotWaitedFor() {
        var machine = Self.machine(window: 10)
        _ = machine.handle(.storeMayHaveWork)
        _ = machine.handle(.shutDown)
        #expect(machine.handle(.admissionEnded(asked: 10, found: 10, failed: false)) == [])
        #expect(machine.handle(.storeMayHaveWork) == [])
        #expect(machine.isIdle)
    }

    @Test func idleOnlyWhenNothingWaitsRunsOrIsBeingAdmitted() {
        var machine = Self.machine(slots: 1)
        #expect(machine.isIdle)
        _ = machine.handle(Self.submit("1"))
        _ = machine.handle(Self.submit("2"))
        #expect(!machine.isIdle)
        _ = machine.handle(.withdrawn(Self.id("2")))
        #expect(!machine.isIdle)
        _ = machine.handle(.transferEnded(Self.id("1")))
        #expect(machine.isIdle)
    }

    static func following(paused: Bool) -> Following {
        var following = Following(holder: 7, owner: JournalOwner(pid: 1, host: "h"))
        following.isPaused = paused
        return following
    }

    @Test(arguments: [
        ([], true),
        ([.paused], true),
        ([.paused, .waiting], false),
        ([.running], false),
        ([.queued], false),
        ([.elsewhere(Self.following(paused: true))], true),
        ([.elsewhere(Self.following(paused: false))], false),
    ] as [([JobLifecycle.Phase], Bool)])
    func idleOnlyWhenEveryDownloadHeldIsPaused(phases: [JobLifecycle.Phase], idle: Bool) {
        let machine = Self.machine()
        #expect(machine.isIdle(holding: phases) == idle)
    }
}
