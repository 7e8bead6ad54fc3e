#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CHaulShims
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// A partial file. Every method blocks, so callers run them on the I/O thread pool,
/// never on an event loop.
///
/// A file known not to exist yet is opened (and created) only by the first call that
/// needs it, so a small download whose body is kept in memory touches the disk once, when
/// it is committed; until then ``length()`` is 0 and ``sync()`` does nothing.
package final class PartialFile: Sendable {
    let path: String
    /// Whether the file did not exist when this object was made (see
    /// ``init(creatingOnDemand:)``).
    let createdOnDemand: Bool
    /// The descriptor, once opened.
    private let opened: NIOLockedValueBox<Int32?>

    /// Opens (creating if needed) the partial file at `path` for reading and writing.
    init(path: String) throws(DownloadError) {
        self.path = path
        createdOnDemand = false
        opened = NIOLockedValueBox(try Self.openFile(path))
    }

    /// A partial file at `path` that does not exist yet; it is created when first needed.
    init(creatingOnDemand path: String) {
        self.path = path
        createdOnDemand = true
        opened = NIOLockedValueBox(nil)
    }

    private static func openFile(_ path: String) throws(DownloadError) -> Int32 {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw .fileSystem("open", path: path, errno: errno) }
        return fd
    }

    /// The descriptor, opening the file if it is not open yet.
    private func openedDescriptor() throws(DownloadError) -> Int32 {
        let result: Result<Int32, DownloadError> = opened.withLockedValue { fd in
            if let fd { return .success(fd) }
            do throws(DownloadError) {
                let new = try Self.openFile(path)
                fd = new
                return .success(new)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Whether the file is open (and so exists): `false` for a file created on demand that
    /// nothing has needed yet.
    var isOpen: Bool { openDescriptor != nil }

    /// The descriptor if the file is open; `nil` for a file not created yet.
    private var openDescriptor: Int32? { opened.withLockedValue { $0 } }

    /// The file's current length.
    func length() throws(DownloadError) -> Int64 {
        guard let descriptor = openDescriptor else { return 0 }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .fileSystem("stat", path: path, errno: errno) }
        return Int64(info.st_size)
    }

    /// Cuts the file to `length` bytes.
    func truncate(to length: Int64) throws(DownloadError) {
        if openDescriptor == nil, length == 0 { return }
        guard ftruncate(try openedDescriptor(), off_t(length)) == 0 else {
            throw .fileSystem("truncate", path: path, errno: errno)
        }
    }

    /// Writes all of `buffer` at `offset`.
    func write(_ buffer: ByteBuffer, at offset: Int64) throws(DownloadError) {
        let descriptor = try openedDescriptor()
        let failure: Int32? = buffer.withUnsafeReadableBytes { bytes in
            var written = 0
            while written < bytes.count {
                let result = pwrite(
                    descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
                if result < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                written += result
            }
            return nil
        }
        if let failure { throw .fileSystem("write", path: path, errno: failure) }
    }

    /// Reads `range` of the file into one buffer (a part of an object's upload).
    func read(_ range: Range<Int64>) throws(DownloadError) -> ByteBuffer {
        let descriptor = try openedDescriptor()
        let count = Int(range.count)
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        var failure: Int32?
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
            var done = 0
            while done < count {
                let result = pread(
                    descriptor, pointer.baseAddress! + done, count - done, off_t(range.lowerBound + Int64(done)))
                if result < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    break
                }
                if result == 0 { break }
                done += result
            }
            return done
        }
        if let failure { throw .fileSystem("read", path: path, errno: failure) }
        guard buffer.readableBytes == count else {
            throw DownloadError(.fileSystem, "cannot read \(path): it ends before byte \(range.upperBound)")
        }
        return buffer
    }

    /// Feeds `length` bytes of the file from `start` (the first `length` by default) to `digest`.
    func digest(into digest: ContentDigest, from start: Int64 = 0, length: Int64) throws(DownloadError) {
        guard let descriptor = openDescriptor else { return }
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = start
        let length = start + length
        while offset < length {
            let wanted = Int(min(Int64(chunk), length - offset))
            let result = pread(descriptor, buffer.baseAddress!, wanted, off_t(offset))
            if result < 0 {
                if errno == EINTR { continue }
                throw .fileSystem("read", path: path, errno: errno)
            }
            if result == 0 { break }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<result]))
            offset += Int64(result)
        }
    }

    /// Reserves disk space for the file to grow to `total` bytes without changing its
    /// length, so a full disk shows at the start of a transfer rather than at 99%.
    /// Where the platform cannot reserve space this does nothing.
    func reserve(upTo total: Int64) throws(DownloadError) {
        let current = try length()
        guard total > current else { return }
        let descriptor = try openedDescriptor()
        #if os(Linux)
        if chaul_is_memory_backed(descriptor) == 1 {
            // On tmpfs, reserving means allocating and zeroing every page up front (0.27 s
            // per GiB here, before the first byte is written), pages the download then
            // overwrites anyway. Checking the free space gives the early "disk full" for
            // a fraction of that.
            var info = statvfs()
            if fstatvfs(descriptor, &info) == 0,
                Int64(info.f_bavail) * Int64(info.f_frsize) < total - current
            {
                throw .fileSystem("reserve space for", path: path, errno: ENOSPC)
            }
            return
        }
        if chaul_reserve_keep_size(descriptor, off_t(current), off_t(total - current)) != 0 {
            let code = errno
            // File systems without fallocate simply don't reserve.
            if code == EOPNOTSUPP || code == ENOSYS || code == EINVAL { return }
            throw .fileSystem("reserve space for", path: path, errno: code)
        }
        #elseif canImport(Darwin)
        var store = fstore_t(
            fst_flags: UInt32(F_ALLOCATEALL), fst_posmode: F_PEOFPOSMODE, fst_offset: 0,
            fst_length: off_t(total - current), fst_bytesalloc: 0)
        if fcntl(descriptor, F_PREALLOCATE, &store) == -1, errno == ENOSPC {
            throw .fileSystem("reserve space for", path: path, errno: ENOSPC)
        }
        #endif
    }

    /// Flushes the file's data to stable storage.
    func sync() throws(DownloadError) {
        guard let descriptor = openDescriptor else { return }
        guard durableSync(descriptor) == 0 else { throw .fileSystem("sync", path: path, errno: errno) }
    }

    /// Closes the descriptor. Call exactly once, after every write has finished.
    func close() {
        opened.withLockedValue { fd in
            if let descriptor = fd { _ = closeDescriptor(descriptor) }
            fd = nil
        }
    }

    /// Makes the file the download's `size` bytes, durably: writes `body` (a body kept in
    /// memory) at its start, cuts whatever lies beyond `size` (a longer partial from an
    /// earlier run), and syncs it. A file created on demand with its whole body in memory
    /// has nothing beyond: it is not cut.
    func makeDurable(size: Int64, writing body: ByteBuffer?) throws(DownloadError) {
        if let body { try write(body, at: 0) }
        if body == nil || !createdOnDemand { try truncate(to: size) }
        try sync()
    }

    /// The open file's size and modification time, which its rename keeps: what
    /// ``CompletedFile`` records, without looking the path up again.
    /// (An empty body's file, created on demand, is created here.)
    func attributes() -> (size: Int64, modified: Int64)? {
        guard let descriptor = try? openedDescriptor() else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return CompletedFile.attributes(info)
    }

    /// Renames the partial to `destination` atomically, then syncs the directory (through
    /// `directories`, which groups the syncs of many renames) so the rename itself survives
    /// a crash.
    func commit(to destination: URL, syncing directories: DirectorySync) throws(DownloadError) {
        // An empty body still makes a file.
        _ = try openedDescriptor()
        let target = destination.path
        guard rename(path, target) == 0 else {
            let code = errno
            if code == EISDIR {
                throw DownloadError(.fileSystem, "cannot replace \(target): it is a directory")
            }
            throw .fileSystem("rename to \(target)", path: path, errno: code)
        }
        directories.sync(directoryOf: target)
    }

    /// Removes a partial file and its metadata, ignoring files that are already gone.
    ///
    /// The one place partial files are deleted: by the manager (a cancellation, a download
    /// cancelled directly in a store, an orphan `haul clean` finds), the transfer (a response
    /// that rejects what the partial holds) and the journal's control handle, never by a
    /// ``JobStore``.
    static func remove(_ paths: PartialPaths) {
        remove(partialAt: paths.partial)
    }

    /// ``remove(_:)`` for the partial file at `partialPath` (a journal row's `partialPath`).
    package static func remove(partialAt partialPath: String) {
        let base = String(partialPath.dropLast(PartialPaths.partialSuffix.count))
        _ = unlink(partialPath)
        _ = unlink(base + PartialPaths.metadataSuffix)
        _ = unlink(base + PartialPaths.metadataSuffix + ".tmp")
        _ = unlink(base + PartialPaths.seedSuffix)
        // A stream's staged resources (a directory only stream downloads make).
        let staging = base + PartialPaths.streamSuffix
        if access(staging, F_OK) == 0 { try? FileManager.default.removeItem(atPath: staging) }
    }

    /// Removes the partial files in `directories` that none of `live` (partial paths of
    /// unfinished jobs) is; returns how many it removed.
    package static func removeOrphans(in directories: Set<String>, keeping live: Set<String>) -> Int {
        var removed = 0
        for directory in directories {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            for name in names where name.hasSuffix(PartialPaths.partialSuffix) {
                let path = (directory as NSString).appendingPathComponent(name)
                guard !live.contains(path) else { continue }
                remove(partialAt: path)
                removed += 1
            }
        }
        return removed
    }
}

private func closeDescriptor(_ fd: Int32) -> Int32 {
    #if canImport(Darwin)
    Darwin.close(fd)
    #elseif canImport(Musl)
    Musl.close(fd)
    #else
    Glibc.close(fd)
    #endif
}
