import Foundation
import Testing

@testable import Haul

@Suite("Directory sync")
struct DirectorySyncTests {
    @Test(.timeLimit(.minutes(4)))
    func callersAtOnceShareSyncsAndAllReturn() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-dirsync-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let sync = DirectorySync()
        let threads = 8
        let rounds = 200
        // Blocking callers on plain threads, as on the I/O pool, each syncing again as soon
        // as it returns: entries are forgotten and made again while others still wait.
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for round in 0..<rounds {
                sync.sync(directoryOf: directory.appendingPathComponent("f\(thread)-\(round)").path)
            }
        }
        let after = sync.statistics
        #expect(after.directories == 0, "entries outlive their callers")
        #expect(after.syncs >= rounds)
        #expect(after.syncs <= threads * rounds, "more syncs than callers: a caller synced again and again")
        sync.sync(directoryOf: directory.appendingPathComponent("alone").path)
        #expect(sync.statistics.syncs == after.syncs + 1)
    }

    @Test(arguments: [("/a/b/c", "/a/b"), ("/c", "/"), ("c", "."), ("a/c", "a")])
    func parentDirectory(path: String, parent: String) {
        #expect(DirectorySync.parent(of: path) == parent)
    }
}
