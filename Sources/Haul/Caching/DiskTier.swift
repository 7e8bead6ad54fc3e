import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The response cache's disk tier: one file per key in a directory, up to a size, the
/// least recently used removed first.
///
/// Every method blocks (the cache calls them on its I/O thread pool). Several processes
/// may use one directory at once, each with its own tier, and any of them may be killed
/// at any instant: an entry is written whole to a temporary file and renamed into place,
/// so a reader sees the old entry or the new one, and each file ends with a checksum of
/// everything before it, so an entry a crash cut short or the disk damaged is removed
/// when read, never served.
///
/// An entry's file is named by the XXH64 of its key (16 hex digits and `.entry`) and
/// holds, little-endian:
///
/// | bytes | what |
/// | --- | --- |
/// | 8 | magic and version, `HAULC2\0\0` |
/// | 4 | the key's length in UTF-8 |
/// | 4 | the metadata's length |
/// | 8 | the body's length |
/// | | the key, UTF-8 (a file holding another key is a miss: a hash collision) |
/// | | the metadata: the ``CachedResponse`` (see ``EntryFormat/Metadata``) |
/// | | the body |
/// | 8 | the XXH64 of all the bytes before it |
///
/// Files of version 1 (`HAULC1`, an earlier release's, with the metadata in JSON) are read
/// as well; an entry is always written in the current version.
///
/// A hit sets the file's modification time to now: the order of use across processes and
/// restarts is that of the files' modification times. The tier keeps a running total of
/// its files' sizes, first counted by the first ``sweep()`` (a write runs it when none
/// has), and sweeps again when a write takes the total over the limit; a sweep removes
/// the files that were used longest ago until `sizeLimit × trimRatio` is left.
final class DiskTier: Sendable {
    /// What a ``DiskTier/sweep()`` found and did.
    struct SweepReport: Sendable, Hashable {
        /// The entries left, and their bytes.
        var entries: Int
        var bytes: Int64
        /// The entries removed to bring the directory within the size limit.
        var removed: Int
    }

    let directory: URL
    /// The most bytes the entries' files may take, and the share of it a trim leaves.
    let sizeLimit: Int64
    let trimRatio: Double
    /// How old a temporary file must be for a sweep to take it for a crashed writer's.
    static let abandonedAfter: Int64 = 60

    /// The directory's path, ending in `/`.
    private let prefix: String
    private let accounting = NIOLockedValueBox(Accounting())

    /// A tier in `directory`, created (owner-only) when missing. The directory is not read
    /// until the first sweep or write.
    init(directory: URL, sizeLimit: Int64, trimRatio: Double = 0.7) throws(DownloadError) {
        self.directory = directory
        self.sizeLimit = max(0, sizeLimit)
        self.trimRatio = min(max(trimRatio, 0), 1)
        let path = directory.path
        prefix = path.hasSuffix("/") ? path : path + "/"
        try makeDirectory(path)
    }

    /// The name of `key`'s file: the XXH64 of its UTF-8 in 16 hex digits, and `.entry`.
    static func fileName(for key: String) -> String {
        var hash = XXH64.hash(key)
        var digits = [UInt8](repeating: 0, count: 16)
        for position in (0..<16).reversed() {
            digits[position] = hexDigits[Int(hash & 0xF)]
            hash >>= 4
        }
        return String(decoding: digits, as: UTF8.self) + ".entry"
    }

    /// The URL of `key`'s file.
    func fileURL(for key: String) -> URL {
        directory.appendingPathComponent(Self.fileName(for: key))
    }

    // MARK: Reading

    /// The entry stored for `key`, whole and checked; `nil` when there is none, or when
    /// its file is damaged or cut short (then the file is removed). A hit marks the entry
    /// as just used.
    func read(_ key: String) -> CachedEntry? {
        load(key, markingUse: true)
    }

    private func load(_ key: String, markingUse: Bool) -> CachedEntry? {
        let path = prefix + Self.fileName(for: key)
        let descriptor = openFile(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { _ = closeFile(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        guard info.st_size >= EntryFormat.minimumSize, info.st_size <= Int64(Int.max) else {
            discard(path, file: info)
            return nil
        }
        let size = Int(info.st_size)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        var owned = true
        defer { if owned { buffer.deallocate() } }
        guard readFully(descriptor, into: buffer) else {
            discard(path, file: info)
            return nil
        }
        switch EntryFormat.decode(UnsafeRawBufferPointer(buffer), key: key) {
        case .damaged:
            discard(path, file: info)
            return nil
        case .otherKey:
            return nil
        case .entry(let response, let bodyRange):
            let body: Data
            if bodyRange.isEmpty {
                body = Data()
            } else if let base = buffer.baseAddress {
                // The body keeps the buffer it was read into: no copy.
                owned = false
                body = Data(
                    bytesNoCopy: base + bodyRange.lowerBound, count: bodyRange.count,
                    deallocator: .custom { _, _ in buffer.deallocate() })
            } else {
                return nil
            }
            if markingUse { _ = futimens(descriptor, nil) }
            return CachedEntry(response: response, body: body)
        }
    }

    /// Removes the damaged file at `path` if it is still the one that was read (not
    /// another process's new entry renamed into place since).
    private func discard(_ path: String, file: stat) {
        var current = stat()
        guard lstat(path, &current) == 0, current.st_ino == file.st_ino, current.st_dev == file.st_dev
        else { return }
        if unlink(path) == 0 {
            forget(bytes: Int64(file.st_size))
        }
    }

    // MARK: Writing

    /// Stores `entry` for `key`, replacing what was there: written whole to a temporary
    /// file and renamed into place (no fsync: the checksum catches a file a crash tore).
    /// Sweeps when the tier's total goes over its size limit.
    func write(_ entry: CachedEntry, for key: String) throws(DownloadError) {
        if accounting.withLockedValue({ $0.startSweepIfUncounted() }) {
            runAutomaticSweep()
        }
        let bytes = try EntryFormat.encode(entry, key: key)
        defer { bytes.deallocate() }
        let path = prefix + Self.fileName(for: key)
        let temporary = try writeTemporaryFile(UnsafeRawBufferPointer(bytes))
        var previous = stat()
        let replaced = lstat(path, &previous) == 0 && (previous.st_mode & S_IFMT) == S_IFREG
        guard renameFile(temporary, path) == 0 else {
            let code = errno
            _ = unlink(temporary)
            throw .fileSystem("rename a cache entry to", path: path, errno: code)
        }
        let added = Int64(bytes.count) - (replaced ? Int64(previous.st_size) : 0)
        let limit = sizeLimit
        let mustTrim = accounting.withLockedValue { state in
            state.bytes += added
            if !replaced { state.count += 1 }
            return state.bytes > limit && state.startSweep()
        }
        if mustTrim { runAutomaticSweep() }
    }

    /// Replaces the metadata of `key`'s entry (after a `304`), keeping its body. Does
    /// nothing when there is no entry.
    func update(_ response: CachedResponse, for key: String) throws(DownloadError) {
        guard let entry = load(key, markingUse: false) else { return }
        try write(CachedEntry(response: response, body: entry.body), for: key)
    }

    /// Writes `bytes` to a new temporary file in the directory; returns its path.
    private func writeTemporaryFile(_ bytes: UnsafeRawBufferPointer) throws(DownloadError) -> String {
        var attempt = 0
        while true {
            attempt += 1
            let path = prefix + ".tmp-\(getpid())-\(String(UInt64.random(in: 0...UInt64.max), radix: 16))"
            let descriptor = openFile(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if descriptor < 0 {
                let code = errno
                if code == EEXIST, attempt < 4 { continue }
                if code == ENOENT, attempt < 4 {
                    // The directory was removed under the tier: made again.
                    try makeDirectory(directory.path)
                    continue
                }
                throw .fileSystem("create a cache entry in", path: directory.path, errno: code)
            }
            let failure = writeFully(descriptor, bytes)
            let closed = closeFile(descriptor) == 0 ? 0 : errno
            if let code = failure ?? (closed == 0 ? nil : closed) {
                _ = unlink(path)
                throw .fileSystem("write a cache entry to", path: path, errno: code)
            }
            return path
        }
    }

    // MARK: Removing

    /// Removes `key`'s entry, if any.
    func remove(_ key: String) {
        let path = prefix + Self.fileName(for: key)
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return }
        if unlink(path) == 0 {
            forget(bytes: Int64(info.st_size))
        }
    }

    /// Removes every entry (and the temporary files crashed writers left; not those of
    /// writers still at work, nor anything else in the directory).
    func removeAll() {
        let now = currentTime()
        var left: (count: Int, bytes: Int64) = (0, 0)
        scan { directory, name, kind, info in
            guard unlinkat(directory, name, 0) != 0 else { return }
            // An entry another process renamed into place between readdir and unlink is
            // gone too; one that could not be removed is still counted.
            if kind == .entry {
                left.count += 1
                left.bytes += Int64(info.st_size)
            }
        } shouldVisit: { kind, info in
            kind == .entry || Self.isAbandoned(info, now: now)
        }
        accounting.withLockedValue { state in
            state.known = true
            state.count = left.count
            state.bytes = left.bytes
        }
    }

    // MARK: Sweeping

    /// Counts the directory's entries, removes the temporary files of crashed writers
    /// (older than ``abandonedAfter`` seconds), and when the entries take more than
    /// ``sizeLimit`` removes the least recently used until `sizeLimit × trimRatio` is
    /// left. When it returns the entries take at most ``sizeLimit`` (unless other
    /// processes wrote meanwhile).
    @discardableResult
    func sweep() -> SweepReport {
        let now = currentTime()
        var entries: [(name: String, size: Int64, used: Int64, inode: ino_t)] = []
        var bytes: Int64 = 0
        scan { directory, name, kind, info in
            switch kind {
            case .entry:
                let name = String(cString: name)
                entries.append((name, Int64(info.st_size), modificationTime(info), info.st_ino))
                bytes += Int64(info.st_size)
            case .temporary:
                _ = unlinkat(directory, name, 0)
            }
        } shouldVisit: { kind, info in
            kind == .entry || Self.isAbandoned(info, now: now)
        }
        var count = entries.count
        var removed = 0
        if bytes > sizeLimit {
            let target = Int64((Double(sizeLimit) * trimRatio).rounded(.down))
            entries.sort { $0.used != $1.used ? $0.used < $1.used : $0.name < $1.name }
            for entry in entries {
                if bytes <= target { break }
                let path = prefix + entry.name
                var info = stat()
                guard lstat(path, &info) == 0 else {
                    // Removed by someone else meanwhile.
                    bytes -= entry.size
                    count -= 1
                    continue
                }
                // Another process renamed a new entry into place since the scan: kept.
                guard info.st_ino == entry.inode else {
                    bytes += Int64(info.st_size) - entry.size
                    continue
                }
                if unlink(path) == 0 || errno == ENOENT {
                    bytes -= Int64(info.st_size)
                    count -= 1
                    removed += 1
                }
            }
        }
        accounting.withLockedValue { state in
            state.known = true
            state.bytes = bytes
            state.count = count
        }
        return SweepReport(entries: count, bytes: bytes, removed: removed)
    }

    /// The entries' bytes as last counted: exact after a ``sweep()``, then kept up to date
    /// by this tier's writes and removals (not other processes'); 0 before anything was
    /// counted. Does not block.
    var totalBytes: Int64 { accounting.withLockedValue { $0.bytes } }

    /// The entries as last counted, like ``totalBytes``.
    var count: Int { accounting.withLockedValue { $0.count } }

    /// Sweeps for a write (the first, or one that took the total over the limit), unless
    /// another write's sweep is already at work.
    private func runAutomaticSweep() {
        defer { accounting.withLockedValue { $0.sweeping = false } }
        sweep()
    }

    private func forget(bytes: Int64) {
        accounting.withLockedValue { state in
            state.bytes = max(0, state.bytes - bytes)
            state.count = max(0, state.count - 1)
        }
    }

    private static func isAbandoned(_ info: stat, now: Int64) -> Bool {
        modificationTime(info) < now - abandonedAfter * 1_000_000_000
    }

    /// The kinds of file a tier makes; anything else in its directory is left alone.
    private enum FileKind {
        case entry
        case temporary
    }

    /// Calls `visit` for each regular file of the directory that is an entry or a
    /// temporary file and passes `shouldVisit` (with its name, a descriptor of the
    /// directory and its status).
    private func scan(
        _ visit: (Int32, UnsafePointer<CChar>, FileKind, stat) -> Void,
        shouldVisit: (FileKind, stat) -> Bool
    ) {
        guard let stream = opendir(prefix) else { return }
        defer { closedir(stream) }
        let directory = dirfd(stream)
        while let item = readdir(stream) {
            withUnsafePointer(to: &item.pointee.d_name) { tuple in
                let length = MemoryLayout.size(ofValue: item.pointee.d_name)
                tuple.withMemoryRebound(to: CChar.self, capacity: length) { name in
                    guard let kind = Self.kind(of: name) else { return }
                    var info = stat()
                    guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0,
                        (info.st_mode & S_IFMT) == S_IFREG, shouldVisit(kind, info)
                    else { return }
                    visit(directory, name, kind, info)
                }
            }
        }
    }

    /// Whether `name` is an entry's (16 lowercase hex digits and `.entry`) or a temporary
    /// file's (`.tmp-` and more).
    private static func kind(of name: UnsafePointer<CChar>) -> FileKind? {
        let length = strlen(name)
        let bytes = UnsafeRawPointer(name).assumingMemoryBound(to: UInt8.self)
        if length > 5, memcmp(name, ".tmp-", 5) == 0 { return .temporary }
        guard length == 22, memcmp(name + 16, ".entry", 6) == 0 else { return nil }
        for position in 0..<16 {
            let byte = bytes[position]
            guard (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) else { return nil }
        }
        return .entry
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// The running count of the entries' files.
    private struct Accounting {
        var bytes: Int64 = 0
        var count = 0
        /// Whether a sweep has counted the directory yet.
        var known = false
        /// Whether a write's sweep is at work.
        var sweeping = false

        /// Claims the sweep that first counts the directory, when none has.
        mutating func startSweepIfUncounted() -> Bool {
            known ? false : startSweep()
        }

        /// Claims a write's sweep, unless one is at work.
        mutating func startSweep() -> Bool {
            if sweeping { return false }
            sweeping = true
            return true
        }
    }
}

/// The layout of an entry's file (see ``DiskTier``).
enum EntryFormat {
    /// Magic and version: `HAULC2` and two zero bytes (the metadata in binary, see
    /// ``Metadata``).
    static let magic: UInt64 = 0x0000_3243_4C55_4148
    /// Version 1: `HAULC1`, the metadata in JSON. Read, no longer written.
    static let magicVersion1: UInt64 = 0x0000_3143_4C55_4148
    static let headerSize = 24
    static let trailerSize = 8
    static let minimumSize = Int64(headerSize + trailerSize)

    /// What a file's bytes hold.
    enum Decoded {
        case entry(CachedResponse, body: Range<Int>)
        /// A whole entry, of another key.
        case otherKey
        /// Wrong magic or version, lengths that disagree with the size, a wrong checksum,
        /// or metadata that does not decode.
        case damaged
    }

    /// The bytes of `entry`'s file (to be deallocated by the caller).
    static func encode(_ entry: CachedEntry, key: String) throws(DownloadError) -> UnsafeMutableRawBufferPointer {
        let metadata = Metadata.encode(entry.response)
        guard metadata.count <= Int(UInt32.max) else {
            throw DownloadError.fileSystem("encode a cache entry for", path: key, errno: EINVAL)
        }
        var key = key
        let keyLength = key.utf8.count
        let size = headerSize + keyLength + metadata.count + entry.body.count + trailerSize
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        bytes.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt64.self)
        bytes.storeBytes(of: UInt32(keyLength).littleEndian, toByteOffset: 8, as: UInt32.self)
        bytes.storeBytes(of: UInt32(metadata.count).littleEndian, toByteOffset: 12, as: UInt32.self)
        bytes.storeBytes(of: UInt64(entry.body.count).littleEndian, toByteOffset: 16, as: UInt64.self)
        var offset = headerSize
        key.withUTF8 { utf8 in
            UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + keyLength])
                .copyMemory(from: UnsafeRawBufferPointer(utf8))
        }
        offset += keyLength
        metadata.withUnsafeBytes { source in
            UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + source.count]).copyMemory(from: source)
        }
        offset += metadata.count
        entry.body.withUnsafeBytes { source in
            UnsafeMutableRawBufferPointer(rebasing: bytes[offset..<offset + source.count]).copyMemory(from: source)
        }
        offset += entry.body.count
        let checksum = XXH64.hash(UnsafeRawBufferPointer(rebasing: bytes[0..<offset]))
        bytes.storeBytes(of: checksum.littleEndian, toByteOffset: offset, as: UInt64.self)
        return bytes
    }

    /// Checks and decodes a file's bytes, read for `key`.
    static func decode(_ bytes: UnsafeRawBufferPointer, key: String) -> Decoded {
        guard bytes.count >= headerSize + trailerSize else { return .damaged }
        let version = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
        guard version == magic || version == magicVersion1 else { return .damaged }
        let keyLength = UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self)))
        let metadataLength = UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt32.self)))
        let bodyLength = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
        // The key's and the metadata's lengths are below 2^32: no overflow before the body's.
        let fixed = UInt64(headerSize + trailerSize) + keyLength + metadataLength
        guard bodyLength <= UInt64(bytes.count), fixed + bodyLength == UInt64(bytes.count) else { return .damaged }
        let checked = bytes.count - trailerSize
        let checksum = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: checked, as: UInt64.self))
        guard XXH64.hash(UnsafeRawBufferPointer(rebasing: bytes[0..<checked])) == checksum else { return .damaged }
        let keyStart = headerSize
        let metadataStart = keyStart + Int(keyLength)
        let bodyStart = metadataStart + Int(metadataLength)
        var key = key
        let sameKey = key.withUTF8 { utf8 in
            UnsafeRawBufferPointer(utf8).elementsEqual(UnsafeRawBufferPointer(rebasing: bytes[keyStart..<metadataStart]))
        }
        guard sameKey else { return .otherKey }
        let metadata = UnsafeRawBufferPointer(rebasing: bytes[metadataStart..<bodyStart])
        let response: CachedResponse?
        if version == magic {
            response = Metadata.decode(metadata)
        } else {
            response = try? JSONDecoder().decode(CachedResponse.self, from: Data(metadata))
        }
        guard let response else { return .damaged }
        return .entry(response, body: bodyStart..<checked)
    }

    /// A ``CachedResponse`` in bytes, little-endian: its status (4), request and response
    /// times (8 each, IEEE 754), body size (8), URL, then the count (4) of its header
    /// fields and each field's name and value, then the same for its varying fields; every
    /// string as its UTF-8 length (4) and bytes.
    enum Metadata {
        static func encode(_ response: CachedResponse) -> [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(64 + response.url.utf8.count + response.headers.count * 48)
            func append<T: FixedWidthInteger>(_ value: T) {
                withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
            }
            func append(_ text: String) {
                append(UInt32(truncatingIfNeeded: text.utf8.count))
                bytes.append(contentsOf: text.utf8)
            }
            func append(_ fields: [HeaderField]) {
                append(UInt32(truncatingIfNeeded: fields.count))
                for field in fields {
                    append(field.name)
                    append(field.value)
                }
            }
            append(UInt32(truncatingIfNeeded: response.status))
            append(response.requestTime.bitPattern)
            append(response.responseTime.bitPattern)
            append(UInt64(truncatingIfNeeded: response.bodySize))
            append(response.url)
            append(response.headers)
            append(response.varying)
            return bytes
        }

        /// The response in `bytes`; `nil` when they do not hold exactly one.
        static func decode(_ bytes: UnsafeRawBufferPointer) -> CachedResponse? {
            var reader = Reader(bytes: bytes)
            guard let status = reader.integer(UInt32.self), let requestTime = reader.integer(UInt64.self),
                let responseTime = reader.integer(UInt64.self), let bodySize = reader.integer(UInt64.self),
                bodySize <= UInt64(Int.max), let url = reader.string(), let headers = reader.fields(),
                let varying = reader.fields(), reader.offset == bytes.count
            else { return nil }
            return CachedResponse(
                url: url, status: Int(status), headers: headers, varying: varying,
                requestTime: Double(bitPattern: requestTime), responseTime: Double(bitPattern: responseTime),
                bodySize: Int(bodySize))
        }

        /// Reads values from the front of a buffer; each read is `nil` past its end.
        private struct Reader {
            let bytes: UnsafeRawBufferPointer
            var offset = 0

            mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
                guard bytes.count - offset >= MemoryLayout<T>.size else { return nil }
                defer { offset += MemoryLayout<T>.size }
                return T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
            }

            mutating func string() -> String? {
                guard let length = integer(UInt32.self).map(Int.init), bytes.count - offset >= length else { return nil }
                defer { offset += length }
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]), as: UTF8.self)
            }

            mutating func fields() -> [HeaderField]? {
                // Each field takes at least 8 bytes: a count beyond what is left is damage.
                guard let count = integer(UInt32.self).map(Int.init), count <= (bytes.count - offset) / 8 else {
                    return nil
                }
                var fields: [HeaderField] = []
                fields.reserveCapacity(count)
                for _ in 0..<count {
                    guard let name = string(), let value = string() else { return nil }
                    fields.append(HeaderField(name, value))
                }
                return fields
            }
        }
    }
}

// The system calls, outside the tier so that its methods (`read`, `write`, `remove`)
// do not hide them.

private func openFile(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
    while true {
        let descriptor = open(path, flags, mode)
        if descriptor >= 0 || errno != EINTR { return descriptor }
    }
}

private func closeFile(_ descriptor: Int32) -> Int32 {
    close(descriptor)
}

private func renameFile(_ from: String, _ to: String) -> Int32 {
    rename(from, to)
}

/// Reads exactly `buffer.count` bytes; false on an error or an early end.
private func readFully(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Bool {
    guard let base = buffer.baseAddress else { return true }
    var done = 0
    while done < buffer.count {
        let count = read(descriptor, base + done, buffer.count - done)
        if count > 0 {
            done += count
        } else if count == 0 || errno != EINTR {
            return false
        }
    }
    return true
}

/// Creates `path` as an owner-only directory (its parents as usual) unless it exists.
private func makeDirectory(_ path: String) throws(DownloadError) {
    if mkdir(path, 0o700) == 0 { return }
    var code = errno
    if code == ENOENT {
        let parent = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
        if mkdir(path, 0o700) == 0 { return }
        code = errno
    }
    var info = stat()
    if code == EEXIST {
        guard stat(path, &info) == 0 else { throw .fileSystem("create the cache directory", path: path, errno: errno) }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .fileSystem("create the cache directory", path: path, errno: ENOTDIR)
        }
        return
    }
    throw .fileSystem("create the cache directory", path: path, errno: code)
}

/// A file's modification time, in nanoseconds since 1970.
private func modificationTime(_ info: stat) -> Int64 {
    #if canImport(Darwin)
        let time = info.st_mtimespec
    #else
        let time = info.st_mtim
    #endif
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}

/// The wall clock, in nanoseconds since 1970.
private func currentTime() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}
