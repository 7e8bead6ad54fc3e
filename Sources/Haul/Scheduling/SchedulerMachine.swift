/// The manager's scheduler as a plain value: which downloads wait for a slot, which hold
/// one, how many connections a download may open, and when to bring more work in from the
/// store. For each thing that happens it returns the actions the manager must carry out;
/// it does no I/O and knows nothing of transfers, journals or tasks.
///
/// ```
///                 submitted                        slot free, host under its cap
///   (store) ──admit──► queued ─────────────────────────────────────────► running
///      ▲                 │ ▲  withdrawn (paused, cancelled,                  │
///      │                 │ │  host down, followed elsewhere)                 │ stopping
///      │                 ▼ │                                                 ▼ (pause, cancel,
///      │              (gone)└──────── submitted again ◄──── transferEnded ◄── evicted, lease lost)
///      │
///   admit(limit) while the store may hold work and the queue is under half the window;
///   one admission at a time; admissionEnded says how much it found.
/// ```
///
/// The policies it owns:
/// - **Slots.** At most ``Limits/slots`` downloads run, at most ``Limits/perHost`` of them
///   against one host (`host:port`, or the proxy's), as ``InFlightRule`` says from what
///   each host answered: a host speaking HTTP/2 takes more (and, left at their default,
///   the slots grow with it), a busy one fewer. Limits can change at any time: more start
///   queued downloads at once, fewer let running ones finish.
/// - **Order.** By priority, then first come first served (``DownloadQueue``); a download
///   whose host is at its cap is passed over, not blocking those behind it.
/// - **Replace oldest.** With ``Overflow/replaceOldest`` and every slot taken, each queued
///   download that no stopping transfer is already making room for evicts the running
///   download that started longest ago.
/// - **Connections.** A started download may open up to ``Limits/connectionsPerDownload``
///   connections (a segmented transfer); more than the per-host cap only while that cap
///   is the default one (``Limits/perHostCapsConnections``): a cap somebody set clamps it.
/// - **Admission.** Work the store holds for this manager is brought into memory a window
///   at a time (``Limits/admissionWindow``), so memory stays flat however long the list.
///
/// Idle means nothing queued, running or being admitted, and no work known to wait in the
/// store: see ``isIdle``.
package struct SchedulerMachine: Sendable {
    /// The limits the scheduler keeps.
    package struct Limits: Hashable, Sendable {
        /// Downloads that run at once.
        package var slots: Int
        /// Downloads that run at once against one host.
        package var perHost: Int
        /// Connections one (segmented) download may open.
        package var connectionsPerDownload: Int
        /// Whether ``perHost`` also caps ``connectionsPerDownload``: true once a per-host
        /// cap was set (by a person, or a service's settings), false for the default one,
        /// so that asking for N connections gives N.
        /// Jobs admitted from the store into memory at most.
        package var admissionWindow: Int

        package var perHostCapsConnections: Bool
        /// Whether ``slots`` were set (by a person, or a service's settings): then they cap
        /// the downloads in flight whatever the hosts speak; left at their default, a host
        /// speaking HTTP/2 may take more (see ``InFlightRule``).
        package var slotsWereSet: Bool

        package init(
            slots: Int, perHost: Int, connectionsPerDownload: Int, admissionWindow: Int,
            perHostCapsConnections: Bool = true, slotsWereSet: Bool = true
        ) {
            self.slotsWereSet = slotsWereSet
            self.slots = max(1, slots)
            self.perHost = max(1, perHost)
            self.connectionsPerDownload = max(1, connectionsPerDownload)
            self.admissionWindow = max(1, admissionWindow)
            self.perHostCapsConnections = perHostCapsConnections
        }

        /// The connections a download that starts now is granted.
        package var connectionsGranted: Int { connections(asked: nil) }

        /// The connections granted to a download that asks for `asked` of its own (`nil`:
        /// ``connectionsPerDownload``): a per-host cap that was set clamps them.
        package func connections(asked: Int?) -> Int {
            let wanted = max(1, asked ?? connectionsPerDownload)
            return perHostCapsConnections ? min(wanted, perHost) : wanted
        }
    }

    /// What happens when every slot is taken.
    package enum Overflow: Hashable, Sendable {
        /// New downloads wait for a slot.
        case queue
        /// The running download that started longest ago makes room.
        case replaceOldest
    }

    /// Something that happened to the scheduler's downloads, or to the manager.
    package enum Event: Hashable, Sendable {
        /// `id` waits for a slot now (new, resumed, requeued, its host back, admitted). A
        /// running `id` queues when its transfer ends (at the back of its line). `connections`
        /// is what the download asks for of its own (`nil`: the manager's
        /// ``Limits/connectionsPerDownload``); it is granted under the same rule.
        case submitted(DownloadID, host: String, priority: DownloadPriority, connections: Int? = nil)
        /// `id` no longer waits (paused, cancelled, its host down, or run elsewhere).
        case withdrawn(DownloadID)
        /// The running `id` was asked to stop (pause, cancel, eviction, a lost lease): its
        /// slot is freed when its transfer ends.
        case stopping(DownloadID)
        /// The running `id`'s transfer ended: its slot is free.
        case transferEnded(DownloadID)
        /// `host` answered a download (see ``InFlightRule/Answer``).
        case answered(host: String, InFlightRule.Answer)
        /// `id`'s priority changed (it keeps its place among equals if it is queued).
        case priorityChanged(DownloadID, DownloadPriority)
        /// The slot limits changed.
        /// `perHost`, when given, is a cap somebody set: from then on it clamps the
        /// connections of each download too. `connections` is for downloads that start
        /// from now on.
        case limitsChanged(slots: Int?, perHost: Int?, connections: Int? = nil)
        /// The store may hold work for this manager (jobs were submitted to it, a process
        /// asked to resume some, or a notification or poll said so).
        case storeMayHaveWork
        /// The admission under way ended: it asked for `asked` jobs and got `found`, or
        /// `failed` (the store could not be read; it is tried again at the next event).
        case admissionEnded(asked: Int, found: Int, failed: Bool)
        /// The manager shuts down: nothing starts any more.
        case shutDown
    }

    /// What the manager must do.
    package enum Action: Hashable, Sendable {
        /// Start `id`'s transfer in a slot it now holds, with at most `connections` connections.
        case start(DownloadID, connections: Int)
        /// Stop the running `id` to make room for a queued download (replace oldest); its
        /// slot is freed when its transfer ends.
        case evict(DownloadID)
        /// Move up to `limit` queued jobs of this manager from the store into memory, then
        /// report ``Event/admissionEnded(asked:found:failed:)``.
        case admit(limit: Int)
    }

    private struct Running: Hashable, Sendable {
        var host: String
        var order: UInt64
        var isStopping = false
        /// Submitted again while its transfer was still ending: it queues once the slot is free.
        var requeue: DownloadPriority?
    }

    package private(set) var limits: Limits {
        didSet {
            inFlight.slots = limits.slots
            inFlight.slotsWereSet = limits.slotsWereSet
            inFlight.perHost = limits.perHost
            inFlight.perHostWasSet = limits.perHostCapsConnections
        }
    }
    /// How many downloads may run against each host, and in all, from the limits and what
    /// the hosts answered.
    package private(set) var inFlight: InFlightRule
    package let overflow: Overflow
    private var queue = DownloadQueue()
    /// The host of each queued download.
    private var queuedHosts: [DownloadID: String] = [:]
    /// The connections the downloads that asked for their own asked for, while they wait.
    private var askedConnections: [DownloadID: Int] = [:]
    private var running: [DownloadID: Running] = [:]
    private var hostCounts: [String: Int] = [:]
    private var startCounter: UInt64 = 0
    /// Whether the store may hold work for this manager that is not in memory yet.
    package private(set) var storeMayHaveWork = false
    package private(set) var isAdmitting = false
    /// The store said it may have work while an admission was under way: that admission's
    /// read may have come before the work did, so its short answer proves nothing.
    private var noticedWhileAdmitting = false
    private var isShutDown = false

    package init(limits: Limits, overflow: Overflow = .queue) {
        self.limits = limits
        self.inFlight = InFlightRule(
            perHost: limits.perHost, perHostWasSet: limits.perHostCapsConnections, slots: limits.slots,
            slotsWereSet: limits.slotsWereSet)
        self.overflow = overflow
    }

    // MARK: - Reading

    /// Downloads that wait for a slot.
    package var queuedCount: Int { queue.count }
    /// How many jobs an admission started now could bring into memory: the window less
    /// what already waits here.
    package var admissionRoom: Int { isShutDown ? 0 : max(0, limits.admissionWindow - queue.count) }
    /// Downloads that hold a slot (stopping ones included, until their transfer ends).
    package var runningCount: Int { running.count }
    /// Whether `id` holds a slot.
    package func isRunning(_ id: DownloadID) -> Bool { running[id] != nil }
    /// Whether `id` waits for a slot.
    package func isQueued(_ id: DownloadID) -> Bool { queue.contains(id) }
    /// Downloads that hold a slot against `host`.
    package func runningCount(host: String) -> Int { hostCounts[host, default: 0] }

    /// Nothing waits or runs here, nothing is being admitted, and the store is not known to
    /// hold more (after shutdown, work left in the store does not count).
    package var isIdle: Bool {
        queue.isEmpty && running.isEmpty && !isAdmitting && (!storeMayHaveWork || isShutDown)
    }

    /// ``isIdle``, and no download the manager holds outside the queue is still under way:
    /// `phases` are those of the manager's downloads, of which only paused ones (here, or
    /// followed in another process) let it be idle. A download waiting for its host, or
    /// followed while another process runs it, is still going to end.
    func isIdle(holding phases: some Sequence<JobLifecycle.Phase>) -> Bool {
        guard isIdle else { return false }
        return phases.allSatisfy { phase in
            switch phase {
            case .paused: true
            case .elsewhere(let following): following.isPaused
            case .queued, .running, .waiting, .finished: false
            }
        }
    }

    // MARK: - Events

    /// Takes in `event` and returns what to do, in order.
    package mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .submitted(let id, let host, let priority, let connections):
            askedConnections[id] = connections
            guard running[id] == nil else {
                running[id]?.requeue = priority
                return []
            }
            queue.enqueue(id, priority: priority)
            queuedHosts[id] = host
        case .withdrawn(let id):
            running[id]?.requeue = nil
            queue.remove(id)
            queuedHosts[id] = nil
            askedConnections[id] = nil
        case .stopping(let id):
            running[id]?.isStopping = true
            return []
        case .transferEnded(let id):
            guard let ended = running.removeValue(forKey: id) else { return [] }
            hostCounts[ended.host, default: 1] -= 1
            if hostCounts[ended.host] == 0 { hostCounts[ended.host] = nil }
            if let priority = ended.requeue, !isShutDown {
                queue.enqueue(id, priority: priority)
                queuedHosts[id] = ended.host
            }
        case .answered(let host, let answer):
            inFlight.heard(answer, from: host)
        case .priorityChanged(let id, let priority):
            if running[id]?.requeue != nil { running[id]?.requeue = priority }
            guard queue.contains(id) else { return [] }
            queue.reprioritize(id, to: priority)
        case .limitsChanged(let slots, let perHost, let connections):
            if let slots {
                limits.slots = max(1, slots)
                limits.slotsWereSet = true
            }
            if let connections { limits.connectionsPerDownload = max(1, connections) }
            if let perHost {
                limits.perHost = max(1, perHost)
                limits.perHostCapsConnections = true
            }
        case .storeMayHaveWork:
            storeMayHaveWork = true
            if isAdmitting { noticedWhileAdmitting = true }
        case .admissionEnded(let asked, let found, let failed):
            isAdmitting = false
            // A short answer means the store has nothing more for now, unless work was
            // announced while it was being read (that work is asked for next); a failure
            // leaves the work there for the next event to ask again (never a loop of failing
            // reads).
            if !failed, found < asked, !noticedWhileAdmitting { storeMayHaveWork = false }
            noticedWhileAdmitting = false
            if failed { return startWhatFits() + evictions() }
        case .shutDown:
            isShutDown = true
            queue = DownloadQueue()
            queuedHosts = [:]
            askedConnections = [:]
            return []
        }
        return schedule()
    }

    // MARK: - Policy

    private mutating func schedule() -> [Action] {
        startWhatFits() + admission() + evictions()
    }

    /// Starts queued downloads while slots are free, by priority then arrival, passing over
    /// those whose host is at its cap.
    private mutating func startWhatFits() -> [Action] {
        guard !isShutDown else { return [] }
        var actions: [Action] = []
        let slots = inFlight.allowedInAll
        while running.count < slots {
            let next: DownloadID?
            do {
                // Copies for the closure, released before the tables change (no copy-on-write).
                let counts = hostCounts, hosts = queuedHosts, rule = inFlight
                next = queue.dequeue(where: {
                    let host = hosts[$0] ?? ""
                    return counts[host, default: 0] < rule.allowed(for: host)
                })
            }
            guard let id = next else { break }
            let host = queuedHosts.removeValue(forKey: id) ?? ""
            startCounter += 1
            running[id] = Running(host: host, order: startCounter)
            hostCounts[host, default: 0] += 1
            actions.append(.start(id, connections: limits.connections(asked: askedConnections.removeValue(forKey: id))))
        }
        return actions
    }

    /// Asks for more work from the store when it may have some and the queue runs low
    /// (under half the window), one admission at a time.
    private mutating func admission() -> [Action] {
        guard !isShutDown, storeMayHaveWork, !isAdmitting, queue.count < max(1, limits.admissionWindow / 2)
        else { return [] }
        isAdmitting = true
        return [.admit(limit: limits.admissionWindow - queue.count)]
    }

    /// With ``Overflow/replaceOldest`` and every slot taken, evicts the oldest running
    /// downloads, one for each queued download that no stopping transfer makes room for.
    private mutating func evictions() -> [Action] {
        guard !isShutDown, overflow == .replaceOldest, running.count >= inFlight.allowedInAll else { return [] }
        let stopping = running.values.filter(\.isStopping).count
        var deficit = queue.count - stopping
        guard deficit > 0 else { return [] }
        var actions: [Action] = []
        for (id, _) in running.filter({ !$0.value.isStopping }).sorted(by: { $0.value.order < $1.value.order }) {
            guard deficit > 0 else { break }
            running[id]?.isStopping = true
            actions.append(.evict(id))
            deficit -= 1
        }
        return actions
    }
}
