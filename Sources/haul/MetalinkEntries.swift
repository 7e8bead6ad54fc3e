import ArgumentParser
import Foundation
import Haul

/// `haul get FILE.meta4` and `--metalink URL`: the files a Metalink 4 document names, as
/// input entries (each with its mirrors, size, digest and piece digests).
enum MetalinkEntries {
    /// Whether a command-line argument names a local Metalink file rather than a URL.
    static func isMetalinkFile(_ argument: String) -> Bool {
        let lowered = argument.lowercased()
        guard !lowered.hasPrefix("http://"), !lowered.hasPrefix("https://") else { return false }
        return lowered.hasSuffix(".meta4") || lowered.hasSuffix(".metalink")
    }

    /// The entries of the Metalink document `data`, mirrors at `location` first; `source`
    /// names it in errors.
    static func entries(of data: Data, source: String, location: String?) throws -> [InputEntry] {
        let metalink: Metalink
        do throws(DownloadError) {
            metalink = try Metalink.parse(data)
        } catch {
            throw ValidationError("\(source): \(error.message)")
        }
        return try metalink.files.map { file in
            let urls = file.preferredSources(location: location).map(\.url)
            var entry = InputEntry(url: urls[0], name: file.name)
            entry.mirrors = Array(urls.dropFirst())
            entry.checksum = file.strongestHash
            entry.expectedSize = file.size
            if let pieces = file.pieces {
                do throws(DownloadError) {
                    entry.pieces = try PieceChecksums(pieces.algorithm, length: pieces.length, hashes: pieces.hashes)
                } catch {
                    throw ValidationError("\(source): \(file.name): \(error.message)")
                }
            }
            return entry
        }
    }

    /// The entries of a local Metalink file.
    static func entries(ofFile path: String, location: String?) throws -> [InputEntry] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("\(path): cannot read this Metalink file.")
        }
        return try entries(of: data, source: path, location: location)
    }

    /// Fetches the Metalink document at `url` (into memory, at most 16 MiB) with the
    /// command's network settings.
    static func fetch(_ url: URL, configuration: DownloadManager.Configuration) async throws -> Data {
        try await MemoryFetch.fetch(url, limit: 16 << 20, configuration: configuration).data ?? Data()
    }
}
