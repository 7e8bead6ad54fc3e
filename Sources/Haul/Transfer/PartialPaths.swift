import Crypto
import Foundation

/// Where a file download keeps its partial content and resume metadata, and where it
/// ends up. The partial lives next to the destination, so the final rename never
/// crosses file systems.
///
/// Immutable, and a class so that the job, its transfer and their closures share one
/// copy: a struct of five strings and a URL costs six retains each time it is copied.
final class PartialPaths: Hashable, Sendable {
    /// The directory the file lands in.
    let directory: URL
    /// Its path, computed once (`URL.path` decodes the URL each time).
    let directoryPath: String
    /// The destination's name when the caller fixed it; `nil` when the response decides.
    let fixedName: String?
    /// The partial file.
    let partial: String
    /// The resume metadata beside it.
    let metadata: String
    /// The object the file goes into, for an object destination: its bucket, and its key or
    /// (ending with `/`) the prefix the response's name is appended to.
    let object: S3Location?

    /// The sidecar of an object's multipart upload (``ObjectUpload/UploadRecord``).
    var uploadRecord: String { partial + Self.uploadSuffix }

    static let partialSuffix = ".haul-partial"
    static let metadataSuffix = ".haul-meta"
    static let uploadSuffix = ".haul-upload"
    static let seedSuffix = ".haul-seed"
    /// The staging directory of a stream download (``DownloadRequest/stream``): its
    /// playlists' resources, fetched and not yet assembled (see ``HLSJobTransfer``).
    static let streamSuffix = ".haul-hls"

    /// Where a delta download (``DownloadRequest/delta``) moves a partial file that has no
    /// record of what it holds, to scan it as a seed while the new partial is written.
    var seedAside: String { String(partial.dropLast(Self.partialSuffix.count)) + Self.seedSuffix }

    /// The final file, when its name is fixed (not left to the response).
    var fixedDestination: String? { fixedName.map { Self.join(directoryPath, $0) } }

    /// Paths for `destination`, or `nil` for memory destinations.
    init?(destination: DownloadDestination, url: URL, checkedDirectories: Set<String> = []) throws(DownloadError) {
        let baseName: String
        var object: S3Location?
        switch destination {
        case .memory:
            return nil
        case .object(let bucket, let key, let staging):
            guard staging.isFileURL else { throw .invalid("staging directory \(staging) is not a directory path") }
            let location = try S3Location(bucket: bucket, key: key)
            object = location
            directory = staging
            // Named for the object, so that two objects never share a staged file; a
            // prefix's object is named by the response, as a directory's file is.
            let digest = Hex.lowercase(SHA256.hash(data: Data("\(bucket)/\(key)".utf8)).prefix(10))
            if location.isPrefix {
                fixedName = nil
                let name = FileNaming.urlName(url).flatMap(FileNaming.sanitize) ?? FileNaming.fallbackName
                baseName = "s3-\(digest)-\(name)"
            } else {
                let name = FileNaming.sanitize(String(key.split(separator: "/").last ?? "")) ?? FileNaming.fallbackName
                fixedName = name
                baseName = "s3-\(digest)-\(name)"
            }
        case .file(let file):
            guard file.isFileURL else { throw .invalid("destination \(file) is not a file path") }
            let name = file.lastPathComponent
            guard !name.isEmpty, name != "/", name != ".", name != ".." else {
                throw .invalid("destination \(file.path) does not name a file")
            }
            directory = file.deletingLastPathComponent()
            fixedName = name
            baseName = name
            object = nil
        case .directory(let folder, let name):
            guard folder.isFileURL else { throw .invalid("destination \(folder) is not a directory path") }
            directory = folder
            if let name {
                guard let safe = FileNaming.sanitize(name) else {
                    throw .invalid("'\(name)' cannot be used as a file name")
                }
                fixedName = safe
                baseName = safe
            } else {
                fixedName = nil
                baseName = FileNaming.urlName(url).flatMap(FileNaming.sanitize) ?? FileNaming.fallbackName
            }
            object = nil
        }
        self.object = object
        let directoryPath = directory.path
        self.directoryPath = directoryPath
        var isDirectory: ObjCBool = false
        if object != nil, !checkedDirectories.contains(directoryPath),
            !FileManager.default.fileExists(atPath: directoryPath)
        {
            do {
                try FileManager.default.createDirectory(
                    atPath: directoryPath, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw .invalid("cannot create the staging directory \(directoryPath): \(error.localizedDescription)")
            }
        }
        guard checkedDirectories.contains(directoryPath)
            || (FileManager.default.fileExists(atPath: directoryPath, isDirectory: &isDirectory)
                && isDirectory.boolValue)
        else {
            throw .invalid("directory \(directoryPath) does not exist: create it first")
        }
        let base = Self.join(directoryPath, baseName)
        partial = base + Self.partialSuffix
        metadata = base + Self.metadataSuffix
    }

    /// The object for a response: the fixed key, else the prefix and the name
    /// ``destination(contentDisposition:finalURL:)`` gives; `nil` for a file destination.
    func objectLocation(contentDisposition: String?, finalURL: URL) throws(DownloadError) -> S3Location? {
        guard let object else { return nil }
        guard object.isPrefix else { return object }
        return try object.appending(destination(contentDisposition: contentDisposition, finalURL: finalURL).lastPathComponent)
    }

    /// The final file for a response: the fixed name, else the safe `Content-Disposition`
    /// name, else the URL's name. Always directly inside ``directory``.
    func destination(contentDisposition: String?, finalURL: URL) -> URL {
        let name =
            fixedName
            ?? contentDisposition.flatMap(FileNaming.dispositionName).flatMap(FileNaming.sanitize)
            ?? FileNaming.urlName(finalURL).flatMap(FileNaming.sanitize)
            ?? FileNaming.fallbackName
        return URL(fileURLWithPath: Self.join(directoryPath, name), isDirectory: false)
    }

    static func == (left: PartialPaths, right: PartialPaths) -> Bool {
        left === right
            || (left.partial == right.partial && left.metadata == right.metadata && left.fixedName == right.fixedName
                && left.directoryPath == right.directoryPath && left.directory == right.directory
                && left.object == right.object)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(partial)
        hasher.combine(fixedName)
    }

    /// `directory/name`: what `appendingPathComponent(name).path` gives for a name without
    /// a slash (names here are sanitised), without building a URL.
    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
