public import Foundation

/// A zsync control file (`FILE.zsync`) for a download: the target is built from the blocks
/// that files already on disk hold (its *seeds*: an older version, a partial copy), and only
/// the rest is fetched, with range requests, from any plain HTTP server.
///
/// The publisher runs `zsyncmake` (or `haul manifest --zsync`) once and puts the control
/// file beside the target; it lists a rolling checksum and an MD4 prefix for each block of
/// the target, its size, its SHA-1 (and, from Haul, its SHA-256) and where it is served.
///
/// ```swift
/// let control = try await manager.download(
///     DownloadRequest(url: controlURL, destination: .memory(limit: 64 << 20))).result
/// var delta = try DeltaSource(controlFile: control.data ?? Data(), at: controlURL)
/// delta.seeds = [URL(fileURLWithPath: "/isos/yesterday.iso")]
/// let request = DownloadRequest(delta: delta, destination: .file(URL(fileURLWithPath: "/isos/today.iso")))
/// ```
///
/// Before its first request, such a download scans its seeds (and the file already at its
/// destination, and a partial left without a record of what it holds) on the manager's I/O
/// threads, writes the blocks found into its partial file, and records what is missing
/// beside it, as a segmented download records its ranges: from then on it is an ordinary
/// resumed download of those ranges, over several connections and from every `URL` of the
/// control file, checked against the control file's digest before it replaces anything
/// (a mismatch is ``DownloadError/Code/checksumMismatch``, and the old file stays). A
/// download stopped after that point resumes without scanning again; one stopped while it
/// scanned scans again. How much came from the seeds is told by a
/// ``DownloadEvent/deltaPrepared(_:)`` event.
public struct DeltaSource: Sendable {
    /// Where the control file was fetched from: its relative `URL`s are resolved against it.
    public let controlURL: URL
    /// Files that may hold blocks of the target, scanned in this order. The destination's
    /// existing file is scanned too, without being named here.
    public var seeds: [URL]
    /// The control file.
    let control: ZsyncControl

    /// Reads a control file fetched from `controlURL` (after its redirects).
    ///
    /// - Throws: ``DownloadError/Code/invalidManifest`` when the bytes are not a control
    ///   file as zsyncmake 0.6.2 writes them, name no `http` or `https` URL for the target
    ///   (a gzip-compressed copy, `Z-URL`, is not supported), or give no SHA-1 or SHA-256.
    public init(controlFile bytes: some Sequence<UInt8>, at controlURL: URL, seeds: [URL] = []) throws(DownloadError) {
        let control = try ZsyncControl.parse(Array(bytes))
        self.controlURL = controlURL
        self.seeds = seeds
        self.control = control
        guard !targetURLs.isEmpty else {
            if !control.compressedURLs.isEmpty {
                throw DownloadError(
                    .invalidManifest,
                    "\(controlURL.absoluteString): the control file offers only a gzip-compressed target (Z-URL), which Haul does not decompress; a plain URL is needed"
                )
            }
            throw DownloadError(
                .invalidManifest, "\(controlURL.absoluteString): the control file names no http or https URL for its target")
        }
        guard control.sha256 != nil || control.sha1 != nil else {
            throw DownloadError(
                .invalidManifest, "\(controlURL.absoluteString): the control file gives no SHA-1 or SHA-256 of its target")
        }
    }

    /// Whether `bytes`, the start of a file, begin as a zsync control file does: with
    /// `zsync: ` (its first header, the version of the program that wrote it). For
    /// recognising a control file by its content when its name does not say so; reading it
    /// with ``init(controlFile:at:seeds:)`` tells whether it is a valid one.
    public static func looksLikeControlFile(_ bytes: some Collection<UInt8>) -> Bool {
        bytes.starts(with: magic)
    }

    /// How a control file starts.
    static let magic = Array("zsync: ".utf8)

    /// How many bytes of a file's start ``looksLikeControlFile(_:)`` needs.
    public static var magicLength: Int { magic.count }

    /// The addresses of the target: the control file's `URL` lines, resolved against
    /// ``controlURL``, those that are `http` or `https`, in order.
    public var targetURLs: [URL] {
        var urls: [URL] = []
        for text in control.urls {
            guard let url = URL(string: text, relativeTo: controlURL)?.absoluteURL, url.isWebAddress,
                !urls.contains(url)
            else { continue }
            urls.append(url)
        }
        return urls
    }

    /// The name the control file gives the target (`Filename`), as written: a name to be
    /// checked like any name a server sends before it names a file.
    public var filename: String? { control.filename }

    /// A safe file name for the target: the control file's `Filename` where that is a
    /// plain file name, else the last component of its first URL, else `download`.
    package var suggestedFileName: String {
        let candidates = [filename, targetURLs.first?.lastPathComponent].compactMap { $0 }
        return candidates.lazy.compactMap { FileNaming.sanitize($0) }.first { $0 != "." && $0 != ".." } ?? "download"
    }

    /// The largest control file worth fetching into memory: a 16 GiB target of 2 KiB
    /// blocks with the widest sums needs about 160 MiB.
    package static let controlFileLimit = 256 << 20

    /// The target's size in bytes.
    public var length: Int64 { control.length }

    /// The size of the blocks the target is compared in.
    public var blockSize: Int { control.blockSize }

    /// The digest the target must have: its SHA-256 where the control file gives one, else
    /// its SHA-1.
    public var checksum: Checksum {
        // (The initializer refused a control file with neither.)
        control.sha256 ?? control.sha1!
    }
}

extension DownloadRequest {
    /// Creates a request for the target of a zsync control file, built from `delta`'s
    /// seeds and what is missing from them: its URLs (the first, then the others as
    /// mirrors), size and digest are the control file's.
    public init(
        delta: DeltaSource, destination: DownloadDestination, id: DownloadID? = nil, priority: DownloadPriority = .normal,
        headers: [(name: String, value: String)] = []
    ) {
        self.init(
            urls: delta.targetURLs, destination: destination, id: id, priority: priority, expectedSize: delta.length,
            checksum: delta.checksum, headers: headers)
        self.delta = delta
    }
}

/// What a delta download took from its seeds (see ``DeltaSource``).
public struct DeltaReport: Sendable, Hashable {
    /// The target's size.
    public var length: Int64
    /// Bytes of the target found in the seeds (or in the destination's old file) and
    /// written into the partial file: not fetched.
    public var reusedBytes: Int64
    /// Bytes still to fetch.
    public var missingBytes: Int64
    /// The ranges those bytes form, each one a range request at most.
    public var missingRanges: Int
    /// Bytes of the seeds scanned.
    public var scannedBytes: Int64
    /// How long the scan and the copy took.
    public var duration: Duration

    /// Creates a report.
    public init(
        length: Int64, reusedBytes: Int64, missingBytes: Int64, missingRanges: Int, scannedBytes: Int64,
        duration: Duration
    ) {
        self.length = length
        self.reusedBytes = reusedBytes
        self.missingBytes = missingBytes
        self.missingRanges = missingRanges
        self.scannedBytes = scannedBytes
        self.duration = duration
    }
}
