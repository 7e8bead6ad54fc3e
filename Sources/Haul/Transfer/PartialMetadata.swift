import Foundation

/// What is kept beside a partial file so a later run can resume it: the URL it came
/// from, the validator, and the full size. Written before the first body byte.
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
    /// or not, saved every 100 ms: trusted only in the boot that wrote them (a killed
    /// process loses nothing the kernel has; a power cut may), so ``remaining`` is used
    /// after a reboot.
    var unsyncedRemaining: [[Int64]]?
    /// The machine boot during which ``unsyncedRemaining`` was saved.
    var bootID: String?

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

    /// Reads the metadata at `path`; `nil` when absent or unreadable.
    static func load(from path: String) -> PartialMetadata? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return try? JSONDecoder().decode(PartialMetadata.self, from: data)
    }

    /// Writes the metadata atomically (temporary file, then rename).
    func save(to path: String) throws(DownloadError) {
        let data: Data
        do { data = try JSONEncoder().encode(self) } catch {
            throw DownloadError(.fileSystem, "cannot encode resume metadata: \(error)")
        }
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
    }
}
