/// How many downloads may be in flight against one host, and in all: enough to fill a far
/// link without the user choosing `-j`, no more than the host's protocol and its answers
/// allow. A plain value: ``SchedulerMachine`` asks it before starting each download, and
/// tells it what each host answered; `InFlightRuleTests` check the table.
///
/// - A host not heard from yet, or one that answered over HTTP/1.1, gets the per-host cap
///   (default 6): one connection per download, as browsers keep.
/// - A host that speaks HTTP/2 multiplexes downloads as streams of its connection: from
///   the moment its first connection chooses `h2` (the manager tells the rule then, a
///   round trip before any response ends) or it answered over HTTP/2, it gets
///   ``http2PerHost`` in flight, unless somebody set a per-host cap (`--per-host`),
///   which holds whatever the protocol. (The HTTP client opens no more streams than the
///   server's `SETTINGS_MAX_CONCURRENT_STREAMS` once it has said it, and queues the rest.)
/// - The slots (`-j`) cap the total when somebody set them; left at their default they
///   grow to what an HTTP/2 host is allowed, so a list from one such host is not held to
///   the default's 10.
/// - A host that answers 429 or 503 has its allowance halved, down to 1; each download it
///   then answers without complaint gives one back, up to its protocol's cap (additive
///   increase, multiplicative decrease: no clock, no timer).
package struct InFlightRule: Hashable, Sendable {
    /// What a host's response said about it.
    package enum Answer: Hashable, Sendable {
        /// An answer over HTTP/1.x.
        case http1
        /// An answer over HTTP/2.
        case http2
        /// A connection to the host chose `h2` (ALPN), before any answer on it: HTTP/2's
        /// allowance, with a busy host's share left as it is (no download was served).
        case choseHTTP2
        /// 429 or 503: the host is busy.
        case busy
    }

    /// Downloads in flight against one HTTP/2 host, when nobody set a per-host cap: as many
    /// streams as fill a 40 ms round trip with small files, below the concurrent streams
    /// nginx (128) and Apache (100) allow by default.
    package static let http2PerHost = 64

    private struct Host: Hashable, Sendable {
        var http2 = false
        /// Below the protocol's cap after a busy answer; `nil` at the cap.
        var allowance: Int?
    }

    /// The per-host cap for HTTP/1.1 and hosts not heard from (default 6).
    package var perHost: Int
    /// Whether somebody set ``perHost``: then it holds for HTTP/2 too.
    package var perHostWasSet: Bool
    /// The slots: downloads in flight in all.
    package var slots: Int
    /// Whether somebody set ``slots``: then they cap the total whatever the protocol.
    package var slotsWereSet: Bool
    private var hosts: [String: Host] = [:]

    package init(perHost: Int, perHostWasSet: Bool, slots: Int, slotsWereSet: Bool) {
        self.perHost = max(1, perHost)
        self.perHostWasSet = perHostWasSet
        self.slots = max(1, slots)
        self.slotsWereSet = slotsWereSet
    }

    /// Downloads that may be in flight against `host`.
    package func allowed(for host: String) -> Int {
        let known = hosts[host] ?? Host()
        let cap = cap(of: known)
        return min(cap, known.allowance ?? cap)
    }

    /// What `host`'s protocol allows it, before any busy answer.
    private func cap(of host: Host) -> Int {
        host.http2 && !perHostWasSet ? Self.http2PerHost : perHost
    }

    /// Downloads that may be in flight in all: the slots, or, left at their default, as
    /// many as the most generous host is allowed.
    package var allowedInAll: Int {
        guard !slotsWereSet else { return slots }
        return hosts.keys.reduce(slots) { max($0, allowed(for: $1)) }
    }

    /// Takes in what `host` answered.
    package mutating func heard(_ answer: Answer, from host: String) {
        var known = hosts[host] ?? Host()
        switch answer {
        case .busy:
            known.allowance = max(1, allowed(for: host) / 2)
        case .choseHTTP2:
            known.http2 = true
        case .http1, .http2:
            known.http2 = answer == .http2
            if let allowance = known.allowance {
                known.allowance = allowance + 1 >= cap(of: known) ? nil : allowance + 1
            }
        }
        // A host like any other is not kept: the table holds only what differs.
        hosts[host] = !known.http2 && known.allowance == nil ? nil : known
    }
}
