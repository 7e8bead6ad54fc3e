/// MD4 (RFC 1320), the strong checksum zsync keeps per block.
///
/// zsync 0.6.2 confirms every candidate block whose rolling checksum matched with the first
/// bytes of the block's MD4 (the control file's `Hash-Lengths` say how many). MD4 is broken
/// as a cryptographic hash; here it only tells blocks apart, and the finished file is
/// checked against the control file's SHA-1 (and SHA-256 where given) before it is used.
/// swift-crypto has no MD4, so this is a plain implementation: blocks of 64 bytes, three
/// rounds of sixteen steps, no allocation per block.
package struct MD4: Sendable {
    private var state: State = (0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476)
    /// Bytes of a block not yet processed (fewer than 64), and how many of them there are.
    private var buffer = [UInt8](repeating: 0, count: 64)
    private var buffered = 0
    private var length: UInt64 = 0

    package init() {}

    /// The MD4 of `bytes`.
    package static func hash(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var md4 = MD4()
        md4.update(bytes)
        return md4.finalize()
    }

    /// The MD4 of `bytes`.
    package static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let array = Array(bytes)
        return array.withUnsafeBytes { hash($0) }
    }

    /// The MD4s of two messages of the same length, computed together: one MD4 is a chain
    /// of dependent steps that leaves most of a core idle, and two chains side by side run
    /// in about the time of one (the scan confirms a block and the next one so).
    package static func hash(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> ([UInt8], [UInt8]) {
        precondition(first.count == second.count, "messages of different lengths")
        var one = MD4()
        var two = MD4()
        let whole = first.count & ~63
        if whole > 0, let firstBase = first.baseAddress, let secondBase = second.baseAddress {
            var offset = 0
            while offset < whole {
                compress(&one.state, firstBase + offset, &two.state, secondBase + offset)
                offset += 64
            }
            one.length = UInt64(whole)
            two.length = UInt64(whole)
        }
        one.update(UnsafeRawBufferPointer(rebasing: first[whole...]))
        two.update(UnsafeRawBufferPointer(rebasing: second[whole...]))
        return (one.finalize(), two.finalize())
    }

    /// Adds `bytes` to the message.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        length &+= UInt64(bytes.count)
        var offset = 0
        if buffered > 0 {
            let taken = min(64 - buffered, bytes.count)
            for index in 0..<taken { buffer[buffered + index] = bytes[index] }
            buffered += taken
            offset = taken
            guard buffered == 64 else { return }
            buffer.withUnsafeBytes { compress($0.baseAddress!) }
            buffered = 0
        }
        while bytes.count - offset >= 64 {
            compress(bytes.baseAddress! + offset)
            offset += 64
        }
        for index in offset..<bytes.count { buffer[index - offset] = bytes[index] }
        buffered = bytes.count - offset
    }

    /// The 16-byte digest of the message so far (the message's padding and length added).
    package mutating func finalize() -> [UInt8] {
        let bits = length &* 8
        var padding = [UInt8](repeating: 0, count: buffered < 56 ? 56 - buffered : 120 - buffered)
        padding[0] = 0x80
        withUnsafeBytes(of: bits.littleEndian) { lengthBytes in
            padding.append(contentsOf: lengthBytes)
        }
        let kept = length
        padding.withUnsafeBytes { update($0) }
        length = kept
        var digest: [UInt8] = []
        digest.reserveCapacity(16)
        withUnsafeBytes(of: state.0.littleEndian) { digest.append(contentsOf: $0) }
        withUnsafeBytes(of: state.1.littleEndian) { digest.append(contentsOf: $0) }
        withUnsafeBytes(of: state.2.littleEndian) { digest.append(contentsOf: $0) }
        withUnsafeBytes(of: state.3.littleEndian) { digest.append(contentsOf: $0) }
        return digest
    }

    private mutating func compress(_ block: UnsafeRawPointer) {
        Self.compress(&state, block)
    }

    private typealias State = (UInt32, UInt32, UInt32, UInt32)

    @inline(__always)
    private static func rotate(_ value: UInt32, _ shift: UInt32) -> UInt32 {
        (value << shift) | (value >> (32 - shift))
    }

    /// Two blocks of two messages, step by step side by side (see ``hash(_:_:)``).
    private static func compress(
        _ state: inout State, _ block: UnsafeRawPointer, _ otherState: inout State, _ other: UnsafeRawPointer
    ) {
        @inline(__always) func w(_ index: Int) -> UInt32 {
            UInt32(littleEndian: block.loadUnaligned(fromByteOffset: index &<< 2, as: UInt32.self))
        }
        @inline(__always) func v(_ index: Int) -> UInt32 {
            UInt32(littleEndian: other.loadUnaligned(fromByteOffset: index &<< 2, as: UInt32.self))
        }
        var (a, b, c, d) = state
        var (e, f, g, h) = otherState
        for i in stride(from: 0, to: 16, by: 4) {
            a = rotate(a &+ ((b & c) | (~b & d)) &+ w(i), 3)
            e = rotate(e &+ ((f & g) | (~f & h)) &+ v(i), 3)
            d = rotate(d &+ ((a & b) | (~a & c)) &+ w(i + 1), 7)
            h = rotate(h &+ ((e & f) | (~e & g)) &+ v(i + 1), 7)
            c = rotate(c &+ ((d & a) | (~d & b)) &+ w(i + 2), 11)
            g = rotate(g &+ ((h & e) | (~h & f)) &+ v(i + 2), 11)
            b = rotate(b &+ ((c & d) | (~c & a)) &+ w(i + 3), 19)
            f = rotate(f &+ ((g & h) | (~g & e)) &+ v(i + 3), 19)
        }
        for i in 0..<4 {
            a = rotate(a &+ ((b & c) | (b & d) | (c & d)) &+ w(i) &+ 0x5a82_7999, 3)
            e = rotate(e &+ ((f & g) | (f & h) | (g & h)) &+ v(i) &+ 0x5a82_7999, 3)
            d = rotate(d &+ ((a & b) | (a & c) | (b & c)) &+ w(i + 4) &+ 0x5a82_7999, 5)
            h = rotate(h &+ ((e & f) | (e & g) | (f & g)) &+ v(i + 4) &+ 0x5a82_7999, 5)
            c = rotate(c &+ ((d & a) | (d & b) | (a & b)) &+ w(i + 8) &+ 0x5a82_7999, 9)
            g = rotate(g &+ ((h & e) | (h & f) | (e & f)) &+ v(i + 8) &+ 0x5a82_7999, 9)
            b = rotate(b &+ ((c & d) | (c & a) | (d & a)) &+ w(i + 12) &+ 0x5a82_7999, 13)
            f = rotate(f &+ ((g & h) | (g & e) | (h & e)) &+ v(i + 12) &+ 0x5a82_7999, 13)
        }
        for k in 0..<4 {
            let i = (k & 1) << 1 | k >> 1  // 0, 2, 1, 3
            a = rotate(a &+ (b ^ c ^ d) &+ w(i) &+ 0x6ed9_eba1, 3)
            e = rotate(e &+ (f ^ g ^ h) &+ v(i) &+ 0x6ed9_eba1, 3)
            d = rotate(d &+ (a ^ b ^ c) &+ w(i + 8) &+ 0x6ed9_eba1, 9)
            h = rotate(h &+ (e ^ f ^ g) &+ v(i + 8) &+ 0x6ed9_eba1, 9)
            c = rotate(c &+ (d ^ a ^ b) &+ w(i + 4) &+ 0x6ed9_eba1, 11)
            g = rotate(g &+ (h ^ e ^ f) &+ v(i + 4) &+ 0x6ed9_eba1, 11)
            b = rotate(b &+ (c ^ d ^ a) &+ w(i + 12) &+ 0x6ed9_eba1, 15)
            f = rotate(f &+ (g ^ h ^ e) &+ v(i + 12) &+ 0x6ed9_eba1, 15)
        }
        state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d)
        otherState = (otherState.0 &+ e, otherState.1 &+ f, otherState.2 &+ g, otherState.3 &+ h)
    }

    private static func compress(_ state: inout State, _ block: UnsafeRawPointer) {
        // (The words are loaded where used and the state kept in locals, not in a closure's
        // captured variables: those live in memory, a store and a load per step.)
        @inline(__always) func w(_ index: Int) -> UInt32 {
            UInt32(littleEndian: block.loadUnaligned(fromByteOffset: index &<< 2, as: UInt32.self))
        }
        var (a, b, c, d) = state
        // Round 1: F(x, y, z) = (x & y) | (~x & z).
        for i in stride(from: 0, to: 16, by: 4) {
            a = rotate(a &+ ((b & c) | (~b & d)) &+ w(i), 3)
            d = rotate(d &+ ((a & b) | (~a & c)) &+ w(i + 1), 7)
            c = rotate(c &+ ((d & a) | (~d & b)) &+ w(i + 2), 11)
            b = rotate(b &+ ((c & d) | (~c & a)) &+ w(i + 3), 19)
        }
        // Round 2: G(x, y, z) = majority, + 0x5A827999.
        for i in 0..<4 {
            a = rotate(a &+ ((b & c) | (b & d) | (c & d)) &+ w(i) &+ 0x5a82_7999, 3)
            d = rotate(d &+ ((a & b) | (a & c) | (b & c)) &+ w(i + 4) &+ 0x5a82_7999, 5)
            c = rotate(c &+ ((d & a) | (d & b) | (a & b)) &+ w(i + 8) &+ 0x5a82_7999, 9)
            b = rotate(b &+ ((c & d) | (c & a) | (d & a)) &+ w(i + 12) &+ 0x5a82_7999, 13)
        }
        // Round 3: H(x, y, z) = x ^ y ^ z, + 0x6ED9EBA1, words in bit-reversed order.
        for k in 0..<4 {
            let i = (k & 1) << 1 | k >> 1  // 0, 2, 1, 3
            a = rotate(a &+ (b ^ c ^ d) &+ w(i) &+ 0x6ed9_eba1, 3)
            d = rotate(d &+ (a ^ b ^ c) &+ w(i + 8) &+ 0x6ed9_eba1, 9)
            c = rotate(c &+ (d ^ a ^ b) &+ w(i + 4) &+ 0x6ed9_eba1, 11)
            b = rotate(b &+ (c ^ d ^ a) &+ w(i + 12) &+ 0x6ed9_eba1, 15)
        }
        state = (state.0 &+ a, state.1 &+ b, state.2 &+ c, state.3 &+ d)
    }
}
