public import Foundation

extension DownloadRequest {
    /// The requests for every file a Metalink 4 document (RFC 5854, `.meta4`) names: each
    /// with its mirrors (those at `location` first, an ISO 3166 country code such as
    /// `"de"`, then by the document's priority), its size, its strongest whole-file
    /// digest and its piece digests.
    ///
    /// Each file goes to its name below `directory`; a name with folders (`dist/a.iso`)
    /// goes into those folders, which must exist before the download starts (the `haul`
    /// command creates them). Names that would leave `directory` (`../x`, `/etc/x`) make
    /// the whole document invalid.
    ///
    /// ```swift
    /// let requests = try DownloadRequest.requests(metalink: data, into: downloads)
    /// for request in requests { _ = try await manager.download(request) }
    /// ```
    ///
    /// - Throws: ``DownloadError/Code/invalidManifest`` naming what is wrong with the
    ///   document.
    public static func requests(metalink data: Data, into directory: URL, location: String? = nil)
        throws(DownloadError) -> [DownloadRequest]
    {
        let metalink = try Metalink.parse(data)
        return try metalink.files.map { file throws(DownloadError) in
            let urls = file.preferredSources(location: location).map(\.url)
            var request = DownloadRequest(
                urls: urls, destination: .file(directory.appendingPathComponent(file.name, isDirectory: false)),
                expectedSize: file.size, checksum: file.strongestHash)
            if let pieces = file.pieces {
                request.pieces = try PieceChecksums(pieces.algorithm, length: pieces.length, hashes: pieces.hashes)
            }
            return request
        }
    }
}
