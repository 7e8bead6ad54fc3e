#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import Foundation
import _CryptoExtras

/// Writes a stream's output from its staged resources: each part of the plan in order,
/// decrypted where it has a key, checked to start as its container says, then made durable
/// (``write(_:keys:staging:)``), and later renamed into place (``commit(_:to:)``).
/// Blocking: runs on the manager's I/O threads.
enum HLSAssembly {
    /// What was written.
    struct Written: Sendable, Equatable {
        var segments: Int
        var duration: Double
        var bytes: Int64
    }

    /// Where ``write(_:keys:staging:)`` writes the output in `staging`.
    static func assembled(in staging: String) -> String {
        PartialPaths.join(staging, "assembled")
    }

    /// Writes `plan`'s output from the files in `staging` into ``assembled(in:)``, with
    /// `keys` (the 16-byte key of each AES-128 key of the plan), and makes it durable.
    ///
    /// - Throws: ``DownloadError/Code/checksumMismatch`` for a segment that does not
    ///   decrypt, or does not start as its container's segments do (its staged file is
    ///   deleted, so that the next run fetches it again);
    ///   ``DownloadError/Code/sizeMismatch`` for a byte range past its resource's end;
    ///   ``DownloadError/Code/fileSystem``.
    static func write(_ plan: HLSPlan, keys: [HLSKey: [UInt8]], staging: String) throws(DownloadError) -> Written {
        let temporary = assembled(in: staging)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { throw .fileSystem("create", path: temporary, errno: errno) }
        var written = Written(segments: 0, duration: 0, bytes: 0)
        var subtitles = plan.container == .webVTT ? WebVTTJoiner() : nil
        do throws(DownloadError) {
            for part in plan.parts {
                let resource = plan.resources[part.resource]
                let file = PartialPaths.join(staging, resource.fileName)
                var bytes = try read(file, range: part.range, url: resource.url)
                if let key = part.key, let iv = part.iv {
                    guard let secret = keys[key] else {
                        throw DownloadError(.invalidRequest, "\(resource.url.absoluteString): its key was not fetched")
                    }
                    do {
                        bytes = try AES._CBC.decrypt(bytes, using: SymmetricKey(data: secret), iv: AES._CBC.IV(ivBytes: iv))
                    } catch {
                        unlink(file)
                        throw DownloadError(
                            .checksumMismatch,
                            "\(resource.url.absoluteString): the segment does not decrypt with its AES-128 key (\(error)); it is fetched again next time"
                        )
                    }
                }
                if let problem = check(bytes, part: part, container: plan.container) {
                    unlink(file)
                    throw DownloadError(
                        .checksumMismatch, "\(resource.url.absoluteString): \(problem); it is fetched again next time")
                }
                if subtitles != nil {
                    do throws(WebVTTJoiner.Problem) {
                        bytes = try subtitles!.append(bytes)
                    } catch {
                        unlink(file)
                        throw DownloadError(
                            .checksumMismatch, "\(resource.url.absoluteString): \(error.description); it is fetched again next time")
                    }
                }
                try writeAll(bytes, to: descriptor, path: temporary)
                written.bytes += Int64(bytes.count)
                if case .segment(_, let seconds) = part.kind {
                    written.segments += 1
                    written.duration += seconds
                }
            }
            // Every segment of the playlist, once, in order: their durations add up to the
            // playlist's.
            guard written.segments == plan.segmentCount, abs(written.duration - plan.duration) < 0.001 else {
                throw DownloadError(
                    .sizeMismatch,
                    "\(plan.resources.first?.url.absoluteString ?? staging): \(written.segments) segments (\(written.duration) s) written of \(plan.segmentCount) (\(plan.duration) s)")
            }
            guard durableSync(descriptor) == 0 else { throw .fileSystem("write", path: temporary, errno: errno) }
        } catch {
            close(descriptor)
            unlink(temporary)
            throw error
        }
        close(descriptor)
        return written
    }

    /// Renames the output ``write(_:keys:staging:)`` wrote in `staging` to `path`, and
    /// makes the rename durable.
    static func commit(_ staging: String, to path: String) throws(DownloadError) {
        let temporary = assembled(in: staging)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw .fileSystem("move into place", path: path, errno: code)
        }
        FileTree.syncDirectory(PathText.directory(of: path))
    }

    /// The bytes of `file`, or of its `range`.
    private static func read(_ file: String, range: HLSByteRange?, url: URL) throws(DownloadError) -> Data {
        let descriptor = open(file, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw .fileSystem("read", path: file, errno: errno) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .fileSystem("read", path: file, errno: errno) }
        let size = Int(status.st_size)
        let offset = range?.offset ?? 0
        let length = range?.length ?? size
        guard offset + length <= size else {
            unlink(file)
            throw DownloadError(
                .sizeMismatch,
                "\(url.absoluteString): the playlist's byte range \(offset)-\(offset + length - 1) is past its end (\(size) bytes)")
        }
        var data = Data(count: length)
        var done = 0
        while done < length {
            let count = data.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, length - done, off_t(offset + done))
            }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw .fileSystem("read", path: file, errno: count == 0 ? EIO : errno) }
            done += count
        }
        return data
    }

    private static func writeAll(_ bytes: Data, to descriptor: Int32, path: String) throws(DownloadError) {
        if let code = bytes.withUnsafeBytes({ writeFully(descriptor, $0) }) {
            throw .fileSystem("write", path: path, errno: code)
        }
    }

    /// What is wrong with a decrypted part, for its container: a transport stream segment
    /// starts with a sync byte (0x47); an fMP4 init section or fragment starts with a box
    /// (a 32-bit size of at least 8, then a four-letter type). `nil` when it looks right.
    static func check(_ bytes: Data, part: HLSPlan.Part, container: HLSPlan.Container) -> String? {
        guard !bytes.isEmpty else { return "the segment is empty" }
        switch container {
        case .transportStream:
            if case .initialization = part.kind { return nil }
            return bytes.first == 0x47 ? nil : "the segment is not an MPEG transport stream (no sync byte)"
        case .fragmentedMP4:
            guard bytes.count >= 8 else { return "the fragment is shorter than a box header" }
            let start = bytes.startIndex
            let size = bytes[start..<start + 4].reduce(0) { $0 << 8 | Int($1) }
            let type = bytes[start + 4..<start + 8]
            guard size == 1 || size >= 8, type.allSatisfy({ (0x20...0x7E).contains($0) }) else {
                return "the fragment does not start with an MP4 box"
            }
            return nil
        case .packed, .webVTT:
            // A WebVTT segment is checked as it is joined (``WebVTTJoiner``).
            return nil
        }
    }
}
