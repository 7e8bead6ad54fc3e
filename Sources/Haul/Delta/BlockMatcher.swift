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

    /// The table's blocks by stored rolling checksum: `heads[bucket]` is the first block of
    /// a chain, `next[block]` the one after it (-1 ends it). No allocation per lookup.
    private let heads: [Int32]
    private let next: [Int32]
    private let bucketShift: UInt32

    package init(_ control: ZsyncControl) {
        self.control = control
        let count = control.table.count
        found = [Int64?](repeating: nil, count: count)
        var bits: UInt32 = 4
        while (1 << bits) < 2 * count, bits < 30 { bits += 1 }
        bucketShift = 32 - bits
        var heads = [Int32](repeating: -1, count: 1 << bits)
        var next = [Int32](repeating: -1, count: count)
        // In reverse, so that each chain lists its blocks in the file's order.
        for block in stride(from: count - 1, through: 0, by: -1) {
            let bucket = Int(Self.hash(control.table.rsums[block], shift: bucketShift))
            next[block] = heads[bucket]
            heads[bucket] = Int32(block)
        }
        self.heads = heads
        self.next = next
    }

    @inline(__always)
    private static func hash(_ key: UInt32, shift: UInt32) -> UInt32 {
        (key &* 0x9e37_79b1) >> shift
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
        let size = control.blockSize
        let count = seed.count
        guard count > 0, !found.isEmpty, !isComplete else { return 0 }
        let mask = control.rsumMask
        let blocks = control.table.count
        let pairs = control.sequenceMatches == 2
        let before = foundCount
        @inline(__always) func byte(_ index: Int) -> UInt8 { index < count ? seed[index] : 0 }

        var position = 0
        var rsum = Self.checksum(seed, at: 0, size: size)
        while position < count {
            var matched = false
            var window: [UInt8]?  // the MD4 prefix of the window at `position`, once needed
            var following: RollingChecksum?
            var followingMD4: [UInt8]?
            var candidate = heads[Int(Self.hash(rsum.value & mask, shift: bucketShift))]
            while candidate >= 0 {
                let block = Int(candidate)
                candidate = next[block]
                let hasNext = pairs && block + 1 < blocks
                // A found block is still worth a look when its follower is not: a pair that
                // matches here gives the follower (the block before a change is found so).
                guard found[block] == nil || (hasNext && found[block + 1] == nil),
                    control.table.rsums[block] == rsum.value & mask
                else { continue }
                if hasNext {
                    if following == nil { following = Self.checksum(seed, at: position + size, size: size) }
                    guard control.table.rsums[block + 1] == following!.value & mask else { continue }
                }
                if window == nil { window = Self.md4(seed, at: position, size: size) }
                guard window![..<control.checksumBytes].elementsEqual(control.table.checksum(of: block)) else { continue }
                if hasNext {
                    if followingMD4 == nil { followingMD4 = Self.md4(seed, at: position + size, size: size) }
                    guard followingMD4![..<control.checksumBytes].elementsEqual(control.table.checksum(of: block + 1))
                    else { continue }
                    if found[block + 1] == nil {
                        found[block + 1] = Int64(position + size)
                        foundCount += 1
                    }
                }
                if found[block] == nil {
                    found[block] = Int64(position)
                    foundCount += 1
                }
                matched = true
            }
            if matched {
                if isComplete { break }
                // zsync moves past a matched block rather than through it.
                position += size
                guard position < count else { break }
                rsum = Self.checksum(seed, at: position, size: size)
            } else {
                rsum.roll(out: byte(position), in: byte(position + size), blockSize: size)
                position += 1
            }
        }
        return foundCount - before
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

    private static func padded(_ seed: UnsafeRawBufferPointer, at offset: Int, size: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: size)
        if offset < seed.count {
            for index in offset..<seed.count { bytes[index - offset] = seed[index] }
        }
        return bytes
    }
}
