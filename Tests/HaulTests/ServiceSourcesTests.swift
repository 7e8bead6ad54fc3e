import Foundation
@testable import Haul
import HaulServer
import HaulTestSupport
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

/// A download's addresses changed through the API: a fresh URL for an expired one, given
/// with `PATCH /downloads/{id}`, resumes the partial; a running download moves to new
/// addresses where it stood; the journal keeps them.
@Suite("Service: changing a download's addresses", .timeLimit(.minutes(4)))
struct ServiceSourcesTests {
    static func path(_ id: String) -> String {
        "/api/v1/downloads/\(id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
    }

    @Test func aFreshURLGivenForAnExpiredOneResumesThePartial() async throws {
        try await ServiceAPITests.with { client, f, _ in
            // Given a signed URL that expires after 300,000 of its 1,000,000 bytes: the
            // download fails as expired, its partial kept
            let bytes = f.serve("f", count: 1_000_000)
            let body = #"{"downloads": [{"url": "\#(f.server.url("/files/f?token=a&expire_after=300000"))", "name": "f"}]}"#
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: body))
            let id = try #require((try ServiceAPITests.json(added)["ids"] as? [String])?.first)
            await f.manager.waitUntilIdle()
            let failed = try ServiceAPITests.json(
                try await client.execute(uri: Self.path(id), method: .get, headers: ServiceAPITests.headers))
            #expect(failed["state"] as? String == "failed")

            // When a fresh URL of the same object is given, and the download retried
            let fresh = f.server.url("/files/f?token=b")
            let patched = try await client.execute(
                uri: Self.path(id), method: .patch, headers: ServiceAPITests.headers,
                body: ByteBuffer(string: #"{"url": "\#(fresh)"}"#))
            #expect(patched.status == .ok)
            let retried = try await client.execute(uri: Self.path(id) + "/retry", method: .post, headers: ServiceAPITests.headers)
            #expect(retried.status == .ok)
            await f.manager.waitUntilIdle()

            // Then it completed from the fresh URL, asking only for the rest, under the same ID
            let done = try ServiceAPITests.json(
                try await client.execute(uri: Self.path(id), method: .get, headers: ServiceAPITests.headers))
            #expect(done["state"] as? String == "completed")
            #expect(sha256(f.contents("f")) == sha256(bytes))
            let asked = f.server.requests(path: "/files/f").filter { $0.query["token"] == "b" }
            #expect(asked.count == 1)
            #expect((0...300_000).contains(try #require(rangeStart(asked.first))))
            // And the journal keeps where it is fetched from now
            #expect(try f.journal!.record(DownloadID(id))?.location == fresh.absoluteString)
        }
    }

    @Test func aRunningDownloadMovesToItsNewAddressesWhereItStood() async throws {
        try await ServiceAPITests.with { client, f, _ in
            // Given a download whose server stops sending after 400,000 bytes (held open),
            // and the same file with the same validator elsewhere
            let bytes = f.serve("f", count: 1_000_000, etag: .custom("same"))
            f.server.setFile("g", bytes, etag: .custom("same"))
            let body = #"{"downloads": [{"url": "\#(f.server.url("/files/f?stall_after=400000"))", "name": "f"}]}"#
            let events = f.manager.events(includingProgress: true)
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: body))
            let id = try #require((try ServiceAPITests.json(added)["ids"] as? [String])?.first)
            // (once all 400,000 bytes are on disk)
            for await event in events {
                if event.id.rawValue == id, case .progress(let progress) = event.event, progress.completedBytes >= 400_000 {
                    break
                }
            }

            // When its addresses are changed while it runs
            let patched = try await client.execute(
                uri: Self.path(id), method: .patch, headers: ServiceAPITests.headers,
                body: ByteBuffer(string: #"{"urls": ["\#(f.server.url("/files/g"))"]}"#))
            #expect(patched.status == .ok)
            await f.manager.waitUntilIdle()

            // Then it completed from the new address, from where it stood
            #expect(sha256(f.contents("f")) == sha256(bytes))
            let moved = f.server.requests(path: "/files/g")
            #expect(moved.count == 1)
            #expect(moved.first?.header("Range") == "bytes=400000-")
        }
    }

    @Test func badAddressesAreRefused() async throws {
        try await ServiceAPITests.with { client, f, _ in
            f.serve("f", count: 10)
            let body = #"{"downloads": [{"url": "\#(f.server.url("/files/f"))"}], "paused": true}"#
            let added = try await client.execute(
                uri: "/api/v1/downloads", method: .post, headers: ServiceAPITests.headers, body: ByteBuffer(string: body))
            let id = try #require((try ServiceAPITests.json(added)["ids"] as? [String])?.first)
            for change in [#"{"url": "ftp://x/f"}"#, #"{"url": "http://u:p@x/f"}"#, #"{"urls": []}"#, #"{"url": "http://x/f", "urls": ["http://x/f"]}"#] {
                let response = try await client.execute(
                    uri: Self.path(id), method: .patch, headers: ServiceAPITests.headers, body: ByteBuffer(string: change))
                #expect(response.status == .badRequest, "\(change)")
            }
        }
    }
}
