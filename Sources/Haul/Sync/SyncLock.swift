#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive `flock` on the directories a sync changes, so two syncs of one directory,
/// in this process or another, cannot interleave. The kernel drops it if the process dies.
///
/// The lock is on the directory itself, not a lock file: an atomic sync also locks its
/// staging directory, which becomes the directory after the exchange.
final class SyncLock {
    private var descriptors: [Int32] = []

    init(directory: String) throws(DownloadError) {
        try add(directory)
    }

    func add(_ directory: String) throws(DownloadError) {
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw DownloadError.fileSystem("open", path: directory, errno: errno) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let failure = errno
            close(descriptor)
            if failure == EWOULDBLOCK {
                throw DownloadError(
                    .duplicate, "another sync is already changing \(directory): wait for it to finish")
            }
            throw DownloadError.fileSystem("lock", path: directory, errno: failure)
        }
        descriptors.append(descriptor)
    }

    func release() {
        for descriptor in descriptors { close(descriptor) }
        descriptors = []
    }

    deinit { release() }
}
