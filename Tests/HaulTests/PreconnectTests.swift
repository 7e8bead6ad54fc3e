import Foundation
import GRDB
import Haul
import HaulTestSupport
import Testing

@testable import Haul

/// An `https` download that starts as soon as it is journaled has its connection opened
/// while it is journaled (issue 42): on a far link the handshake takes two or three round
/// trips, which journaling a list of a thousand used to come before.
@Suite("Connections opened ahead of their requests", .timeLimit(.minutes(4)))
struct PreconnectTests {
    @Test func anHTTPSDownloadConnectsWhileItsRowIsStillBeingWritten() async throws {
        try await Fixture.with(journal: true) { f in
            let journal = try #require(f.journal)
            // Given a journal that another connection holds for writing, so that no row can
            // be written (the fault server speaks no TLS: what counts is that a connection
            // reaches it)
            var unsafe = Configuration()
            unsafe.allowsUnsafeTransactions = true
            let holder = try DatabaseQueue(path: f.directory.path + "-journal/journal.sqlite", configuration: unsafe)
            try await holder.writeWithoutTransaction { try $0.execute(sql: "BEGIN IMMEDIATE") }
            let port = try #require(f.server.url("/").port)
            let url = try #require(URL(string: "https://127.0.0.1:\(port)/files/a"))

            // When an https download is added, which starts at once
            let adding = Task { try await f.manager.enqueue([DownloadRequest(url: url, destination: .directory(f.directory))]) }

            // Then its connection is made while its row cannot be written yet
            await f.server.waitForConnections(count: 1)
            #expect(try await journal.writer.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM job") } == 0)
            try await holder.writeWithoutTransaction { try $0.execute(sql: "ROLLBACK") }
            try await adding.value
            #expect(try await journal.writer.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM job") } == 1)
            await f.manager.cancelAll()
        }
    }

    @Test func aPausedDownloadOpensNoConnection() async throws {
        try await Fixture.with(journal: true) { f in
            let port = try #require(f.server.url("/").port)
            let url = try #require(URL(string: "https://127.0.0.1:\(port)/files/p"))
            // Given an https download added paused
            _ = try await f.manager.enqueue([DownloadRequest(url: url, destination: .directory(f.directory))], paused: true)
            // When a plain http one is added and done after it
            f.serve("q", count: 100)
            _ = try await f.manager.download(
                DownloadRequest(url: f.server.url("/files/q"), destination: .directory(f.directory))
            ).result
            // Then the server saw only the plain one's connection
            #expect(f.server.statistics.connectionsAccepted == 1)
        }
    }
}
