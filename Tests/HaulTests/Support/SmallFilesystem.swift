import Foundation

/// A tmpfs of a given size, mounted in a temporary directory, for disk-full tests.
///
/// Mounting needs root and a kernel that allows it (true on CI's machines); where it is
/// not possible, ``isSupported`` is false and the tests that need it are skipped.
struct SmallFilesystem {
    let mountPoint: URL

    /// Whether a tmpfs can be mounted here.
    static let isSupported: Bool = {
        guard let filesystem = try? SmallFilesystem(bytes: 64 * 1024) else { return false }
        filesystem.unmount()
        return true
    }()

    /// Mounts a tmpfs of `bytes` bytes.
    init(bytes: Int) throws {
        mountPoint = FileManager.default.temporaryDirectory.appendingPathComponent("haul-tmpfs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        guard Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(bytes)", "tmpfs", mountPoint.path]) else {
            try? FileManager.default.removeItem(at: mountPoint)
            throw CocoaError(.fileWriteNoPermission)
        }
    }

    /// Grows (or shrinks) the file system to `bytes` bytes, keeping its files.
    func resize(to bytes: Int) -> Bool {
        Self.run("/bin/mount", ["-o", "remount,size=\(bytes)", mountPoint.path])
    }

    func unmount() {
        _ = Self.run("/bin/umount", [mountPoint.path])
        try? FileManager.default.removeItem(at: mountPoint)
    }

    /// Runs a tool to completion with posix_spawn and waitpid. (Foundation's `Process`
    /// with `waitUntilExit()` spins a run loop and is not safe on concurrent test threads.)
    private static func run(_ tool: String, _ arguments: [String]) -> Bool {
        let argv = ([tool] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var fileActions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&fileActions)
        defer { posix_spawn_file_actions_destroy(&fileActions) }
        posix_spawn_file_actions_addopen(&fileActions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&fileActions, 2, "/dev/null", O_WRONLY, 0)
        var pid: pid_t = 0
        guard posix_spawn(&pid, tool, &fileActions, nil, argv, environ) == 0 else { return false }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            if errno != EINTR { return false }
        }
        // Exited normally with status 0.
        return status & 0x7f == 0 && (status >> 8) & 0xff == 0
    }
}
