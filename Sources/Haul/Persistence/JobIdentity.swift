/// A download is its source and its destination: which ID a request's download is kept
/// under, in a manager and in its store.
///
/// An ID the caller chose stays as given: a request with the ID of another download takes
/// that download's row over, destination included. The default ID, the URL itself, names
/// the download of that URL to the destination it was first fetched to. The same URL to
/// another destination is `URL -> DESTINATION`, so that each is a row of its own: resumed,
/// listed, paused and revalidated on its own, and the URL stays the ID of the row it
/// named before (a journal written before this rule needs no migration).
///
/// The rule is pure; the manager applies it to its active jobs and each store inside the
/// transaction that writes the row, so two processes agree.
package enum JobIdentity {
    /// The ID under which a download of `url` to `destination` is kept, given as `id`,
    /// when the download already named `id` goes to `taken` (`nil`: no download has that
    /// ID).
    package static func id(_ id: String, url: String, destination: String, taken: String?) -> String {
        guard id == url, let taken, taken != destination else { return id }
        return qualified(url: url, destination: destination)
    }

    /// The IDs of a batch of downloads, each `(id, url, destination)`, given `taken`, the
    /// destinations of the downloads already named by those IDs: each is decided by
    /// ``id(_:url:destination:taken:)`` against the rows and the downloads before it in the
    /// batch. Returns those that get another ID, by index.
    package static func ids(
        of batch: [(id: String, url: String, destination: String)], taken: [String: String]
    ) -> [(index: Int, id: String)] {
        var taken = taken
        var renamed: [(index: Int, id: String)] = []
        for (index, download) in batch.enumerated() where download.id == download.url {
            let id = id(download.id, url: download.url, destination: download.destination, taken: taken[download.id])
            if id == download.id {
                taken[id] = download.destination
            } else {
                renamed.append((index, id))
            }
        }
        return renamed
    }

    /// The ID of a download of `url` to `destination` whose URL names another download.
    package static func qualified(url: String, destination: String) -> String {
        url + separator + destination
    }

    /// A directory destination as compared: the file's path, or the directory's with a
    /// trailing `/` when the server names the file.
    static func destination(directory: String, name: String?) -> String {
        guard let name else { return directory.hasSuffix("/") ? directory : directory + "/" }
        return PartialPaths.join(directory, name)
    }

    /// Between the URL and the destination in a qualified ID.
    package static let separator = " -> "

    /// Which download `handle` (an ID, or a URL) names among `ids`, those of the jobs
    /// whose ID is `handle` or starts with `handle` and ``separator``: the job with that
    /// ID, else the only download of that URL.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` when the URL names several
    ///   downloads and none by its ID, listing their IDs.
    /// - Returns: `nil` when it names none.
    package static func resolve(_ handle: String, among ids: [String]) throws(DownloadError) -> String? {
        if ids.contains(handle) { return handle }
        guard ids.count > 1 else { return ids.first }
        let listed = ids.sorted().map { "'\($0)'" }.joined(separator: ", ")
        throw .invalid("\(handle) names \(ids.count) downloads (one per destination): \(listed); give one of these IDs")
    }

    /// The URL of a download's ID: the ID itself, or the part before
    /// ``separator`` of a qualified one. For telling whether a URL names the download.
    package static func url(of id: String) -> Substring {
        guard let range = id.range(of: separator) else { return Substring(id) }
        return id[..<range.lowerBound]
    }
}

extension JobRecord {
    /// Where the download goes, as ``JobIdentity`` compares destinations: the file's path;
    /// for a name the server gives, the directory's path with a trailing `/`; an object's
    /// `s3://` address.
    package var identityDestination: String {
        Self.identityDestination(kind: destinationKind, path: destinationPath, name: destinationName)
    }

    /// ``identityDestination`` of a row's destination columns.
    static func identityDestination(kind: String, path: String, name: String?) -> String {
        kind == "directory" ? JobIdentity.destination(directory: path, name: name) : path
    }
}

extension DownloadDestination {
    /// ``JobRecord/identityDestination`` of a request going here; `nil` for memory.
    package var identityDestination: String? {
        switch self {
        case .file(let file): file.path
        case .directory(let directory, let name): JobIdentity.destination(directory: directory.path, name: name)
        case .object(let bucket, let key, _): "s3://\(bucket)/\(key)"
        case .memory: nil
        }
    }
}
