import Foundation

/// What is kept beside a partial file so a later run can resume it: the URL it came
/// from, the validator, and the full size. Written before the first body byte.
///
/// The sidecar is a JSON document and a newline, replaced atomically (temporary file, then
/// rename) by ``save(to:)``. A segmented download may add a *progress record* after it, at
/// the first 4 KiB boundary past the document: a second JSON line with ``unsyncedRemaining``
/// and ``bootID``, rewritten in place by ``saveProgress(to:documentLength:)`` with one
/// `pwrite` (microseconds, where a rename costs a new inode and the old one's blocks). The
/// record fits in one page, so a killed process leaves either the old record or the new one;
/// a power cut may tear it, but it is trusted only within the boot that wrote it.
struct PartialMetadata: Codable, Hashable, Sendable {
    var url: String
    var validator: Validator?
    var totalBytes: Int64?
    /// For a segmented download, the byte ranges `[start, end)` not yet in the file (the
    /// file has holes, so its length says nothing); `nil` for a sequential one.
    var remaining: [[Int64]]?
    /// For a segmented download, the URL the segments come from (after redirects).
    var location: String?
    /// For a segmented download, the ranges missing according to what was written, synced
    /// or not, saved as batches are written (see the progress record above): trusted only
    /// in the boot that wrote them (a killed
    /// process loses nothing the kernel has; a power cut may), so ``remaining`` is used
    /// after a reboot.
    var unsyncedRemaining: [[Int64]]?
    /// The machine boot during which ``unsyncedRemaining`` was saved.
    var bootID: String?
    /// For a download with piece checksums, the pieces checked, as
    /// ``PieceLedger/bitfield``; saved with ``remaining`` after an fsync.
    var verifiedPieces: String?
    /// For a download with mirrors, what was learned of its sources (see ``SourceSet``):
    /// a resumed download does not ask again a source dropped before.
    var sources: [SourceSet.Health]?
    /// For a segmented download, the first response's `Content-Disposition`: a resumed
    /// download sends no such request first, and is named (or keyed, for an object) as the
    /// fresh one would have been.
    var contentDisposition: String?

    /// Whether the partial came from `requested`: the same URL, or, for signed URLs, the
    /// same object under another signature (the same scheme, host, port and path: a fresh
    /// URL given for an expired one). Its validator still has to match for it to resume.
    func isFrom(_ requested: URL) -> Bool {
        if url == requested.absoluteString { return true }
        guard let recorded = URL(string: url),
            SignedURLExpiry.isSigned(recorded) || SignedURLExpiry.expiry(of: recorded) != nil,
            SignedURLExpiry.isSigned(requested) || SignedURLExpiry.expiry(of: requested) != nil
        else { return false }
        return recorded.scheme?.lowercased() == requested.scheme?.lowercased()
            && recorded.host?.lowercased() == requested.host?.lowercased() && recorded.port == requested.port
            && recorded.path == requested.path
    }

    /// The progress record: what a segmented download had written, synced or not.
    private struct Progress: Codable {
        var unsyncedRemaining: [[Int64]]?
        var bootID: String?
    }

    /// `value` as a JSON object, with each list of `ranges` (those not `nil`) as one more
    /// member. The lists are written here, digit by digit: Foundation's encoder spends
    /// about 2 µs an element, and a delta download's record holds tens of thousands of
    /// ranges, saved ten times a second (60 ms a save for 16,000 ranges; here, under 1).
    private static func encode<Value: Encodable>(
        _ value: Value, ranges: [(key: String, ranges: [[Int64]]?)]
    ) throws(DownloadError) -> Data {
        var data: Data
        do { data = try JSONEncoder().encode(value) } catch {
            throw DownloadError(.fileSystem, "cannot encode resume metadata: \(error)")
        }
        guard data.last == UInt8(ascii: "}") else {
            throw DownloadError(.fileSystem, "cannot encode resume metadata: not a JSON object")
        }
        data.removeLast()
        var text: [UInt8] = []
        for (key, list) in ranges {
            guard let list else { continue }
            text.reserveCapacity(text.count + key.utf8.count + 4 + list.count * 24)
            if data.count > 1 || !text.isEmpty { text.append(UInt8(ascii: ",")) }
            text.append(UInt8(ascii: "\""))
            text.append(contentsOf: key.utf8)
            text.append(contentsOf: "\":[".utf8)
            for (index, range) in list.enumerated() {
                if index > 0 { text.append(UInt8(ascii: ",")) }
                text.append(UInt8(ascii: "["))
                for (position, bound) in range.enumerated() {
                    if position > 0 { text.append(UInt8(ascii: ",")) }
                    text += String(bound).utf8
                }
                text.append(UInt8(ascii: "]"))
            }
            text.append(UInt8(ascii: "]"))
        }
        text.append(UInt8(ascii: "}"))
        data.append(contentsOf: text)
        return data
    }

    /// Where the progress record starts in a sidecar whose document (with its newline) is
    /// `documentLength` bytes.
    static func progressOffset(documentLength: Int) -> Int {
        (documentLength + progressRecordLimit - 1) / progressRecordLimit * progressRecordLimit
    }

    /// The largest progress record: one page, written with one `pwrite` at a page boundary.
    static let progressRecordLimit = 4096

    /// The ranges to fetch when resuming in the boot `currentBoot`.
    func ranges(currentBoot: String?) -> [(Int64, Int64)]? {
        let chosen: [[Int64]]?
        if let unsyncedRemaining, let bootID, bootID == currentBoot {
            chosen = unsyncedRemaining
        } else {
            chosen = remaining
        }
        return chosen?.compactMap { $0.count == 2 && $0[0] < $0[1] ? ($0[0], $0[1]) : nil }
    }

    /// Reads the metadata at `path`, with its progress record if it has a readable one;
    /// `nil` when absent or unreadable.
    static func load(from path: String) -> PartialMetadata? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let newline = UInt8(ascii: "\n")
        // (A sidecar written before progress records has no newline: all of it is the document.)
        let documentEnd = data.firstIndex(of: newline) ?? data.endIndex
        guard var metadata = try? JSONDecoder().decode(PartialMetadata.self, from: data[data.startIndex..<documentEnd])
        else { return nil }
        let recordStart = data.startIndex + progressOffset(documentLength: documentEnd - data.startIndex + 1)
        if recordStart < data.endIndex {
            let recordEnd = data[recordStart...].firstIndex(of: newline) ?? data.endIndex
            if let progress = try? JSONDecoder().decode(Progress.self, from: data[recordStart..<recordEnd]),
                let unsyncedRemaining = progress.unsyncedRemaining
            {
                metadata.unsyncedRemaining = unsyncedRemaining
                metadata.bootID = progress.bootID
            }
        }
        return metadata
    }

    /// Writes the metadata atomically (temporary file, then rename), without a progress
    /// record. Returns the document's length, newline included.
    @discardableResult
    func save(to path: String) throws(DownloadError) -> Int {
        var document = self
        document.remaining = nil
        document.unsyncedRemaining = nil
        var data = try Self.encode(document, ranges: [("remaining", remaining), ("unsyncedRemaining", unsyncedRemaining)])
        data.append(UInt8(ascii: "\n"))
        // Plain POSIX calls: Foundation's createFile writes through a temporary file of its
        // own, which a killed process would leave behind.
        let temporary = path + ".tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("write", path: temporary, errno: errno) }
        let written = data.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
        guard written == data.count else { throw .fileSystem("write", path: temporary, errno: errno) }
        guard rename(temporary, path) == 0 else {
            throw .fileSystem("rename", path: temporary, errno: errno)
        }
        return data.count
    }

    /// Rewrites the progress record (``unsyncedRemaining`` and ``bootID``) of the sidecar at
    /// `path`, whose document ``save(to:)`` wrote with `documentLength` bytes, in place.
    /// Returns `false`, writing nothing, when the record would not fit in one page or the
    /// sidecar is gone: then ``save(to:)`` is the way.
    func saveProgress(to path: String, documentLength: Int) throws(DownloadError) -> Bool {
        var data = try Self.encode(
            Progress(unsyncedRemaining: nil, bootID: bootID), ranges: [("unsyncedRemaining", unsyncedRemaining ?? [])])
        data.append(UInt8(ascii: "\n"))
        guard data.count <= Self.progressRecordLimit else { return false }
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return false }
            throw .fileSystem("open", path: path, errno: errno)
        }
        let offset = off_t(Self.progressOffset(documentLength: documentLength))
        let written = data.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, offset) }
        let code = errno
        close(descriptor)
        guard written == data.count else { throw .fileSystem("write", path: path, errno: code) }
        return true
    }
}
