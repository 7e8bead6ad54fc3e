import Foundation

/// What is kept beside a partial file so a later run can resume it: the URL it came
/// from, the validator, and the full size. Written before the first body byte.
struct PartialMetadata: Codable, Hashable, Sendable {
    var url: String
    var validator: Validator?
    var totalBytes: Int64?

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
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data) else {
            throw .fileSystem("write", path: temporary, errno: errno)
        }
        guard rename(temporary, path) == 0 else {
            throw .fileSystem("rename", path: temporary, errno: errno)
        }
    }
}
