import Crypto
import Foundation
import Testing

@testable import Haul

/// The parts of a zsync client that need no network: MD4, the rolling checksum, the control
/// file's format (against Debian's zsyncmake 0.6.2, where it is installed), and the search
/// of a seed for the target's blocks.
@Suite("zsync: control files and block matching (rules)")
struct ZsyncTests {
    // MARK: - MD4

    @Test(arguments: [
        ("", "31d6cfe0d16ae931b73c59d7e0c089c0"),
        ("a", "bde52cb31de33e46245e05fbdbd6fb24"),
        ("abc", "a448017aaf21d8525fc10ae87aa6729d"),
        ("message digest", "d9130a8164549fe818874806e1c7014b"),
        ("abcdefghijklmnopqrstuvwxyz", "d79e1c308aa5bbcdeea8ed63df412da9"),
        (
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            "043f8582f241db351ce627e153e7f0e4"
        ),
        (
            "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
            "e33b4ddc9c38f2199c3e7b164fcc0536"
        ),
    ])
    func md4MatchesRFC1320(message: String, digest: String) {
        #expect(Self.hex(MD4.hash(Array(message.utf8))) == digest)
    }

    @Test func md4OfAMessageFedInPiecesIsTheSame() {
        let message = Self.bytes(count: 1000, seed: 7)
        for cut in [0, 1, 55, 56, 63, 64, 65, 127, 128, 999] {
            var md4 = MD4()
            message[..<cut].withUnsafeBytes { md4.update($0) }
            message[cut...].withUnsafeBytes { md4.update($0) }
            #expect(md4.finalize() == MD4.hash(message), "cut at \(cut)")
        }
    }

    // MARK: - Rolling checksum

    /// Two messages hashed side by side give each one's own MD4, whatever their length.
    @Test(arguments: [0, 1, 55, 56, 63, 64, 65, 4096, 4100])
    func md4OfTwoMessagesTogetherIsEachOnesOwn(length: Int) {
        let first = Self.bytes(count: length, seed: 71)
        let second = Self.bytes(count: length, seed: 72)
        let (one, two) = first.withUnsafeBytes { a in second.withUnsafeBytes { b in MD4.hash(a, b) } }
        #expect(one == MD4.hash(first))
        #expect(two == MD4.hash(second))
        #expect(one != two || length == 0)
    }

    @Test(arguments: [16, 2048])
    func rollingEqualsComputingAfresh(blockSize: Int) {
        let data = Self.bytes(count: blockSize * 3, seed: 11)
        var rolling = RollingChecksum(data[0..<blockSize])
        for start in 1...(data.count - blockSize) {
            rolling.roll(out: data[start - 1], in: data[start + blockSize - 1], blockSize: blockSize)
            #expect(rolling == RollingChecksum(data[start..<start + blockSize]), "at \(start)")
            if rolling != RollingChecksum(data[start..<start + blockSize]) { return }
        }
    }

    /// The scan's filter never turns away an entry (a block would be fetched that a seed
    /// holds), and passes few that are not: about 1 in 1,500 at 32 bits an entry.
    @Test(arguments: [1, 100, 131_072])
    func theBlockFilterKeepsEveryEntryAndFewOthers(entries: Int) {
        var filter = BlockFilter(entries: entries)
        var generator = SystemRandomNumberGenerator()
        let inserted = (0..<entries).map { _ in UInt64.random(in: .min ... .max, using: &generator) }
        for hash in inserted { filter.insert(hash) }
        let (kept, passed) = filter.words.withUnsafeBufferPointer { words in
            let lookup = BlockFilter.Lookup(words: words, shift: filter.shift)
            let kept = inserted.allSatisfy(lookup.contains)
            let passed = (0..<100_000).count { _ in lookup.contains(UInt64.random(in: .min ... .max, using: &generator)) }
            return (kept, passed)
        }
        #expect(kept)
        #expect(passed < 200, "\(passed) of 100,000 others passed")
    }

    @Test func rollingChecksumIsZsyncs() {
        // a = Σ d[i], b = Σ (n - i)·d[i], modulo 2^16.
        let sum = RollingChecksum([1, 2, 3, 250])
        #expect(sum.a == 256)
        #expect(sum.b == 4 * 1 + 3 * 2 + 2 * 3 + 1 * 250)
        #expect(sum.value == 256 << 16 | 266)
        #expect(RollingChecksum.mask(bytes: 2) == 0xffff)
        #expect(RollingChecksum.mask(bytes: 3) == 0xff_ffff)
        #expect(RollingChecksum.mask(bytes: 4) == 0xffff_ffff)
    }

    // MARK: - Control files

    /// A control file written here as zsyncmake lays one out.
    static func controlFile(
        of target: [UInt8], blockSize: Int, hashLengths: (Int, Int, Int), extraHeaders: String = ""
    ) -> [UInt8] {
        let blocks = ZsyncControl.blockCount(length: Int64(target.count), blockSize: blockSize)
        var text = """
            zsync: 0.6.2
            Filename: t.bin
            MTime: Mon, 30 Nov 2026 16:49:35 +0000
            Blocksize: \(blockSize)
            Length: \(target.count)
            Hash-Lengths: \(hashLengths.0),\(hashLengths.1),\(hashLengths.2)
            URL: t.bin
            SHA-1: \(hex(Array(Insecure.SHA1.hash(data: target))))

            """
        text += extraHeaders + "\n"
        var bytes = Array(text.utf8)
        for block in 0..<blocks {
            var chunk = Array(target[(block * blockSize)..<min((block + 1) * blockSize, target.count)])
            chunk += [UInt8](repeating: 0, count: blockSize - chunk.count)
            let rsum = RollingChecksum(chunk).value
            let rsumBytes = withUnsafeBytes(of: rsum.bigEndian) { Array($0) }
            bytes += rsumBytes[(4 - hashLengths.1)...]
            bytes += MD4.hash(chunk)[..<hashLengths.2]
        }
        return bytes
    }

    @Test func aControlFileIsRead() throws {
        let target = Self.bytes(count: 5000, seed: 3)
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: 1024, hashLengths: (2, 2, 3)))
        #expect(control.version == "0.6.2")
        #expect(control.filename == "t.bin")
        #expect(control.modificationTime == "Mon, 30 Nov 2026 16:49:35 +0000")
        #expect(control.blockSize == 1024)
        #expect(control.length == 5000)
        #expect((control.sequenceMatches, control.rsumBytes, control.checksumBytes) == (2, 2, 3))
        #expect(control.urls == ["t.bin"])
        #expect(control.sha1?.hex == Self.hex(Array(Insecure.SHA1.hash(data: target))))
        #expect(control.table.count == 5)
        // The last block is padded with zeros; two rsum bytes keep b only.
        let last = Array(target[4096...]) + [UInt8](repeating: 0, count: 1024 - 904)
        #expect(control.table.rsums[4] == UInt32(RollingChecksum(last).b))
        #expect(Array(control.table.checksum(of: 4)) == Array(MD4.hash(last)[..<3]))
    }

    @Test func aGzipMapIsSkippedAndSafeHeadersAreAllowed() throws {
        let target = Self.bytes(count: 3000, seed: 5)
        var file = Self.controlFile(of: target, blockSize: 1024, hashLengths: (1, 4, 16))
        // Z-Map2's entries (4 bytes each) come right after its line, inside the header.
        let header = Array("Z-URL: t.bin.gz\nZ-Map2: 2\n".utf8) + [0x0a, 0x0a, 0x3a, 0x0a, 1, 2, 3, 4]
        let at = Array("zsync: 0.6.2\n".utf8).count
        file.insert(contentsOf: header + Array("Safe: X-Future Other\nX-Future: yes\n".utf8), at: at)
        let control = try ZsyncControl.parse(file)
        #expect(control.compressedURLs == ["t.bin.gz"])
        #expect(control.table.count == 3)
        #expect(Array(control.table.checksum(of: 2)) == MD4.hash(Array(target[2048...]) + [UInt8](repeating: 0, count: 72)))
    }

    @Test(arguments: [
        ("Blocksize: 1000", "Blocksize"),
        ("Length: -1", "Length"),
        ("Hash-Lengths: 3,2,3", "Hash-Lengths"),
        ("Hash-Lengths: 2,5,3", "Hash-Lengths"),
        ("Hash-Lengths: 2,2,2", "Hash-Lengths"),
        ("SHA-1: 12ab", "SHA-1"),
        ("X-Unknown: 1", "X-Unknown"),
    ])
    func aBadHeaderIsRefusedByName(line: String, named: String) {
        let target = Self.bytes(count: 2048, seed: 1)
        var text = String(decoding: Self.controlFile(of: target, blockSize: 1024, hashLengths: (2, 2, 3)), as: UTF8.self)
        let name = String(line.prefix { $0 != ":" })
        if let range = text.range(of: "\(name): [^\n]*\n", options: .regularExpression) {
            text.replaceSubrange(range, with: line + "\n")
        } else {
            text = text.replacingOccurrences(of: "zsync: 0.6.2\n", with: "zsync: 0.6.2\n\(line)\n")
        }
        do {
            _ = try ZsyncControl.parse(Array(text.utf8))
            Issue.record("'\(line)' was accepted")
        } catch {
            #expect(error.code == .invalidManifest)
            #expect(error.message.contains(named), "\(error.message)")
        }
    }

    @Test func aTruncatedTableOrHeaderIsRefused() {
        let file = Self.controlFile(of: Self.bytes(count: 4096, seed: 2), blockSize: 1024, hashLengths: (2, 3, 5))
        #expect(throws: DownloadError.self) { try ZsyncControl.parse(Array(file.dropLast())) }
        #expect(throws: DownloadError.self) { try ZsyncControl.parse(Array("zsync: 0.6.2\nLength: 4\n".utf8)) }
        #expect(throws: DownloadError.self) { try ZsyncControl.parse(Array("<html>".utf8)) }
        #expect(ZsyncControl.looksLikeControl(file))
        #expect(!ZsyncControl.looksLikeControl(Array("<html>".utf8)))
    }

    /// Debian's zsyncmake 0.6.2 writes what this reads: its headers, and a table whose every
    /// entry is the block's rolling checksum and MD4 as computed here.
    @Test func zsyncmakesOutputIsRead() async throws {
        let zsyncmake = "/usr/bin/zsyncmake"
        guard FileManager.default.isExecutableFile(atPath: zsyncmake) else {
            print("skipped: reading zsyncmake's output needs zsyncmake (Debian's zsync package; .ci/run installs it)")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zsync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // Not a multiple of the block size: the last block is padded.
        let target = Self.bytes(count: 70_000, seed: 9)
        let file = directory.appendingPathComponent("t.bin")
        try Data(target).write(to: file)
        let output = directory.appendingPathComponent("t.bin.zsync")
        let run = try await ChildProcess.run(
            zsyncmake, arguments: ["-b", "1024", "-u", "t.bin", "-o", output.path, file.path],
            environment: ProcessInfo.processInfo.environment, timeLimit: .seconds(60), mergingErrors: true)
        #expect(run.termination.code == 0, "\(String(decoding: run.output, as: UTF8.self))")
        let control = try ZsyncControl.parse(Array(try Data(contentsOf: output)))
        #expect(control.version == "0.6.2")
        #expect(control.length == 70_000)
        #expect(control.blockSize == 1024)
        #expect(control.urls == ["t.bin"])
        #expect(control.sha1?.hex == Self.hex(Array(Insecure.SHA1.hash(data: target))))
        #expect(control.table.count == 69)
        var wrong: [Int] = []
        for block in 0..<control.table.count {
            var chunk = Array(target[(block * 1024)..<min((block + 1) * 1024, target.count)])
            chunk += [UInt8](repeating: 0, count: 1024 - chunk.count)
            let rsumRight = control.table.rsums[block] == RollingChecksum(chunk).value & control.rsumMask
            let md4Right = Array(control.table.checksum(of: block)) == Array(MD4.hash(chunk)[..<control.checksumBytes])
            if !rsumRight || !md4Right { wrong.append(block) }
        }
        #expect(wrong.isEmpty, "blocks whose sums differ from zsyncmake's: \(wrong)")
        // And the file Haul writes for the same target and headers is zsyncmake's, byte for byte.
        let written = target.withUnsafeBytes {
            ZsyncControl.describing(
                $0, blockSize: 1024, sequenceMatches: control.sequenceMatches, rsumBytes: control.rsumBytes,
                checksumBytes: control.checksumBytes, filename: control.filename,
                modificationTime: control.modificationTime, urls: control.urls)
        }
        #expect(written == control)
        #expect(written.encoded() == Array(try Data(contentsOf: output)))
    }

    /// The block size and hash lengths Haul's publisher chooses are zsyncmake's, for small
    /// files, middling ones and one past its 100 MB step to 4 KiB blocks (sparse, so cheap).
    @Test(arguments: [1, 70_000, 3_000_000, 100_000_001])
    func theParametersForALengthAreZsyncmakes(length: Int) async throws {
        let zsyncmake = "/usr/bin/zsyncmake"
        guard FileManager.default.isExecutableFile(atPath: zsyncmake) else {
            print("skipped: needs zsyncmake (Debian's zsync package; .ci/run installs it)")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zsync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("t.bin")
        #expect(FileManager.default.createFile(atPath: file.path, contents: nil))
        let handle = try FileHandle(forWritingTo: file)
        try handle.truncate(atOffset: UInt64(length))
        try handle.close()
        let output = directory.appendingPathComponent("t.bin.zsync")
        let run = try await ChildProcess.run(
            zsyncmake, arguments: ["-u", "t.bin", "-o", output.path, file.path],
            environment: ProcessInfo.processInfo.environment, timeLimit: .seconds(120), mergingErrors: true)
        #expect(run.termination.code == 0, "\(String(decoding: run.output, as: UTF8.self))")
        let made = try ZsyncControl.parse(Array(try Data(contentsOf: output)))
        let chosen = ZsyncControl.parameters(length: Int64(length))
        #expect(chosen.blockSize == made.blockSize)
        #expect(chosen.sequenceMatches == made.sequenceMatches)
        #expect(chosen.rsumBytes == made.rsumBytes)
        #expect(chosen.checksumBytes == made.checksumBytes)
    }

    @Test func aControlFileWithSHA256ReadsBackAndNamesItSafe() throws {
        let target = Self.bytes(count: 5000, seed: 61)
        let control = target.withUnsafeBytes {
            ZsyncControl.describing(
                $0, blockSize: 2048, sequenceMatches: 2, rsumBytes: 2, checksumBytes: 3, filename: "t.bin",
                modificationTime: nil, urls: ["t.bin", "https://mirror.example/t.bin"], sha256: true)
        }
        let bytes = control.encoded()
        #expect(String(decoding: bytes.prefix(40), as: UTF8.self).hasPrefix("zsync: 0.6.2\nSafe: SHA-256\n"))
        let read = try ZsyncControl.parse(bytes)
        #expect(read == control)
        #expect(read.sha256?.hex == Self.hex(Array(SHA256.hash(data: target))))
    }

    /// Debian's zsync 0.6.2 client builds the target from a control file Haul wrote (with
    /// its SHA-256 header, which that client does not know and reads as Safe), an old version
    /// as its seed and nginx serving the target's missing blocks by multi-range requests.
    @Test func zsyncsOwnClientReadsAControlFileHaulWrote() async throws {
        let zsync = "/usr/bin/zsync"
        guard FileManager.default.isExecutableFile(atPath: zsync), NginxServer.isAvailable else {
            print("skipped: needs zsync and nginx (Debian's zsync and nginx packages; .ci/run installs them)")
            return
        }
        let old = Self.bytes(count: 300_000, seed: 71)
        var target = Array(old[..<100_000]) + Self.bytes(count: 333, seed: 72) + Array(old[100_000...])
        target.replaceSubrange(250_000..<254_000, with: Self.bytes(count: 4000, seed: 73))
        let control = target.withUnsafeBytes {
            ZsyncControl.describing(
                $0, blockSize: 2048, sequenceMatches: 2, rsumBytes: 3, checksumBytes: 5, filename: "t.bin",
                modificationTime: nil, urls: ["t.bin"], sha256: true)
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zsync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let seed = directory.appendingPathComponent("old.bin")
        try Data(old).write(to: seed)
        let output = directory.appendingPathComponent("t.bin")
        try await NginxServer.with { nginx in
            try nginx.write(target, at: "/z/t.bin", modified: Date())
            try nginx.write(control.encoded(), at: "/z/t.bin.zsync", modified: Date())
            let run = try await ChildProcess.run(
                zsync,
                arguments: ["-q", "-i", seed.path, "-o", output.path, nginx.url("/z/t.bin.zsync").absoluteString],
                environment: ["PATH": "/usr/bin:/bin", "HOME": directory.path], timeLimit: .seconds(60),
                mergingErrors: true)
            #expect(run.termination.code == 0, "zsync: \(String(decoding: run.output, as: UTF8.self))")
        }
        #expect(Array(try Data(contentsOf: output)) == target)
    }

    // MARK: - Matching a seed

    /// The target rebuilt from the seed's blocks where found and the target's own bytes
    /// for the ranges said to be missing: it must be the target.
    static func rebuild(_ target: [UInt8], seed: [UInt8], _ matcher: BlockMatcher) -> [UInt8] {
        var rebuilt = [UInt8](repeating: 0, count: target.count)
        let size = matcher.control.blockSize
        for (block, offset) in matcher.found.enumerated() {
            guard let offset else { continue }
            let start = block * size
            let count = min(size, target.count - start)
            for index in 0..<count {
                let from = Int(offset) + index
                rebuilt[start + index] = from < seed.count ? seed[from] : 0
            }
        }
        for range in matcher.missingRanges() {
            rebuilt.replaceSubrange(Int(range.lowerBound)..<Int(range.upperBound), with: target[Int(range.lowerBound)..<Int(range.upperBound)])
        }
        return rebuilt
    }

    @Test(arguments: [(1, 4, 16), (2, 2, 3), (2, 3, 4)])
    func anOldVersionGivesEveryBlockItStillHolds(hashLengths: (Int, Int, Int)) throws {
        let size = 1024
        let old = Self.bytes(count: 200_000, seed: 21)
        // 100 bytes inserted at 50,000 (every later block moves), 3,000 bytes changed at
        // 150,000, the end cut to a partial block.
        var target = Array(old[..<50_000]) + Self.bytes(count: 100, seed: 22) + Array(old[50_000...])
        target.replaceSubrange(150_000..<153_000, with: Self.bytes(count: 3000, seed: 23))
        target = Array(target[..<195_500])
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: size, hashLengths: hashLengths))
        var matcher = BlockMatcher(control)
        let found = old.withUnsafeBytes { matcher.scan($0) }
        #expect(found == matcher.foundCount)

        // Every block that lies wholly outside the changes is found; those that touch one
        // are not (random bytes do not repeat), the last, partial one included.
        var expected: Set<Int> = []
        for block in 0..<control.table.count {
            let start = block * size
            let end = start + size
            let touchesInsert = start < 50_100 && end > 50_000
            let touchesChange = start < 153_000 && end > 150_000
            let isLast = block == control.table.count - 1
            if !touchesInsert && !touchesChange && !isLast { expected.insert(block) }
        }
        let got = Set(matcher.found.indices.filter { matcher.found[$0] != nil })
        #expect(got == expected, "missing: \(expected.subtracting(got).sorted().prefix(10)), unexpected: \(got.subtracting(expected).sorted().prefix(10))")
        #expect(Self.rebuild(target, seed: old, matcher) == target)
        let missing = matcher.missingRanges().reduce(0) { $0 + $1.count }
        #expect(missing < 10 * size, "fetched \(missing) bytes of \(target.count)")
    }

    /// Scanned in parts by matchers of their own (as threads scan a large seed), then
    /// merged: the same blocks as one scan of the whole.
    @Test(arguments: [1, 2])
    func partsScannedApartAndMergedFindWhatOneScanFinds(sequenceMatches: Int) throws {
        let old = Self.bytes(count: 120_000, seed: 51)
        var target = Array(old[..<30_000]) + Self.bytes(count: 77, seed: 52) + Array(old[30_000...])
        target.replaceSubrange(90_000..<90_500, with: Self.bytes(count: 500, seed: 53))
        let control = try ZsyncControl.parse(
            Self.controlFile(of: target, blockSize: 1024, hashLengths: (sequenceMatches, 3, 4)))
        var whole = BlockMatcher(control)
        old.withUnsafeBytes { _ = whole.scan($0) }
        var merged = BlockMatcher(control)
        for part in [0..<40_000, 40_000..<80_000, 80_000..<120_000] {
            var matcher = BlockMatcher(control)
            old.withUnsafeBytes { _ = matcher.scan($0, windows: part) }
            merged.merge(matcher)
        }
        let found = { (matcher: BlockMatcher) in Set(matcher.found.indices.filter { matcher.found[$0] != nil }) }
        #expect(found(merged) == found(whole))
        #expect(merged.foundCount == whole.foundCount)
        #expect(Self.rebuild(target, seed: old, merged) == target)
    }

    /// With pairs, a block that starts a part and whose follower changed is found by the part
    /// before, as the block after its last match (the part it starts has no match before it
    /// and could take it only with its follower).
    @Test func aBlockStartingAPartIsFoundThoughItsFollowerChanged() throws {
        let size = 1024
        let target = Self.bytes(count: 20 * size, seed: 81)
        var seed = target
        seed[11 * size + 7] ^= 0xff
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: size, hashLengths: (2, 3, 8)))
        var merged = BlockMatcher(control)
        for part in [0..<10 * size, 10 * size..<20 * size] {
            var matcher = BlockMatcher(control)
            seed.withUnsafeBytes { _ = matcher.scan($0, windows: part) }
            merged.merge(matcher)
        }
        #expect(merged.found[10] == Int64(10 * size))
        #expect(merged.missingRanges() == [Int64(11 * size)..<Int64(12 * size)])
        #expect(Self.rebuild(target, seed: seed, merged) == target)
    }

    @Test func aBlockTheTargetHoldsTwiceIsFoundOnceForBoth() throws {
        let size = 512
        let repeated = Self.bytes(count: size, seed: 31)
        let target = Self.bytes(count: size * 2, seed: 32) + repeated + Self.bytes(count: size, seed: 33) + repeated
        let seed = Self.bytes(count: 1000, seed: 34) + repeated
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: size, hashLengths: (1, 4, 8)))
        var matcher = BlockMatcher(control)
        seed.withUnsafeBytes { _ = matcher.scan($0) }
        #expect(matcher.found == [nil, nil, 1000, nil, 1000])
        #expect(matcher.missingRanges() == [0..<1024, 1536..<2048])
    }

    /// The window after a match is checked first against the block after the matched one,
    /// on its own sums; a block the target holds three times is found so, and each of its
    /// places is filled, the one after the match and the two before it.
    @Test func aRepeatedBlockAfterAMatchFillsEveryPlaceItHas() throws {
        let size = 512
        let a = Self.bytes(count: size, seed: 35)
        let b = Self.bytes(count: size, seed: 36)
        let target = b + Self.bytes(count: size, seed: 37) + b + Self.bytes(count: size, seed: 38) + a + b
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: size, hashLengths: (1, 4, 8)))
        var matcher = BlockMatcher(control)
        (a + b).withUnsafeBytes { _ = matcher.scan($0) }
        #expect(matcher.found == [512, nil, 512, nil, 0, 512])
        #expect(Self.rebuild(target, seed: a + b, matcher) == target)
    }

    /// The same with pairs (`seq_matches` 2): a pair the target holds three times is
    /// filled in each place from the one pair of the seed.
    @Test func aRepeatedPairAfterAMatchFillsEveryPlaceItHas() throws {
        let size = 512
        let (a, b, c) = (Self.bytes(count: size, seed: 45), Self.bytes(count: size, seed: 46), Self.bytes(count: size, seed: 47))
        let target = b + c + Self.bytes(count: size, seed: 48) + b + c + Self.bytes(count: size, seed: 49) + a + b + c
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: size, hashLengths: (2, 3, 4)))
        var matcher = BlockMatcher(control)
        (a + b + c).withUnsafeBytes { _ = matcher.scan($0) }
        #expect(matcher.found == [512, 1024, nil, 512, 1024, nil, 0, 512, 1024])
        #expect(Self.rebuild(target, seed: a + b + c, matcher) == target)
    }

    /// A byte changed in a block of the seed costs the scan that block: right after a match
    /// the window is taken as the next block on its own sums, so with pairs the block before
    /// the change is not rolled through again because its follower changed.
    @Test(arguments: [1, 2])
    func aChangedBlockIsRolledThroughOnce(sequenceMatches: Int) throws {
        let size = 1024
        let target = Self.bytes(count: 40 * size, seed: 61)
        var seed = target
        for block in [5, 17, 30] { seed[block * size + 100] ^= 0xff }
        let control = try ZsyncControl.parse(
            Self.controlFile(of: target, blockSize: size, hashLengths: (sequenceMatches, 3, 8)))
        var matcher = BlockMatcher(control)
        seed.withUnsafeBytes { _ = matcher.scan($0) }
        #expect(matcher.missingRanges() == [5 * size..<6 * size, 17 * size..<18 * size, 30 * size..<31 * size].map {
            Int64($0.lowerBound)..<Int64($0.upperBound)
        })
        // Three changed blocks: three blocks' windows, less one each (the window at the next
        // block matches).
        #expect(matcher.rolledWindows == 3 * size, "rolled \(matcher.rolledWindows) windows")
        #expect(Self.rebuild(target, seed: seed, matcher) == target)
    }

    @Test func theTargetsOwnFileGivesItWhole() throws {
        let target = Self.bytes(count: 10_000, seed: 41)
        let control = try ZsyncControl.parse(Self.controlFile(of: target, blockSize: 1024, hashLengths: (2, 2, 3)))
        var matcher = BlockMatcher(control)
        target.withUnsafeBytes { _ = matcher.scan($0) }
        #expect(matcher.isComplete)
        #expect(matcher.missingRanges().isEmpty)
        #expect(Self.rebuild(target, seed: target, matcher) == target)
    }

    // MARK: - Helpers

    /// `count` bytes that look random and are the same for the same `seed`.
    static func bytes(count: Int, seed: UInt64) -> [UInt8] {
        var state = seed &* 0x9e37_79b9_7f4a_7c15 | 1
        return (0..<count).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state >> 24)
        }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
