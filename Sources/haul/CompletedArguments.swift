import Foundation
import Haul

/// The files that downloads of `haul get`'s URL arguments completed in its directory, read
/// back to see whether one is a document to follow although its URL did not say so: an
/// HLS playlist (its stream is downloaded next) or a zsync control file (its target is).
/// The files stay where they were saved.
enum CompletedArguments {
    /// A document found among the completed files.
    enum Document: Equatable {
        /// An HLS playlist: a file that starts with `#EXTM3U`. Its stream is downloaded from
        /// the URL as given (the stream's download asks for the playlist again, so that
        /// credentials still go to the argument's origin only).
        case playlist
        /// A zsync control file, whole: a file whose first line is `zsync: VERSION` and
        /// that is no larger than a control file may be, as aria2 follows a Metalink file it
        /// was given. Its `URL`s are resolved against the address it came from.
        case controlFile(Data)
    }

    /// For each of `urls` whose download into `directory` completed (the row the URL names,
    /// or one of those it names to other places) with a document to follow, the document,
    /// with the address it came from after redirects and the argument it was. One hop to
    /// the process's I/O threads; each file's first bytes are read once.
    static func documents(
        among urls: [URL], in directory: URL, journal: Journal
    ) async -> [(document: Document, url: URL, argument: URL)] {
        let wanted = directory.resolvingSymlinksInPath().standardizedFileURL.path
        return (try? await ProcessResources.threadPool.perform {
            () throws(DownloadError) -> [(document: Document, url: URL, argument: URL)] in
            var found: [(document: Document, url: URL, argument: URL)] = []
            for url in urls {
                guard let named = try? journal.jobs(named: url.absoluteString) else { continue }
                for id in [named.id] + named.others {
                    guard let record = try? journal.record(id), record.state == .completed,
                        record.destinationKind != "object", let path = record.filePath,
                        URL(fileURLWithPath: path).deletingLastPathComponent().resolvingSymlinksInPath()
                            .standardizedFileURL.path == wanted,
                        let document = document(at: path)
                    else { continue }
                    found.append((document, record.finalURL.flatMap(URL.init(string:)) ?? url, url))
                    break
                }
            }
            return found
        }) ?? []
    }

    /// The document the file at `path` is, if any, after reading its first bytes (and the
    /// rest of a control file, up to the limit of one). Blocking.
    static func document(at path: String) -> Document? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        let length = max(DeltaSource.magicLength, HLSDownloader.magicLength)
        guard let head = try? handle.read(upToCount: length) else { return nil }
        if HLSDownloader.looksLikePlaylist(head) { return .playlist }
        guard head.count >= DeltaSource.magicLength, DeltaSource.looksLikeControlFile(head),
            let rest = try? handle.read(upToCount: DeltaSource.controlFileLimit - head.count + 1),
            head.count + rest.count <= DeltaSource.controlFileLimit
        else { return nil }
        return .controlFile(head + rest)
    }
}
