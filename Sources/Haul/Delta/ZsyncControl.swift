import Crypto
package import Foundation

/// A zsync control file (`FILE.zsync`), as zsyncmake 0.6.2 writes it: a header of
/// `Name: value` lines, an empty line, then a table with one entry per block of the target
/// file.
///
/// ```
/// zsync: 0.6.2
/// Filename: example.iso
/// MTime: Mon, 30 Nov 2026 16:49:35 +0000
/// Blocksize: 2048
/// Length: 10000
/// Hash-Lengths: 2,2,3
/// URL: example.iso
/// SHA-1: ce1c4a51616557569b55c124913d674e8a3129cc
///
/// <per block: the last rsum-bytes of the block's RollingChecksum, then the first
///  checksum-bytes of its MD4; the last block padded with zeros to the block size>
/// ```
///
/// `Hash-Lengths` is `seq_matches,rsum_bytes,checksum_bytes`: how many consecutive blocks
/// must match before a match is believed (1 or 2), and how many bytes of each sum the
/// table keeps. A gzip target's map (`Z-Map2: N`, N four-byte entries right after its
/// line) is skipped; `Z-URL` is kept only so that a file that offers nothing else can be
/// refused by name. A header this parser does not know is an error, as in zsync, unless
/// the file's `Safe:` line names it.
package struct ZsyncControl: Sendable, Equatable {
    /// The `zsync:` line: the version of the program that wrote it.
    package var version: String
    /// `Filename`: the name the target is saved under, if given.
    package var filename: String?
    /// `MTime`, as written (an RFC 2822 date).
    package var modificationTime: String?
    /// `Blocksize`: a power of two.
    package var blockSize: Int
    /// `Length`: the target's size in bytes.
    package var length: Int64
    /// `Hash-Lengths`, first value: 1 or 2.
    package var sequenceMatches: Int
    /// `Hash-Lengths`, second value: 1 to 4.
    package var rsumBytes: Int
    /// `Hash-Lengths`, third value: 3 to 16.
    package var checksumBytes: Int
    /// Every `URL` line, as written (relative to the control file's own URL, or absolute).
    package var urls: [String]
    /// Every `Z-URL` line (a gzip-compressed copy of the target, not supported).
    package var compressedURLs: [String]
    /// `SHA-1` of the whole target.
    package var sha1: Checksum?
    /// `SHA-256` of the whole target, where the file gives one (zsyncmake does not; Haul's
    /// publisher does, and names it in `Safe:` so that zsync 0.6.2 accepts the file).
    package var sha256: Checksum?
    /// The block table, one masked rolling checksum and one checksum prefix per block.
    package var table: Table

    /// The blocks' sums, kept flat: a control file for a 4 GiB file of 2 KiB blocks has two
    /// million of them.
    package struct Table: Sendable, Equatable {
        /// Each block's stored rolling checksum: ``RollingChecksum/value`` masked to the
        /// stored bytes.
        package var rsums: [UInt32]
        /// Each block's first `checksumBytes` bytes of MD4, one after the other.
        package var checksums: [UInt8]
        package var checksumBytes: Int

        package init(rsums: [UInt32], checksums: [UInt8], checksumBytes: Int) {
            self.rsums = rsums
            self.checksums = checksums
            self.checksumBytes = checksumBytes
        }

        package var count: Int { rsums.count }

        /// The stored checksum prefix of block `index`.
        package func checksum(of index: Int) -> ArraySlice<UInt8> {
            checksums[index * checksumBytes..<(index + 1) * checksumBytes]
        }
    }

    /// The number of blocks a target of `length` bytes has in blocks of `blockSize`.
    package static func blockCount(length: Int64, blockSize: Int) -> Int {
        Int((length + Int64(blockSize) - 1) / Int64(blockSize))
    }

    /// The mask of the stored part of a rolling checksum.
    package var rsumMask: UInt32 { RollingChecksum.mask(bytes: rsumBytes) }

    /// Whether `prefix` (the first bytes of a download) is a control file's start.
    package static func looksLikeControl(_ prefix: some Collection<UInt8>) -> Bool {
        prefix.starts(with: Array("zsync: ".utf8))
    }

    /// The headers this parser reads; any other must be named by the file's `Safe:` line.
    private static let known: Set<String> = [
        "zsync", "Min-Version", "Filename", "MTime", "Blocksize", "Length", "Hash-Lengths", "URL", "Z-URL",
        "Z-Map2", "Z-Filename", "Recompress", "SHA-1", "SHA-256", "Safe",
    ]

    /// Reads a control file.
    ///
    /// - Throws: ``DownloadError/Code/invalidManifest`` saying what is wrong: a header
    ///   missing or out of range, an unknown header, a table shorter than `Length` needs.
    package static func parse(_ bytes: [UInt8]) throws(DownloadError) -> ZsyncControl {
        func invalid(_ reason: String) -> DownloadError {
            DownloadError(.invalidManifest, "invalid zsync control file: \(reason)")
        }
        guard looksLikeControl(bytes) else { throw invalid("it does not start with a 'zsync:' line") }
        var headers: [(name: String, value: String)] = []
        var offset = 0
        while true {
            guard let end = bytes[offset...].firstIndex(of: UInt8(ascii: "\n")) else {
                throw invalid("the header does not end (no empty line before the block table)")
            }
            var line = bytes[offset..<end]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            offset = end + 1
            if line.isEmpty { break }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
                throw invalid("a header line has no ':' (\(String(decoding: line.prefix(60), as: UTF8.self)))")
            }
            let name = String(decoding: line[..<colon], as: UTF8.self)
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
            headers.append((name, value))
            if name == "Z-Map2" {
                // Its map's entries (two 16-bit offsets each) follow the line at once.
                guard let entries = Int(value), entries >= 0, offset + entries * 4 <= bytes.count else {
                    throw invalid("Z-Map2 '\(value)' is not a count of the entries that follow")
                }
                offset += entries * 4
            }
        }
        func one(_ name: String) -> String? { headers.last { $0.name == name }?.value }
        func all(_ name: String) -> [String] { headers.filter { $0.name == name }.map(\.value) }

        let safe = Set((one("Safe") ?? "").split(whereSeparator: { $0 == " " || $0 == "," }).map(String.init))
        if let unknown = headers.first(where: { !known.contains($0.name) && !safe.contains($0.name) }) {
            throw invalid("header '\(unknown.name)' is not one this version knows, and the file does not mark it Safe")
        }
        guard let version = one("zsync") else { throw invalid("no 'zsync:' version") }
        guard let sizeText = one("Blocksize"), let blockSize = Int(sizeText), blockSize >= 16, blockSize <= 1 << 24,
            blockSize & (blockSize - 1) == 0
        else { throw invalid("Blocksize '\(one("Blocksize") ?? "")' is not a power of two from 16 to 16 MiB") }
        guard let lengthText = one("Length"), let length = Int64(lengthText), length >= 0 else {
            throw invalid("Length '\(one("Length") ?? "")' is not a size in bytes")
        }
        let lengths = (one("Hash-Lengths") ?? "1,4,16").split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard lengths.count == 3, let sequence = lengths[0], let rsumBytes = lengths[1], let checksumBytes = lengths[2],
            (1...2).contains(sequence), (1...4).contains(rsumBytes), (3...16).contains(checksumBytes)
        else {
            throw invalid("Hash-Lengths '\(one("Hash-Lengths") ?? "")' is not 'seq_matches (1-2),rsum bytes (1-4),checksum bytes (3-16)'")
        }
        func digest(_ name: String, _ algorithm: Checksum.Algorithm) throws(DownloadError) -> Checksum? {
            guard let text = one(name) else { return nil }
            do {
                return try Checksum(algorithm, hex: text)
            } catch {
                throw invalid("\(name) '\(text)' is not \(algorithm.hexLength) hexadecimal digits")
            }
        }
        let sha1 = try digest("SHA-1", .sha1)
        let sha256 = try digest("SHA-256", .sha256)

        let blocks = blockCount(length: length, blockSize: blockSize)
        let entry = rsumBytes + checksumBytes
        guard bytes.count - offset >= blocks * entry else {
            throw invalid("its block table holds \((bytes.count - offset) / entry) of the \(blocks) blocks Length needs")
        }
        var rsums = [UInt32](repeating: 0, count: blocks)
        var checksums = [UInt8](repeating: 0, count: blocks * checksumBytes)
        for block in 0..<blocks {
            var rsum: UInt32 = 0
            for byte in bytes[offset..<offset + rsumBytes] { rsum = rsum << 8 | UInt32(byte) }
            rsums[block] = rsum
            for index in 0..<checksumBytes {
                checksums[block * checksumBytes + index] = bytes[offset + rsumBytes + index]
            }
            offset += entry
        }
        return ZsyncControl(
            version: version, filename: one("Filename"), modificationTime: one("MTime"), blockSize: blockSize,
            length: length, sequenceMatches: sequence, rsumBytes: rsumBytes, checksumBytes: checksumBytes,
            urls: all("URL"), compressedURLs: all("Z-URL"), sha1: sha1, sha256: sha256,
            table: Table(rsums: rsums, checksums: checksums, checksumBytes: checksumBytes))
    }
}

extension ZsyncControl {
    /// The control file of `target`, as zsyncmake 0.6.2 makes one: its block table (the last
    /// block padded with zeros), its length and SHA-1, and the headers given. With
    /// `sha256`, a `SHA-256` header too, named in `Safe:` so that zsync 0.6.2, which does
    /// not know it, still reads the file.
    package static func describing(
        _ target: UnsafeRawBufferPointer, blockSize: Int, sequenceMatches: Int, rsumBytes: Int, checksumBytes: Int,
        filename: String?, modificationTime: String?, urls: [String], sha256: Bool = false
    ) -> ZsyncControl {
        let length = target.count
        let blocks = blockCount(length: Int64(length), blockSize: blockSize)
        let mask = RollingChecksum.mask(bytes: rsumBytes)
        var rsums = [UInt32](repeating: 0, count: blocks)
        var checksums = [UInt8]()
        checksums.reserveCapacity(blocks * checksumBytes)
        var last = [UInt8](repeating: 0, count: blockSize)
        for block in 0..<blocks {
            let start = block * blockSize
            let end = min(start + blockSize, length)
            let digest: [UInt8]
            if end - start == blockSize {
                let bytes = UnsafeRawBufferPointer(rebasing: target[start..<end])
                rsums[block] = RollingChecksum(bytes).value & mask
                digest = MD4.hash(bytes)
            } else {
                for index in start..<end { last[index - start] = target[index] }
                rsums[block] = RollingChecksum(last).value & mask
                digest = MD4.hash(last)
            }
            checksums += digest[..<checksumBytes]
        }
        return ZsyncControl(
            version: "0.6.2", filename: filename, modificationTime: modificationTime, blockSize: blockSize,
            length: Int64(length), sequenceMatches: sequenceMatches, rsumBytes: rsumBytes,
            checksumBytes: checksumBytes, urls: urls, compressedURLs: [],
            sha1: Checksum(.sha1, digest: Insecure.SHA1.hash(data: target)),
            sha256: sha256 ? Checksum(.sha256, digest: SHA256.hash(data: target)) : nil,
            table: Table(rsums: rsums, checksums: checksums, checksumBytes: checksumBytes))
    }

    /// The file's bytes, in the order zsyncmake 0.6.2 writes its headers.
    package func encoded() -> [UInt8] {
        var text = "zsync: \(version)\n"
        if sha256 != nil { text += "Safe: SHA-256\n" }
        if let filename { text += "Filename: \(filename)\n" }
        if let modificationTime { text += "MTime: \(modificationTime)\n" }
        text += "Blocksize: \(blockSize)\nLength: \(length)\n"
        text += "Hash-Lengths: \(sequenceMatches),\(rsumBytes),\(checksumBytes)\n"
        for url in urls { text += "URL: \(url)\n" }
        if let sha1 { text += "SHA-1: \(sha1.hex)\n" }
        if let sha256 { text += "SHA-256: \(sha256.hex)\n" }
        text += "\n"
        var bytes = Array(text.utf8)
        bytes.reserveCapacity(bytes.count + table.count * (rsumBytes + checksumBytes))
        for block in 0..<table.count {
            let rsum = table.rsums[block]
            for index in stride(from: rsumBytes - 1, through: 0, by: -1) {
                bytes.append(UInt8(truncatingIfNeeded: rsum >> (8 * UInt32(index))))
            }
            bytes += table.checksum(of: block)
        }
        return bytes
    }
}

extension ZsyncControl {
    /// What zsyncmake 0.6.2 chooses for a target of `length` bytes: blocks of 2 KiB below
    /// 100 MB and 4 KiB above; two blocks in a row to match (one, for a target of one
    /// block); a rolling checksum long enough
    /// that a chance hit per window is rare, and a checksum prefix long enough that a
    /// wrong block is believed with odds under one in a million (2^-20) over the whole file.
    package static func parameters(length: Int64) -> (
        blockSize: Int, sequenceMatches: Int, rsumBytes: Int, checksumBytes: Int
    ) {
        let blockSize = length < 100_000_000 ? 2048 : 4096
        let sequenceMatches = length > Int64(blockSize) ? 2 : 1
        let size = Double(max(length, 1))
        let blocks = Double(1 + length / Int64(blockSize))
        // (As zsyncmake's C: each value converted to an int, truncated.)
        let rsum = Int((7.9 + ((log2(size) + log2(Double(blockSize))) - 8.6) / Double(sequenceMatches)) / 8)
        let checksum = Int((7.9 + (20 + log2(size) + log2(blocks)) / Double(sequenceMatches)) / 8)
        let single = Int((7.9 + (20 + log2(blocks))) / 8)
        return (blockSize, sequenceMatches, min(4, max(2, rsum)), max(checksum, single))
    }

    /// `MTime` as zsyncmake 0.6.2 writes it: `Mon, 30 Nov 2026 16:49:35 +0000`.
    package static func modificationTime(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss Z"
        return formatter.string(from: date)
    }
}
