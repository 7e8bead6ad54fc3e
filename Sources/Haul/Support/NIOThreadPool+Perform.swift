package import NIOPosix

extension NIOThreadPool {
    /// Runs blocking file work on the pool and resumes the caller straight from the pool
    /// thread.
    ///
    /// Unlike `runIfActive(eventLoop:)`, there is no hop through an event loop on the way
    /// back (one thread hand-off instead of two, which matters when thousands of small
    /// files each make a few of these calls); unlike the async `runIfActive`, the work
    /// still runs when the calling task is cancelled, so a pause's final sync and
    /// checkpoint always happen.
    package func perform<T: Sendable>(_ body: @escaping @Sendable () throws(DownloadError) -> T) async throws(DownloadError)
        -> T
    {
        let result: Result<T, DownloadError> = await withUnsafeContinuation { continuation in
            submit { state in
                guard case .active = state else {
                    continuation.resume(
                        returning: .failure(DownloadError(.fileSystem, "file I/O could not run: the I/O pool is stopped")))
                    return
                }
                do throws(DownloadError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
