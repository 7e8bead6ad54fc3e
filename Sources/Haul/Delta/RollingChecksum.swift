/// zsync's rolling checksum of one block (`rsum`, from rsync's): two 16-bit sums that slide
/// along a file one byte at a time in constant work, so that every offset of a seed file
/// can be looked up in a control file's block table.
///
/// For a block `d[0..<n]`: `a = Σ d[i]` and `b = Σ (n - i) · d[i]`, both modulo 2^16, as
/// zsync 0.6.2's `rcksum_calc_rsum_block` computes them. A control file stores the last
/// `rsumBytes` bytes of `a` and `b` written big-endian one after the other (`a` high, `b`
/// low: ``value``), so a short stored sum keeps `b` whole and drops `a` first.
package struct RollingChecksum: Hashable, Sendable {
    package private(set) var a: UInt16
    package private(set) var b: UInt16

    package init(a: UInt16, b: UInt16) {
        self.a = a
        self.b = b
    }

    /// The checksum of `block`.
    package init(_ block: UnsafeRawBufferPointer) {
        var a: UInt16 = 0
        var b: UInt16 = 0
        var weight = UInt16(truncatingIfNeeded: block.count)
        for byte in block {
            a &+= UInt16(byte)
            b &+= weight &* UInt16(byte)
            weight &-= 1
        }
        self.init(a: a, b: b)
    }

    /// The checksum of `block`.
    package init(_ block: some Collection<UInt8>) {
        let bytes = Array(block)
        self = bytes.withUnsafeBytes { RollingChecksum($0) }
    }

    /// Slides the window of `blockSize` bytes one byte on: `old` leaves at its start and
    /// `new` enters at its end.
    @inline(__always)
    package mutating func roll(out old: UInt8, in new: UInt8, blockSize: Int) {
        a = a &- UInt16(old) &+ UInt16(new)
        b = b &+ a &- UInt16(truncatingIfNeeded: blockSize) &* UInt16(old)
    }

    /// `a` and `b` as one number, `a` in the high half: the order a control file stores
    /// them in.
    package var value: UInt32 { UInt32(a) << 16 | UInt32(b) }

    /// The mask that keeps the last `bytes` bytes of ``value`` (1 to 4).
    package static func mask(bytes: Int) -> UInt32 {
        bytes >= 4 ? UInt32.max : (UInt32(1) << (8 * UInt32(bytes))) - 1
    }
}
