import NIOConcurrencyHelpers

/// The byte ranges of a segmented download and who is fetching which, shared by its
/// connections.
///
/// Each segment has a `next` byte (the next one a connection will write; bytes before it
/// are written or being written), a `written` byte (everything before it is in the file)
/// and an `end` (exclusive). A connection that runs out of work takes half of the largest
/// remaining segment ("work stealing"): the victim's `end` shrinks, and its connection stops
/// there. All of it is behind one lock, touched once per body part.
///
/// **The end game.** With several sources, the last segments are too small to split, and
/// the slowest source's connection would finish alone while the others wait. An idle
/// connection on another source then *chases* the largest of them: it asks its own source
/// for the same rest of the range, passes over the bytes the chased connection has already
/// taken, and takes the rest of the range over when its response gets ahead. Whichever
/// wins, the other connection is stopped (``Reservation/stopping``). Every byte is still
/// written once, by one connection, so what the table says is in the file stays true.
///
/// A chase costs bytes: both connections fetch the same rest until one gets ahead. So a
/// range is chased only where it pays (``EndGame/isWorthChasing(rest:chased:chaser:)``):
/// when the connection holding it is measurably slower than the chaser's source has been,
/// from the bytes each wrote since its claim and the time that took (``wrote(_:upTo:at:)``).
final class SegmentTable: Sendable {
    struct Segment: Hashable, Sendable {
        var next: Int64
        var written: Int64
        var end: Int64
        var claimed: Bool
        /// Sources (indices in the download's ``SourceSet``) this segment is not to be
        /// fetched from: those that served a piece of it that did not match.
        var avoiding: Set<Int> = []
        /// The source its connection fetches from (see ``SegmentTable/hold(_:by:)``).
        var source: Int?
        /// Whether its range is in the end game already: chased, or taken over by a chase.
        /// It is not chased again (unless its chaser fails): a connection that just lost a
        /// chase would otherwise chase the winner back.
        var chased = false
        /// For a connection chasing another segment's rest: which, and how far its own
        /// response has come. Its own range is empty (`written == end`) until it overtakes.
        var chase: Chase?
        /// The segment chasing this one, if any.
        var chaser: Int?
        /// When its connection claimed it, and where it then stood: with ``written`` and
        /// ``lastWrite``, how fast that connection brings bytes (see ``EndGame``).
        var claimedAt: ContinuousClock.Instant?
        var claimedFrom: Int64 = 0
        /// When bytes of it were last written.
        var lastWrite: ContinuousClock.Instant?

        /// Marks it claimed at `now`, from where it stands.
        mutating func claimed(at now: ContinuousClock.Instant) {
            claimed = true
            claimedAt = now
            claimedFrom = next
            lastWrite = nil
        }

        /// What its connection has brought since the claim, by `now` (or its last write).
        func delivery(until now: ContinuousClock.Instant? = nil) -> EndGame.Delivery? {
            guard let claimedAt, let end = now ?? lastWrite else { return nil }
            return EndGame.Delivery(bytes: max(0, written - claimedFrom), elapsed: end - claimedAt)
        }
    }

    /// The end game's rule, as a value: whether a chase pays.
    enum EndGame {
        /// What one connection brought: `bytes` in `elapsed`, counted from its claim (so a
        /// request's latency counts against it, as it would against a chase).
        struct Delivery: Hashable, Sendable {
            var bytes: Int64
            var elapsed: Duration

            /// Bytes per second; `nil` when nothing was measured.
            var rate: Double? {
                let seconds = elapsed.inSeconds
                guard bytes > 0, seconds > 0 else { return nil }
                return Double(bytes) / seconds
            }
        }

        /// How much faster the chaser's source must have been than the chased connection
        /// is: below that, the two would finish the rest at about the same time, and the
        /// chase would only fetch it twice.
        static let advantage = 1.5

        /// Whether an idle connection should chase the `rest` bytes a connection holds,
        /// given what that connection has delivered since its claim (`chased`, counted up
        /// to now) and the best its own source has delivered (`chaser`).
        ///
        /// - A chaser whose source was never measured does not chase: it is not known to be
        ///   faster.
        /// - A chased connection that has brought nothing yet is chased once it has waited
        ///   longer than the chaser would take for the whole rest (it may never start).
        /// - Otherwise the chaser must be ``advantage`` times as fast.
        static func isWorthChasing(rest: Int64, chased: Delivery, chaser: Delivery?) -> Bool {
            guard rest > 0, let chaserRate = chaser?.rate else { return false }
            guard let chasedRate = chased.rate else {
                return chased.elapsed >= .seconds(Double(rest) / chaserRate)
            }
            return chaserRate >= advantage * chasedRate
        }
    }

    /// A chase in the end game (see the type's discussion).
    struct Chase: Hashable, Sendable {
        /// The segment chased.
        var target: Int
        /// The offset of the next byte the chasing response will bring.
        var position: Int64
    }

    /// One connection's assignment.
    struct Claim: Hashable, Sendable {
        var index: Int
        var start: Int64
        var end: Int64
    }

    /// What to do with a body part: pass over `skipped` bytes, write the `count` after
    /// them at `offset`, and stop the request after it if `stops`.
    struct Reservation: Hashable, Sendable {
        /// Where the bytes kept are written.
        var offset: Int64
        /// Bytes at the start of the part not to write: a chased connection took them.
        var skipped: Int
        /// Bytes to write, after the skipped ones.
        var count: Int
        /// Whether the request stops after this part: its segment's end is reached, or the
        /// connection it chased finished first.
        var stops: Bool
        /// A segment whose connection is to be stopped now: the chase between the two is
        /// decided, and that connection has nothing left to write.
        var stopping: Int?
    }

    /// The full size of the content.
    let total: Int64
    /// Ranges smaller than this are never split.
    let minimumSplit: Int64
    /// A connection with less than this left is not chased: a new request would cost more
    /// than it can save.
    var minimumChase: Int64 { max(minimumSplit / 4, 1) }
    private let state: NIOLockedValueBox<[Segment]>

    /// A table for `remaining` ranges (start, end exclusive) of a `total`-byte content,
    /// each split further so there are at least `connections` segments where size allows.
    init(total: Int64, remaining: [(Int64, Int64)], connections: Int, minimumSplit: Int64) {
        self.total = total
        self.minimumSplit = minimumSplit
        var segments = remaining.filter { $0.0 < $0.1 }.map {
            Segment(next: $0.0, written: $0.0, end: $0.1, claimed: false)
        }
        while segments.count < connections {
            guard let (index, _) = segments.enumerated().max(by: { ($0.1.end - $0.1.next) < ($1.1.end - $1.1.next) }),
                segments[index].end - segments[index].next >= 2 * minimumSplit
            else { break }
            let middle = Self.middle(segments[index])
            segments.append(Segment(next: middle, written: middle, end: segments[index].end, claimed: false))
            segments[index].end = middle
        }
        segments.sort { $0.next < $1.next }
        state = NIOLockedValueBox(segments)
    }

    private static func middle(_ segment: Segment) -> Int64 {
        let half = segment.next + (segment.end - segment.next) / 2
        // Keep splits on 64 KiB boundaries, so writes stay aligned.
        let aligned = half & ~Int64(0xFFFF)
        return aligned > segment.next ? aligned : half
    }

    /// Work for an idle connection fetching from `source`: an unclaimed segment (not one
    /// to avoid that source for), else half of the largest claimed one, else, if `chasing`,
    /// a chase of the connection on another source with the most left (see the type's
    /// discussion), else `nil` when nothing is left to take.
    ///
    /// `now` is when the claim is made: the start of the connection's next delivery.
    func claim(for source: Int? = nil, chasing: Bool = false, at now: ContinuousClock.Instant) -> Claim? {
        state.withLockedValue { segments in
            // (By index, field by field: a segment is not copied per look, and a delta
            // download's table holds tens of thousands.)
            if let index = segments.indices.first(where: {
                !segments[$0].claimed && segments[$0].next < segments[$0].end
                    && !(source.map(segments[$0].avoiding.contains) ?? false)
            }) {
                segments[index].claimed(at: now)
                segments[index].source = source
                return Claim(index: index, start: segments[index].next, end: segments[index].end)
            }
            if let (index, victim) = segments.enumerated()
                .filter({ $0.1.claimed && $0.1.chaser == nil && !(source.map($0.1.avoiding.contains) ?? false) })
                .max(by: { ($0.1.end - $0.1.next) < ($1.1.end - $1.1.next) }),
                victim.end - victim.next >= 2 * minimumSplit
            {
                let middle = Self.middle(victim)
                segments[index].end = middle
                var stolen = Segment(
                    next: middle, written: middle, end: victim.end, claimed: true, avoiding: victim.avoiding,
                    source: source)
                stolen.claimed(at: now)
                segments.append(stolen)
                return Claim(index: segments.count - 1, start: middle, end: victim.end)
            }
            guard chasing, let source,
                let (index, target) = segments.enumerated()
                    .filter({
                        $0.1.claimed && $0.1.chase == nil && !$0.1.chased && $0.1.source != nil
                            && $0.1.source != source && !$0.1.avoiding.contains(source)
                    })
                    .max(by: { ($0.1.end - $0.1.next) < ($1.1.end - $1.1.next) }),
                target.end - target.next >= minimumChase,
                let chased = target.delivery(until: now),
                EndGame.isWorthChasing(
                    rest: target.end - target.next, chased: chased, chaser: Self.best(of: source, in: segments))
            else { return nil }
            segments[index].chaser = segments.count
            segments[index].chased = true
            var chase = Segment(
                next: target.next, written: target.next, end: target.next, claimed: true,
                avoiding: target.avoiding, source: source, chased: true,
                chase: Chase(target: index, position: target.next))
            chase.claimed(at: now)
            segments.append(chase)
            return Claim(index: segments.count - 1, start: target.next, end: target.end)
        }
    }

    /// More work for a connection that asks for several ranges in one request (a delta
    /// download's scattered missing blocks): up to `count` further unclaimed segments (not
    /// ones to avoid `source` for), whole, while the bytes of `first` and theirs stay within
    /// `bytes`. None is split. They are the ones after `first` in the table, which lists
    /// the ranges in order of their offsets (a split's second part goes to its end), then
    /// those before it; returned in order of their offsets.
    ///
    /// The walk stops at the first segment that does not fit: with tens of thousands of
    /// ranges, a request costs the segments it takes, not the table.
    func claimMore(after first: Claim, for source: Int?, count: Int, bytes: Int64, at now: ContinuousClock.Instant)
        -> [Claim]
    {
        guard count > 0 else { return [] }
        return state.withLockedValue { segments in
            var budget = bytes - (first.end - first.start)
            var claims: [Claim] = []
            var index = first.index
            for _ in 1..<max(segments.count, 1) {
                index = index + 1 == segments.count ? 0 : index + 1
                guard !segments[index].claimed, segments[index].next < segments[index].end,
                    !(source.map(segments[index].avoiding.contains) ?? false)
                else { continue }
                let size = segments[index].end - segments[index].next
                guard size <= budget else { break }
                budget -= size
                segments[index].claimed(at: now)
                segments[index].source = source
                claims.append(Claim(index: index, start: segments[index].next, end: segments[index].end))
                if claims.count == count { break }
            }
            return claims.sorted { $0.start < $1.start }
        }
    }

    /// The fastest delivery measured from `source`: what a chaser there can expect.
    private static func best(of source: Int, in segments: [Segment]) -> EndGame.Delivery? {
        segments.lazy.filter { $0.source == source }.compactMap { $0.delivery() }
            .max { ($0.rate ?? 0) < ($1.rate ?? 0) }
    }

    /// Divides what is left of segment `index` into at most `parts` parts of about equal
    /// size (none under ``minimumSplit``): its connection goes on with the first, the
    /// others are left for other connections to claim, in order.
    func divide(_ index: Int, into parts: Int) {
        state.withLockedValue { segments in
            let segment = segments[index]
            let rest = segment.end - segment.next
            let count = Int(min(Int64(parts), rest / minimumSplit))
            guard count > 1 else { return }
            var bounds = [segment.next]
            for part in 1..<count {
                let even = segment.next + rest * Int64(part) / Int64(count)
                // Kept on 64 KiB boundaries, so writes stay aligned.
                let aligned = even & ~Int64(0xFFFF)
                bounds.append(aligned > bounds[bounds.count - 1] ? aligned : even)
            }
            bounds.append(segment.end)
            segments[index].end = bounds[1]
            for part in 1..<count {
                segments.append(
                    Segment(
                        next: bounds[part], written: bounds[part], end: bounds[part + 1], claimed: false,
                        avoiding: segment.avoiding))
            }
        }
    }

    /// Records that segment `index` is fetched from `source`.
    func hold(_ index: Int, by source: Int) {
        state.withLockedValue { $0[index].source = source }
    }

    /// Reserves the next `count` bytes of segment `index`'s response (a body part): what
    /// of it to write, and where.
    func reserve(_ index: Int, _ count: Int) -> Reservation {
        state.withLockedValue { segments in
            if let chase = segments[index].chase {
                return Self.reserve(chasing: chase, index, count, in: &segments)
            }
            let segment = segments[index]
            let allowed = Int(max(0, min(Int64(count), segment.end - segment.next)))
            segments[index].next += Int64(allowed)
            var stopping: Int?
            if allowed > 0, segments[index].next == segment.end, let chaser = segment.chaser {
                // Every byte of the range is taken: the chase is lost, and its request ends.
                segments[chaser].chase = nil
                segments[index].chaser = nil
                stopping = chaser
            }
            return Reservation(
                offset: segment.next, skipped: 0, count: allowed, stops: allowed < count, stopping: stopping)
        }
    }

    /// A chasing connection's body part: passed over while it is behind the chased one;
    /// once ahead, the rest of the range is this connection's own segment.
    private static func reserve(chasing chase: Chase, _ index: Int, _ count: Int, in segments: inout [Segment])
        -> Reservation
    {
        let position = chase.position
        segments[index].chase?.position += Int64(count)
        let target = segments[chase.target]
        if position + Int64(count) <= target.next {
            return Reservation(offset: position, skipped: count, count: 0, stops: false, stopping: nil)
        }
        // Ahead: the chased segment ends where this response takes over.
        let from = max(position, target.next)
        let end = target.end
        segments[chase.target].end = from
        segments[chase.target].chaser = nil
        let skipped = Int(from - position)
        let allowed = Int(max(0, min(Int64(count - skipped), end - from)))
        segments[index].chase = nil
        segments[index].written = from
        segments[index].end = max(from, end)
        segments[index].next = from + Int64(allowed)
        // The chased connection has reserved all it now has to write: it stops.
        let stopping = target.claimed && target.next == from ? chase.target : nil
        return Reservation(
            offset: from, skipped: skipped, count: allowed, stops: skipped + allowed < count, stopping: stopping)
    }

    /// Records that segment `index` is in the file up to `position`, at `now`.
    func wrote(_ index: Int, upTo position: Int64, at now: ContinuousClock.Instant) {
        state.withLockedValue { segments in
            segments[index].written = max(segments[index].written, position)
            segments[index].lastWrite = now
        }
    }

    /// The rest of segment `index` for the connection that holds it, after a request that
    /// asked for only part of it (a paced download) ended well: from the first byte not in
    /// the file to the segment's end, which may have shrunk meanwhile; `nil` when nothing
    /// is left or the segment is not held.
    func continuation(of index: Int) -> Claim? {
        state.withLockedValue { segments in
            let segment = segments[index]
            guard segment.claimed, segment.written < segment.end else { return nil }
            segments[index].next = segment.written
            return Claim(index: index, start: segment.written, end: segment.end)
        }
    }

    /// `range` (written, but a piece of it did not match its digest) is to be fetched
    /// again, not from `avoiding`.
    func reopen(_ range: Range<Int64>, avoiding: Set<Int>) {
        state.withLockedValue { segments in
            segments.append(
                Segment(next: range.lowerBound, written: range.lowerBound, end: range.upperBound, claimed: false,
                    avoiding: avoiding))
        }
    }

    /// Whether unclaimed work is left that `source` may not take.
    func hasWork(avoiding source: Int) -> Bool {
        state.withLockedValue { segments in
            segments.indices.contains {
                !segments[$0].claimed && segments[$0].next < segments[$0].end && segments[$0].avoiding.contains(source)
            }
        }
    }

    /// Where segment `index` is written up to.
    func written(_ index: Int) -> Int64 {
        state.withLockedValue { $0[index].written }
    }

    /// Gives a segment back after its connection failed: unwritten reserved bytes are
    /// requested again by whoever claims it next. A chase simply ends.
    func release(_ index: Int) {
        state.withLockedValue { segments in
            if let chase = segments[index].chase {
                segments[chase.target].chaser = nil
                segments[chase.target].chased = false
                segments[index].chase = nil
            }
            segments[index].next = segments[index].written
            segments[index].claimed = false
        }
    }

    /// Whether segment `index`'s connection still has something to fetch: bytes of its
    /// own, or a chase going on.
    func isWanted(_ index: Int) -> Bool {
        state.withLockedValue { $0[index].chase != nil || $0[index].written < $0[index].end }
    }

    /// Whether segment `index` is fully written.
    func isFinished(_ index: Int) -> Bool {
        state.withLockedValue { $0[index].written >= $0[index].end }
    }

    /// The ranges (start, end exclusive) not yet in the file, merged and sorted.
    func remaining() -> [(Int64, Int64)] {
        let ranges = state.withLockedValue { segments in
            var ranges: [(Int64, Int64)] = []
            for index in segments.indices where segments[index].written < segments[index].end {
                ranges.append((segments[index].written, segments[index].end))
            }
            return ranges
        }.sorted { $0.0 < $1.0 }
        var merged: [(Int64, Int64)] = []
        for range in ranges {
            if let last = merged.last, last.1 == range.0 {
                merged[merged.count - 1].1 = range.1
            } else {
                merged.append(range)
            }
        }
        return merged
    }

    /// The first byte not yet in the file: the file is whole before it (``total`` once
    /// complete).
    func firstMissing() -> Int64 {
        state.withLockedValue { segments in
            var first = total
            for index in segments.indices where segments[index].written < segments[index].end {
                first = min(first, segments[index].written)
            }
            return first
        }
    }

    /// Bytes in the file so far.
    var completed: Int64 {
        total
            - state.withLockedValue { segments in
                var missing: Int64 = 0
                for index in segments.indices where segments[index].written < segments[index].end {
                    missing += segments[index].end - segments[index].written
                }
                return missing
            }
    }

    /// Whether every byte is in the file.
    var isComplete: Bool {
        state.withLockedValue { segments in segments.indices.allSatisfy { segments[$0].written >= segments[$0].end } }
    }
}
