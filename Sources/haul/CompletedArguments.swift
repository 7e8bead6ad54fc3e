import Foundation
import Haul

/// The files that downloads of `haul get`'s URL arguments completed in its directory, read
/// back to see whether one is a document to follow (a zsync control file, an HLS playlist)
/// although its URL did not say so.
enum CompletedArguments {
    /// For each of `urls` whose download into `directory` completed (the row the URL names,
    /// or one of those it names to other places), what `reading` makes of its file (`nil`:
    /// nothing to follow), with the address it came from after redirects and the argument
    /// it was. Runs on the process's I/O threads.
    static func files(
        among urls: [URL], in directory: URL, journal: Journal, reading: @escaping @Sendable (String) -> Data?
    ) async -> [(data: Data, url: URL, argument: URL)] {
        let wanted = directory.resolvingSymlinksInPath().standardizedFileURL.path
        return (try? await ProcessResources.threadPool.perform { () throws(DownloadError) -> [(data: Data, url: URL, argument: URL)] in
            var found: [(data: Data, url: URL, argument: URL)] = []
            for url in urls {
                guard let named = try? journal.jobs(named: url.absoluteString) else { continue }
                for id in [named.id] + named.others {
                    guard let record = try? journal.record(id), record.state == .completed,
                        record.destinationKind != "object", let path = record.filePath,
                        URL(fileURLWithPath: path).deletingLastPathComponent().resolvingSymlinksInPath()
                            .standardizedFileURL.path == wanted,
                        let data = reading(path)
                    else { continue }
                    found.append((data, record.finalURL.flatMap(URL.init(string:)) ?? url, url))
                    break
                }
            }
            return found
        }) ?? []
    }
}
