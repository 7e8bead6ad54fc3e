import Foundation
import Testing

@testable import HaulServer

/// The files beside the journal that make one service per journal, let clients find it,
/// and hold its token. Real files and real `flock`s (two opens in one process conflict
/// like two processes).
@Suite("Service files")
struct ServiceFilesTests {
    static func withFiles(_ body: (ServiceFiles) throws -> Void) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-serve-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try body(ServiceFiles(journalPath: directory.appendingPathComponent("journal.sqlite").path))
    }

    @Test func oneServicePerJournalAndClientsFindItOnlyWhileItRuns() throws {
        try Self.withFiles { files in
            // Given a running service
            #expect(files.runningAddress() == nil)
            let lock = try files.acquire()
            try files.writeAddress("127.0.0.1:6800")
            #expect(files.runningAddress() == "127.0.0.1:6800")

            // Then a second one is refused, naming the first one's address
            let error = #expect(throws: ServiceFiles.Failure.self) { try files.acquire() }
            #expect(error?.message.contains("already runs for this journal at 127.0.0.1:6800") == true)

            // When it stops (or dies), its address file no longer counts, and a new one starts
            lock.release()
            #expect(files.runningAddress() == nil)
            let next = try files.acquire()
            next.release()
        }
    }

    @Test func aTokenIsGeneratedOnceInAPrivateFileAndTheEnvironmentWins() throws {
        try Self.withFiles { files in
            let (first, source) = try files.token(environment: [:])
            #expect(source == .generated)
            #expect(first.count == 64)
            var info = stat()
            #expect(stat(files.tokenPath, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)

            // The next start reads the same token
            let (again, againSource) = try files.token(environment: [:])
            #expect(again == first)
            #expect(againSource == .file)

            // The environment wins, and must be long enough
            let given = String(repeating: "k", count: 20)
            #expect(try files.token(environment: [ServiceFiles.tokenVariable: given]) == (given, .environment))
            #expect(throws: ServiceFiles.Failure.self) {
                try files.token(environment: [ServiceFiles.tokenVariable: "short"])
            }
        }
    }

    @Test func aTokenFileOthersCanReadIsRefused() throws {
        try Self.withFiles { files in
            _ = try files.token(environment: [:])
            #expect(chmod(files.tokenPath, 0o644) == 0)
            let error = #expect(throws: ServiceFiles.Failure.self) { try files.token(environment: [:]) }
            #expect(error?.message.contains("can be read by others") == true)
        }
    }
}
