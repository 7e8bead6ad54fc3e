import Foundation
import NIOPosix

/// The result of a memory request that joined another download: the shared result with
/// its bytes in `data`, read from the verified file of a file download, and never more
/// than the request's limit.
///
/// The copy starts as soon as the download completes, on the manager's I/O thread pool,
/// whether or not anyone awaits it yet.
final class MemoryCopy: Sendable {
    /// The joined handle's result.
    let result = ResultBox<DownloadResult>()

    init(of source: ResultBox<DownloadResult>, url: URL, limit: Int, threadPool: NIOThreadPool) {
        let result = self.result
        source.whenComplete { outcome in
            guard case .success(let shared) = outcome else {
                result.complete(outcome)
                return
            }
            if let data = shared.data {
                let size = Int64(data.count)
                result.complete(size <= limit ? .success(shared) : .failure(Self.tooLarge(url, size: size, limit: limit)))
                return
            }
            guard let file = shared.fileURL else {
                result.complete(.success(shared))
                return
            }
            threadPool.submit { state in
                guard case .active = state else {
                    result.complete(
                        .failure(DownloadError(.fileSystem, "cannot read \(file.path): the I/O pool is stopped")))
                    return
                }
                result.complete(
                    Result { () throws(DownloadError) in
                        let data = try Self.read(file, url: url, limit: limit)
                        return DownloadResult(
                            id: shared.id, fileURL: shared.fileURL, data: data, finalURL: shared.finalURL,
                            byteCount: shared.byteCount, bytesTransferred: shared.bytesTransferred,
                            isUnchanged: shared.isUnchanged)
                    })
            }
        }
    }

    /// Reads `file` whole, unless it is larger than `limit`. Blocks: run it on the I/O pool.
    static func read(_ file: URL, url: URL, limit: Int) throws(DownloadError) -> Data {
        do {
            let handle = try FileHandle(forReadingFrom: file)
            defer { try? handle.close() }
            let size = try handle.seekToEnd()
            guard size <= UInt64(limit) else { throw tooLarge(url, size: Int64(size), limit: limit) }
            try handle.seek(toOffset: 0)
            let data = try handle.read(upToCount: Int(size)) ?? Data()
            guard data.count == Int(size) else {
                throw DownloadError(
                    .fileSystem, "\(file.path) changed while it was read for a memory request: download it again")
            }
            return data
        } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(
                .fileSystem, "cannot read \(file.path) for a memory request: \(error.localizedDescription)")
        }
    }

    private static func tooLarge(_ url: URL, size: Int64, limit: Int) -> DownloadError {
        DownloadError(.tooLarge, "\(url.absoluteString) is \(size) bytes, over the \(limit)-byte memory limit")
    }
}
