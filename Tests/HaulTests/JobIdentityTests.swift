import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// A download is its source and its destination (issue 44): ``JobIdentity``'s rule as a
/// table, a URL as a handle in a journal, and one manager fetching one URL into two
/// directories at once.
@Suite("A download's identity")
struct JobIdentityTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let id: String
        let destination: String
        let taken: String?
        let expected: String
    }

    static let url = "https://example.com/f.bin"

    static let cases: [Case] = [
        Case(testDescription: "a new URL is its own ID", id: url, destination: "/a/f.bin", taken: nil, expected: url),
        Case(testDescription: "the same destination again", id: url, destination: "/a/f.bin", taken: "/a/f.bin", expected: url),
        Case(
            testDescription: "another destination is qualified", id: url, destination: "/b/f.bin", taken: "/a/f.bin",
            expected: url + " -> /b/f.bin"),
        Case(
            testDescription: "a name the server gives", id: url, destination: "/b/", taken: "/a/f.bin",
            expected: url + " -> /b/"),
        Case(
            testDescription: "a chosen ID stays, and takes the row over", id: "mine", destination: "/b/f.bin",
            taken: "/a/f.bin", expected: "mine"),
    ]

    @Test(arguments: cases)
    func theRule(_ row: Case) {
        #expect(
            JobIdentity.id(row.id, url: Self.url, destination: row.destination, taken: row.taken) == row.expected)
        #expect(JobIdentity.url(of: row.expected) == (row.id == Self.url ? Self.url : "mine"))
    }

    /// In a batch, each download is decided against the rows and the downloads before it.
    @Test func aBatchIsDecidedInOrder() {
        let url = Self.url
        let batch = [(url, url, "/a/f.bin"), (url, url, "/b/f.bin"), (url, url, "/a/f.bin"), ("mine", url, "/c/f.bin")]
            .map { (id: $0.0, url: $0.1, destination: $0.2) }
        let fresh = JobIdentity.ids(of: batch, taken: [:])
        #expect(fresh.map(\.index) == [1])
        #expect(fresh.map(\.id) == [url + " -> /b/f.bin"])
        let known = JobIdentity.ids(of: batch, taken: [url: "/b/f.bin"])
        #expect(known.map(\.index) == [0, 2])
        #expect(known.map(\.id) == [url + " -> /a/f.bin", url + " -> /a/f.bin"])
    }

    @Test func aHandleNamesOneDownloadOrSaysWhich() throws {
        let url = Self.url
        let (a, b) = (url + " -> /a/", url + " -> /b/")
        #expect(try JobIdentity.resolve(url, among: [url, a, b]) == url, "an ID names its own download")
        #expect(try JobIdentity.resolve(url, among: [a]) == a, "a URL names its only download")
        #expect(try JobIdentity.resolve(a, among: [a]) == a)
        #expect(try JobIdentity.resolve(url, among: []) == nil)
        #expect(throws: DownloadError.self) { try JobIdentity.resolve(url, among: [b, a]) }
        do {
            _ = try JobIdentity.resolve(url, among: [b, a])
        } catch {
            #expect(error.code == .invalidRequest)
            #expect(error.message == "\(url) names 2 downloads (one per destination): '\(a)', '\(b)'; give one of these IDs")
        }
    }

    /// The journal finds a URL's downloads by their IDs' prefix: not another URL that
    /// starts the same way.
    @Test func theJournalFindsAURLsDownloads() async throws {
        try await Fixture.with(journal: true) { f in
            let journal = try #require(f.journal)
            let store = JournalStore(journal: journal, logger: StoreConformance.logger)
            let url = f.server.url("/files/f.bin")
            for (id, directory) in [
                ("\(url.absoluteString) -> /a/", "a"), ("\(url.absoluteString) -> /b/", "b"),
                ("\(url.absoluteString)x", "c"),
            ] {
                let request = DownloadRequest(url: url, destination: .directory(f.directory, name: directory), id: DownloadID(id))
                _ = try await store.submit([try JobRecord.make(for: request)], forcing: [], claimingUpTo: 0)
            }
            #expect(throws: DownloadError.self) { try journal.job(named: url.absoluteString) }
            #expect(try journal.job(named: url.absoluteString + " -> /a/") == DownloadID(url.absoluteString + " -> /a/"))
            #expect(try journal.job(named: url.absoluteString + "x") == DownloadID(url.absoluteString + "x"))
            #expect(try journal.job(named: "https://example.com/") == nil)
            await store.close()
        }
    }

    /// One manager, one URL, two directories at once: two downloads with IDs of their own,
    /// both files complete. Before: the second was refused as a duplicate ("give this
    /// request a distinct id").
    @Test(arguments: [false, true])
    func oneURLIntoTwoDirectoriesAtOnce(journal: Bool) async throws {
        try await Fixture.with(journal: journal) { f in
            let bytes = f.serve("twice.bin", count: 300_000)
            let url = f.server.url("/files/twice.bin")
            let (one, two) = (f.directory.appendingPathComponent("one"), f.directory.appendingPathComponent("two"))
            for directory in [one, two] { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
            let first = try await f.manager.download(DownloadRequest(url: url, destination: .directory(one)))
            let second = try await f.manager.download(DownloadRequest(url: url, destination: .directory(two)))
            #expect(first.id.rawValue == url.absoluteString)
            #expect(second.id.rawValue == url.absoluteString + " -> " + two.path + "/")
            _ = try await first.result
            _ = try await second.result
            for directory in [one, two] {
                #expect(sha256(FileManager.default.contents(atPath: directory.appendingPathComponent("twice.bin").path)) == sha256(bytes))
            }
            if let journal = f.journal {
                #expect(try journal.jobs().map(\.id).sorted() == [first.id, second.id].sorted())
            }
        }
    }
}
