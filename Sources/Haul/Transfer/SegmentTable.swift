import NIOConcurrencyHelpers

/// The byte ranges of a segmented download and who is fetching which, shared by its
/// connections.
///
/// Each segment has a `next` byte (the next one a connection will write; bytes before it
/// are written or being written), a `written` byte (everything before it is in the file)
/// and an `end` (exclusive). A connection that runs out of work takes half of the largest
/// remaining segment ("work stealing"): the victim's `end` shrinks, and its connection stops
/// there. All of it is behind one lock, touched once per body part.
final class SegmentTable: Sendable {
    struct Segment: Hashable, Sendable {
        var next: Int64
        var written: Int64
        var end: Int64
        var claimed: Bool
        /// Sources (indices in the download's ``SourceSet``) this segment is not to be
        /// fetched from: those that served a piece of it that did not match.
        var avoiding: Set<Int> = []
    }

    /// One connection's assignment.
    struct Claim: Hashable, Sendable {
        var index: Int
        var start: Int64
        var end: Int64
    }

    /// The full size of the content.
    let total: Int64
    /// Ranges smaller than this are never split.
    let minimumSplit: Int64
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
    /// to avoid that source for), else half of the largest claimed one, else `nil` when
    /// nothing is left to take.
    func claim(for source: Int? = nil) -> Claim? {
        state.withLockedValue { segments in
            if let index = segments.firstIndex(where: {
                !$0.claimed && $0.next < $0.end && !(source.map($0.avoiding.contains) ?? false)
            }) {
                segments[index].claimed = true
                return Claim(index: index, start: segments[index].next, end: segments[index].end)
            }
            guard let (index, victim) = segments.enumerated()
                .filter({ $0.1.claimed && !(source.map($0.1.avoiding.contains) ?? false) })
                .max(by: { ($0.1.end - $0.1.next) < ($1.1.end - $1.1.next) }),
                victim.end - victim.next >= 2 * minimumSplit
            else { return nil }
            let middle = Self.middle(victim)
            segments[index].end = middle
            segments.append(
                Segment(next: middle, written: middle, end: victim.end, claimed: true, avoiding: victim.avoiding))
            return Claim(index: segments.count - 1, start: middle, end: victim.end)
        }
    }

    /// Reserves up to `count` bytes of segment `index` for a body part; returns the offset
    /// to write at and how many bytes of the part belong to the segment (0: stop).
    func reserve(_ index: Int, _ count: Int) -> (offset: Int64, allowed: Int) {
        state.withLockedValue { segments in
            let segment = segments[index]
            let allowed = Int(max(0, min(Int64(count), segment.end - segment.next)))
            segments[index].next += Int64(allowed)
            return (segment.next, allowed)
        }
    }

    /// Records that segment `index` is in the file up to `position`.
    func wrote(_ index: Int, upTo position: Int64) {
        state.withLockedValue { segments in segments[index].written = max(segments[index].written, position) }
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
            segments.contains { !$0.claimed && $0.next < $0.end && $0.avoiding.contains(source) }
        }
    }

    /// Where segment `index` is written up to.
    func written(_ index: Int) -> Int64 {
        state.withLockedValue { $0[index].written }
    }

    /// Gives a segment back after its connection failed: unwritten reserved bytes are
    /// requested again by whoever claims it next.
    func release(_ index: Int) {
        state.withLockedValue { segments in
            segments[index].next = segments[index].written
            segments[index].claimed = false
        }
    }

    /// Whether segment `index` is fully written.
    func isFinished(_ index: Int) -> Bool {
        state.withLockedValue { $0[index].written >= $0[index].end }
    }

    /// The ranges (start, end exclusive) not yet in the file, merged and sorted.
    func remaining() -> [(Int64, Int64)] {
        let ranges = state.withLockedValue { segments in
            segments.filter { $0.written < $0.end }.map { ($0.written, $0.end) }
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

    /// Bytes in the file so far.
    var completed: Int64 { total - remaining().reduce(0) { $0 + ($1.1 - $1.0) } }

    /// Whether every byte is in the file.
    var isComplete: Bool { state.withLockedValue { $0.allSatisfy { $0.written >= $0.end } } }
}
