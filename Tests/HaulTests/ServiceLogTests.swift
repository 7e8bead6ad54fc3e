import Foundation
import Logging
import Testing

@testable import HaulCommandSupport

/// The service's and the worker's log lines (`--log-format`): what they hold, and that no
/// credential reaches them.
@Suite("Service log")
struct ServiceLogTests {
    @Test(arguments: [
        ("GET https://alice:s3cret@example.com/file", "GET https://***@example.com/file"),
        ("http://token@host:8080/a?b=1", "http://***@host:8080/a?b=1"),
        ("mail me at a@b.example, no URL", "mail me at a@b.example, no URL"),
        (
            "https://bucket.s3.example/k?X-Amz-Credential=AKIA%2F&X-Amz-Signature=abc123&X-Amz-Expires=300",
            "https://bucket.s3.example/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=300"
        ),
        ("https://a.blob.example/c?se=2026&sig=Zm9v%3D&sp=r", "https://a.blob.example/c?se=2026&sig=***&sp=r"),
        ("https://cdn.example/f?Signature=xyz&Key-Pair-Id=K1#frag", "https://cdn.example/f?Signature=***&Key-Pair-Id=***#frag"),
        ("https://h/f?token=t0k&page=2 failed", "https://h/f?token=***&page=2 failed"),
        ("https://h/f?monkey=banana&key=k", "https://h/f?monkey=banana&key=***"),
        ("Authorization: Bearer eyJhbGci.x.y", "Authorization: Bearer ***"),
        ("Basic YWxhZGRpbjpvcGVu was refused", "Basic *** was refused"),
        ("a=1, size=20", "a=1, size=20"),
        ("", ""),
    ])
    func credentialsAreTakenOut(text: String, expected: String) {
        #expect(CredentialRedaction.redact(text) == expected)
    }

    @Test func aJSONLineHoldsTimeLevelLabelMessageIDAndMetadata() throws {
        let event = LogEvent(
            level: .notice, message: "download failed: \"quoted\"\nnext line", metadata: nil, source: "t", file: "f",
            function: "g", line: 1)
        let line = ServiceLogHandler.line(
            event: event,
            metadata: ["id": "https://u:pw@h/f?sig=s", "code": "http-status", "bytes": .stringConvertible(42)],
            label: "haul.serve", name: "haul serve", format: .json, time: Date(timeIntervalSince1970: 1_800_000_000.25))
        #expect(line.hasSuffix("}\n"))
        #expect(line.split(separator: "\n").count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["time"] as? String == "2027-01-15T08:00:00.250Z")
        #expect(object["level"] as? String == "notice")
        #expect(object["label"] as? String == "haul.serve")
        #expect(object["message"] as? String == "download failed: \"quoted\"\nnext line")
        #expect(object["id"] as? String == "https://***@h/f?sig=***")
        #expect(object["metadata"] as? [String: String] == ["code": "http-status", "bytes": "42"])
    }

    @Test func aTextLineNamesTheProgramAndSortsTheMetadata() {
        let event = LogEvent(
            level: .info, message: "download completed", metadata: nil, source: "t", file: "f", function: "g", line: 1)
        let line = ServiceLogHandler.line(
            event: event, metadata: ["path": "/d/f", "id": "http://h/f", "bytes": "3"], label: "haul.worker",
            name: "haul worker", format: .text, time: Date())
        #expect(line == "haul worker: download completed (bytes: 3, id: http://h/f, path: /d/f)\n")
    }
}
