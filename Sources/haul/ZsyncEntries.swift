import ArgumentParser
import Foundation
import Haul

/// `haul get URL.zsync` and `--zsync URL`: the target of a zsync control file, as an input
/// entry built from local seeds and what is missing from them (see ``DeltaSource``).
enum ZsyncEntries {
    /// Whether a command-line argument's URL is a control file's (its path ends in
    /// `.zsync`).
    static func isControlFile(_ url: URL) -> Bool {
        return url.path.lowercased().hasSuffix(".zsync")
    }

    /// Fetches the control file at `url` into memory with the command's network settings and
    /// headers (credentials to its origin only); returns it and its address after redirects
    /// (relative `URL`s are resolved against it).
    static func fetch(
        _ url: URL, configuration: DownloadManager.Configuration, headers: [(name: String, value: String)],
        secretHeaders: [(name: String, value: String)]
    ) async throws -> (Data, URL) {
        let result = try await MemoryFetch.fetch(
            url, limit: DeltaSource.controlFileLimit, configuration: configuration, headers: headers, secretHeaders: secretHeaders)
        return (result.data ?? Data(), result.finalURL)
    }

    /// The entry for the control file `data` fetched from `url`, whose target is built from
    /// `seeds` (and the destination's old file). It is named by the control file's
    /// `Filename` where that is a plain file name, else by its URL's last component.
    static func entry(of data: Data, at url: URL, seeds: [URL]) throws -> InputEntry {
        var delta: DeltaSource
        do throws(DownloadError) {
            delta = try DeltaSource(controlFile: data, at: url)
        } catch {
            throw ValidationError(error.message)
        }
        delta.seeds = seeds
        let urls = delta.targetURLs
        var entry = InputEntry(url: urls[0], name: delta.suggestedFileName)
        entry.mirrors = Array(urls.dropFirst())
        entry.checksum = delta.checksum
        entry.expectedSize = delta.length
        entry.delta = delta
        return entry
    }
}
