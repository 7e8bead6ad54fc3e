import Foundation
import Haul

/// `haul manifest --zsync`: a zsync control file beside each file of a manifest, for delta
/// downloads (`haul get URL.zsync`, or Debian's zsync 0.6.2 client).
enum ZsyncPublisher {
    /// `files` without the control files of files among them (`NAME.zsync` beside `NAME`):
    /// they are written for the others, not content of their own.
    static func withoutControlFiles(_ files: [Manifest.Entry]) -> [Manifest.Entry] {
        let paths = Set(files.map(\.path))
        return files.filter { !($0.path.hasSuffix(".zsync") && paths.contains(String($0.path.dropLast(6)))) }
    }

    /// Writes `PATH.zsync` beside each file of `files` below `directory`, atomically: the
    /// block sums zsyncmake 0.6.2 would write, with its block size and hash lengths, the
    /// file's name and modification time, a relative URL (the file beside it), its SHA-1,
    /// and its SHA-256.
    ///
    /// - Throws: ``InputError`` when a file cannot be read or a control file written.
    static func writeControlFiles(for files: [Manifest.Entry], in directory: URL) throws(InputError) {
        for entry in files {
            let file = directory.appendingPathComponent(entry.path)
            let data: Data
            do {
                data = try Data(contentsOf: file, options: .alwaysMapped)
            } catch {
                throw InputError(description: "cannot read \(file.path): \(error.localizedDescription)")
            }
            let name = file.lastPathComponent
            let parameters = ZsyncControl.parameters(length: Int64(data.count))
            let control = data.withUnsafeBytes {
                ZsyncControl.describing(
                    $0, blockSize: parameters.blockSize, sequenceMatches: parameters.sequenceMatches,
                    rsumBytes: parameters.rsumBytes, checksumBytes: parameters.checksumBytes, filename: name,
                    modificationTime: entry.mtime.map(ZsyncControl.modificationTime),
                    urls: [ManifestBuilder.encodedURLPath(name)], sha256: true)
            }
            let output = file.appendingPathExtension("zsync")
            do {
                try Data(control.encoded()).write(to: output, options: .atomic)
            } catch {
                throw InputError(description: "cannot write \(output.path): \(error.localizedDescription)")
            }
        }
    }
}
