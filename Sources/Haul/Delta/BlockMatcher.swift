/// Finds the blocks of a zsync target that a seed already holds: the rolling checksum is
/// slid over the seed one byte at a time and looked up in the control file's table; a hit is
/// believed only once the block's MD4 prefix agrees (and, with `seq_matches` 2, the next
/// block's sums too), as zsync 0.6.2's client does.
///
/// A pure value over bytes in memory: the caller maps or reads the seed, and carries out
/// what ``found`` says (copy those blocks, fetch the rest, ``missingRanges()``). A block the
/// target holds more than once is filled from wherever it is found once.
///
/// ```swift
/// var matcher = BlockMatcher(control)
/// oldFile.withUnsafeBytes { matcher.scan($0) }
/// for range in matcher.missingRanges() { … }   // ask the server for these
/// ```
package struct BlockMatcher: Sendable {
    package let control: ZsyncControl
    /// Where each block of the target was found in the seed (its offset there), if it was.
    package private(set) var found: [Int64?]
    /// How many entries of ``found`` are set.
    package private(set) var foundCount = 0
    /// How many windows this matcher's own scans rolled through one byte at a time, looking
    /// each up (not those of a matcher merged in): the scan's cost beyond one strong
    /// checksum per block found; a changed block costs about one block's worth.
    package private(set) var rolledWindows = 0

    /// The table's blocks by stored rolling checksum: `heads[bucket]` is the first block of
    /// a chain, `next[block]` the one after it (-1 ends it). No allocation per lookup.
    private let heads: [Int32]
    private let next: [Int32]
    /// Answers most lookups (nearly every offset of a seed misses) without the chains:
    /// a Bloom filter over the blocks' checksums, or, with pairs (`seq_matches` 2), over
    /// each block's checksum and its follower's together, as zsync keys its table (a window
    /// is looked up only when it and the window after it could be a pair, or it could be
    /// the last block: with 2-byte sums a window's own checksum passes half the time).
    private let filter: BlockFilter
    /// Whether no other block of the table has both the block's stored rolling checksum and
    /// its strong one: then a window that is this block can be no other, and the window
    /// after a match, which is most likely the next block, is checked against it alone,
    /// without the chains (the lookups that miss the cache).
    private let unique: [Bool]
    private let bucketBits: UInt32
    /// Where the buffer being scanned starts in its file (see ``scan(_:windows:origin:)``).
    private var origin: Int64 = 0

    package init(_ control: ZsyncControl) {
        self.control = control
        let count = control.table.count
        found = [Int64?](repeating: nil, count: count)
        var bits: UInt32 = 4
        while (1 << bits) < 2 * count, bits < 28 { bits += 1 }
        bucketBits = bits
        var heads = [Int32](repeating: -1, count: 1 << bits)
        var next = [Int32](repeating: -1, count: count)
        // In reverse, so that each chain lists its blocks in the file's order.
        for block in stride(from: count - 1, through: 0, by: -1) {
            let bucket = Int(Self.hash(control.table.rsums[block]) >> (32 - bits))
            next[block] = heads[bucket]
            heads[bucket] = Int32(block)
        }
        self.heads = heads
        self.next = next
        // A block is alone when no other has both its sums (the blocks the target holds
        // more than once, and the rare pair whose truncated sums collide).
        let rsums = control.table.rsums
        var unique = [Bool](repeating: true, count: count)
        for first in heads where first >= 0 {
            var block = Int(first)
            while block >= 0 {
                var other = Int(next[block])
                while other >= 0 {
                    if rsums[other] == rsums[block],
                        control.table.checksum(of: other).elementsEqual(control.table.checksum(of: block))
                    {
                        unique[block] = false
                        unique[other] = false
                    }
                    other = Int(next[other])
                }
                block = Int(next[block])
            }
        }
        self.unique = unique
        var filter = BlockFilter(entries: count)
        if control.sequenceMatches == 2, count > 1 {
            for block in 0..<(count - 1) {
                filter.insert(Self.filterHash(control.table.rsums[block], control.table.rsums[block + 1]))
            }
        } else {
            for block in 0..<count { filter.insert(Self.filterHash(control.table.rsums[block], 0)) }
        }
        self.filter = filter
    }

    @inline(__always)
    private static func hash(_ key: UInt32) -> UInt32 { key &* 0x9e37_79b1 }

    /// The first block of the chain of blocks whose stored rolling checksum may be `key`.
    @inline(__always)
    private func chain(_ key: UInt32) -> Int32 { heads[Int(Self.hash(key) >> (32 - bucketBits))] }

    /// A window's checksum and the following one's (0 without pairs), mixed for the filter.
    @inline(__always)
    private static func filterHash(_ key: UInt32, _ following: UInt32) -> UInt64 {
        var x = UInt64(key) << 32 | UInt64(following)
        x ^= x >> 33
        x &*= 0xff51_afd7_ed55_8ccd
        x ^= x >> 33
        return x
    }

    /// Whether every block of the target has been found.
    package var isComplete: Bool { foundCount == found.count }

    /// Scans `seed` for blocks of the target not found yet; returns how many it found.
    ///
    /// Windows that run past the seed's end count the missing bytes as zeros, as the
    /// control file pads the target's last block: a seed that ends as the target does
    /// gives its last block too.
    @discardableResult
    package mutating func scan(_ seed: UnsafeRawBufferPointer) -> Int {
        scan(seed, windows: 0..<seed.count)
    }

    /// Scans the windows of `seed` that start in `windows` (each `blockSize` bytes, read
    /// past the range's end as far as the seed goes): a part of a seed, for scanning one
    /// on several threads, each with a matcher of its own (``merge(_:)`` joins them).
    ///
    /// `seed` may be a piece of a larger file that starts at `origin` in it: offsets are
    /// recorded from the file's start. Only the file's true end reads as zeros, so a piece
    /// that is not the last must hold two blocks past its last window (a pair's second
    /// block).
    @discardableResult
    package mutating func scan(_ seed: UnsafeRawBufferPointer, windows: Range<Int>, origin: Int64 = 0) -> Int {
        self.origin = origin
        defer { self.origin = 0 }
        let size = control.blockSize
        let count = seed.count
        let windows = windows.clamped(to: 0..<count)
        guard !windows.isEmpty, !found.isEmpty, !isComplete, let base = seed.baseAddress else { return 0 }
        let bytes = base.assumingMemoryBound(to: UInt8.self)
        let mask = control.rsumMask
        let before = foundCount
        // With pairs, the window after the current one rolls along with it: a hit's check of
        // the following block costs a comparison, not a sum over a block (with 2-byte sums,
        // as zsyncmake writes them below 200 MB or so, about every other window is a hit).
        let pairs = control.sequenceMatches == 2 && control.table.count > 1
        let lastKey = control.table.rsums[control.table.count - 1]
        filter.words.withUnsafeBufferPointer { words in
            let filter = BlockFilter.Lookup(words: words, shift: filter.shift)
            var position = windows.lowerBound
            var rsum = Self.checksum(seed, at: position, size: size)
            var following = pairs ? Self.checksum(seed, at: position + size, size: size) : rsum
            // The MD4 of the window at `position`, when a match just before computed it.
            var carried: [UInt8]?
            // The block the window at `position` most likely is: the one after the block
            // matched just before (-1: none).
            var expected = -1
            let blocks = control.table.count
            while position < windows.upperBound {
                let key = rsum.value & mask
                var match: (matched: Bool, followingMD4: [UInt8]?, block: Int)?
                if expected >= 0, expected < blocks, control.table.rsums[expected] == key {
                    // Right after a match the seed is in step with the target: the window is
                    // taken as the next block on its own sums, as zsync's client takes it,
                    // without its follower's (a change right after it would lose it, and
                    // the scan would roll through two blocks for one changed). A block
                    // others share is looked for along its chain, to fill each place.
                    let followed = follow(expected, in: seed, at: position, md4: carried, chain: chain(key))
                    if followed.matched {
                        match = (true, followed.followingMD4, expected)
                    } else {
                        carried = nil
                    }
                }
                if match == nil,
                    pairs
                        ? filter.contains(Self.filterHash(key, following.value & mask)) || key == lastKey
                        : filter.contains(Self.filterHash(key, 0))
                {
                    match = verify(
                        seed, at: position, rsum: rsum, following: pairs ? following : nil,
                        candidates: chain(key), alone: false, md4: carried)
                }
                if let match, match.matched {
                    if isComplete { return }
                    // zsync moves past a matched block rather than through it; the next
                    // window's sums, when a pair's check computed them, are not computed again.
                    position += size
                    expected = match.block + 1
                    guard position < windows.upperBound else {
                        // The window after the range's last match starts the next part (or
                        // piece), which begins with no match before it: with pairs, it is
                        // found there only if its follower is unchanged too. Taken here, as
                        // the block after this match, it is found on its own sums.
                        // (`following` holds that window's sums.)
                        let key = following.value & mask
                        if pairs, expected < blocks, position < count, control.table.rsums[expected] == key {
                            _ = follow(expected, in: seed, at: position, md4: match.followingMD4, chain: chain(key))
                        }
                        return
                    }
                    rsum = pairs ? following : Self.checksum(seed, at: position, size: size)
                    if pairs { following = Self.checksum(seed, at: position + size, size: size) }
                    carried = match.followingMD4
                    continue
                }
                expected = -1
                carried = nil
                let from = position
                position = Self.roll(
                    bytes, count: count, from: position, to: windows.upperBound, size: size, pairs: pairs,
                    rsum: &rsum, following: &following, filter: filter, mask: mask, lastKey: lastKey)
                rolledWindows += position - from
            }
        }
        return foundCount - before
    }

    /// Slides the window at `start` (its sums `rsum`, and with pairs the next window's,
    /// `following`) on one byte at a time, until a window could be a block (its sums pass
    /// the filter) or the windows end at `end`; returns where it stopped, its sums in
    /// `rsum` and `following`. The scan's hot loop, on its own so that its state stays in
    /// registers: nearly every byte of a changed region passes through it.
    @inline(__always)
    private static func roll(
        _ bytes: UnsafePointer<UInt8>, count: Int, from start: Int, to end: Int, size: Int, pairs: Bool,
        rsum: inout RollingChecksum, following: inout RollingChecksum, filter: BlockFilter.Lookup, mask: UInt32,
        lastKey: UInt32
    ) -> Int {
        var position = start
        var window = rsum
        var next = following
        // Where a window and the one after it still lie wholly in the seed: no checks.
        let inside = min(end, count - 2 * size)
        defer {
            rsum = window
            following = next
        }
        if pairs {
            // (Wrapping arithmetic: `inside` keeps every index in the seed.)
            while position < inside {
                let entering = bytes[position &+ size]
                window.roll(out: bytes[position], in: entering, blockSize: size)
                next.roll(out: entering, in: bytes[position &+ 2 &* size], blockSize: size)
                position &+= 1
                let key = window.value & mask
                if filter.contains(Self.filterHash(key, next.value & mask)) || key == lastKey { return position }
            }
        } else {
            while position < inside {
                window.roll(out: bytes[position], in: bytes[position &+ size], blockSize: size)
                position &+= 1
                if filter.contains(Self.filterHash(window.value & mask, 0)) { return position }
            }
        }
        // Near the seed's end, bytes past it read as zeros.
        while position < end {
            let out = position + size < count ? bytes[position + size] : 0
            window.roll(out: bytes[position], in: out, blockSize: size)
            if pairs {
                let after = position + 2 * size < count ? bytes[position + 2 * size] : 0
                next.roll(out: out, in: after, blockSize: size)
            }
            position += 1
            guard position < end else { break }
            let key = window.value & mask
            let passes = pairs
                ? filter.contains(Self.filterHash(key, next.value & mask)) || key == lastKey
                : filter.contains(Self.filterHash(key, 0))
            if passes { return position }
        }
        return position
    }

    /// Whether the window at `position`, right after a match, is `block` (its stored sums,
    /// `md4` if known, else computed); if it is, records it, and every other block of
    /// `chain` with the same sums (the target's other places for the same bytes).
    private mutating func follow(
        _ block: Int, in seed: UnsafeRawBufferPointer, at position: Int, md4: [UInt8]?, chain: Int32
    ) -> (matched: Bool, followingMD4: [UInt8]?) {
        var window = md4
        var following: [UInt8]?
        if window == nil {
            // The next window is most likely the block after: its MD4 comes nearly free.
            (window, following) = Self.md4s(seed, at: position, size: control.blockSize)
        }
        let checksum = control.table.checksum(of: block)
        guard window![..<control.checksumBytes].elementsEqual(checksum) else { return (false, nil) }
        let offset = origin + Int64(position)
        record(block, at: offset)
        guard !unique[block] else { return (true, following) }
        let key = control.table.rsums[block]
        var candidate = chain
        while candidate >= 0 {
            let other = Int(candidate)
            candidate = next[other]
            if control.table.rsums[other] == key, control.table.checksum(of: other).elementsEqual(checksum) {
                record(other, at: offset)
            }
        }
        return (true, following)
    }

    /// Looks up the window at `position` among the blocks of the chain that starts at
    /// `candidates` (or that block `alone`) (`md4`: the window's MD4, if known;
    /// `following`: with pairs, the rolling checksum of the window after it); records every
    /// block it is (and, with pairs, the next block's window as the following block).
    /// Returns whether it matched one, the next window's MD4 where it computed it, and the
    /// last block it matched.
    private mutating func verify(
        _ seed: UnsafeRawBufferPointer, at position: Int, rsum: RollingChecksum, following: RollingChecksum?,
        candidates: Int32, alone: Bool, md4: [UInt8]?
    ) -> (matched: Bool, followingMD4: [UInt8]?, block: Int) {
        let size = control.blockSize
        let key = rsum.value & control.rsumMask
        let blocks = control.table.count
        let pairs = control.sequenceMatches == 2
        var matched = false
        var window = md4  // the MD4 of the window at `position`, once needed
        var followingMD4: [UInt8]?
        var last = -1
        var candidate = candidates
        while candidate >= 0 {
            let block = Int(candidate)
            candidate = alone ? -1 : next[block]
            let hasNext = pairs && block + 1 < blocks
            // A found block is still worth a look when its follower is not: a pair that
            // matches here gives the follower (the block before a change is found so).
            // The sums first: they share a cache line, and nearly every candidate fails them.
            guard control.table.rsums[block] == key else { continue }
            if hasNext {
                let next = following ?? Self.checksum(seed, at: position + size, size: size)
                guard control.table.rsums[block + 1] == next.value & control.rsumMask else { continue }
            }
            guard found[block] == nil || (hasNext && found[block + 1] == nil) else { continue }
            if window == nil {
                if hasNext, followingMD4 == nil {
                    (window, followingMD4) = Self.md4s(seed, at: position, size: size)
                } else {
                    window = Self.md4(seed, at: position, size: size)
                }
            }
            guard window![..<control.checksumBytes].elementsEqual(control.table.checksum(of: block)) else { continue }
            if hasNext {
                if followingMD4 == nil { followingMD4 = Self.md4(seed, at: position + size, size: size) }
                guard followingMD4![..<control.checksumBytes].elementsEqual(control.table.checksum(of: block + 1))
                else { continue }
                record(block + 1, at: origin + Int64(position + size))
            }
            record(block, at: origin + Int64(position))
            matched = true
            last = block
        }
        return (matched, followingMD4, last)
    }

    private mutating func record(_ block: Int, at offset: Int64) {
        guard found[block] == nil else { return }
        found[block] = offset
        foundCount += 1
    }

    /// Takes the blocks `other` found (a matcher of the same control file that scanned
    /// another part of the seed) that this one has not: where both found one, this one's
    /// offset stays.
    package mutating func merge(_ other: BlockMatcher) {
        precondition(other.found.count == found.count, "matchers of different control files")
        for (block, offset) in other.found.enumerated() {
            if let offset { record(block, at: offset) }
        }

    }

    /// The byte ranges of the target still missing, consecutive blocks merged, the last one
    /// ending at the target's length.
    package func missingRanges() -> [Range<Int64>] {
        let size = Int64(control.blockSize)
        var ranges: [Range<Int64>] = []
        for block in found.indices where found[block] == nil {
            let start = Int64(block) * size
            let end = min(start + size, control.length)
            if let last = ranges.last, last.upperBound == start {
                ranges[ranges.count - 1] = last.lowerBound..<end
            } else {
                ranges.append(start..<end)
            }
        }
        return ranges
    }

    /// The rolling checksum of the `size` bytes of `seed` at `offset`, zeros past its end.
    private static func checksum(_ seed: UnsafeRawBufferPointer, at offset: Int, size: Int) -> RollingChecksum {
        if offset + size <= seed.count { return RollingChecksum(UnsafeRawBufferPointer(rebasing: seed[offset..<offset + size])) }
        return RollingChecksum(padded(seed, at: offset, size: size))
    }

    /// The MD4 of the `size` bytes of `seed` at `offset`, zeros past its end.
    private static func md4(_ seed: UnsafeRawBufferPointer, at offset: Int, size: Int) -> [UInt8] {
        if offset + size <= seed.count { return MD4.hash(UnsafeRawBufferPointer(rebasing: seed[offset..<offset + size])) }
        return MD4.hash(padded(seed, at: offset, size: size))
    }

    /// The MD4s of the window at `offset` and of the one after it, computed together
    /// (``MD4/hash(_:_:)``); the second only where it lies wholly in `seed`.
    private static func md4s(_ seed: UnsafeRawBufferPointer, at offset: Int, size: Int) -> ([UInt8], [UInt8]?) {
        guard offset + 2 * size <= seed.count else { return (md4(seed, at: offset, size: size), nil) }
        let (first, second) = MD4.hash(
            UnsafeRawBufferPointer(rebasing: seed[offset..<offset + size]),
            UnsafeRawBufferPointer(rebasing: seed[offset + size..<offset + 2 * size]))
        return (first, second)
    }

    private static func padded(_ seed: UnsafeRawBufferPointer, at offset: Int, size: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        if offset < seed.count {
            for index in offset..<seed.count { bytes[index - offset] = seed[index] }
        }
        return bytes
    }
}

/// A Bloom filter in blocks of 64 bits: each entry sets four bits of one word, so a lookup
/// reads one word (one cache line) and passes about 1 in 1,500 windows that are not entries
/// at 32 bits an entry (16 bits and three passed 1 in 200, and each window passed costs a
/// walk of the chains that misses the cache; a 512 MiB target's filter still fits a
/// core's second-level cache).
struct BlockFilter: Sendable {
    private(set) var words: [UInt64]
    /// How far a hash is shifted right to give its word.
    let shift: UInt64

    init(entries: Int) {
        // Two words at least, so that a word's index is a shift of the hash by less than 64.
        var bits: UInt64 = 1
        while (1 << bits) * 64 < 32 * max(entries, 1), bits < 40 { bits += 1 }
        words = [UInt64](repeating: 0, count: 1 << bits)
        shift = 64 - bits
    }

    mutating func insert(_ hash: UInt64) {
        words[Self.word(hash, shift: shift)] |= Self.mask(hash)
    }

    @inline(__always)
    static func word(_ hash: UInt64, shift: UInt64) -> Int { Int(truncatingIfNeeded: hash &>> shift) }

    /// (Masking shifts, `&<<`: each amount is below 64, and a plain shift checks it.)
    @inline(__always)
    static func mask(_ hash: UInt64) -> UInt64 {
        1 &<< hash | 1 &<< (hash &>> 6) | 1 &<< (hash &>> 12) | 1 &<< (hash &>> 18)
    }

    /// The filter's words lent for a scan.
    struct Lookup {
        let words: UnsafeBufferPointer<UInt64>
        let shift: UInt64

        @inline(__always)
        func contains(_ hash: UInt64) -> Bool {
            let mask = BlockFilter.mask(hash)
            return words[BlockFilter.word(hash, shift: shift)] & mask == mask
        }
    }
}
