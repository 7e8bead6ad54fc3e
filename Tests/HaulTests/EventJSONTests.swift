import Foundation
import Haul
import Testing

@testable import HaulServer

/// The hand-written JSON of the `download` and `progress` events is byte for byte what
/// `ServiceJSON.encoder` writes, whatever the strings and numbers in it.
@Suite("Event JSON")
struct EventJSONTests {
    @Test(arguments: [
        ("plain", "http://127.0.0.1:8080/files/a.bin", nil as String?, 0.0),
        ("quotes \"and\" \\backslashes\\ /slashes/", "https://example.com/a?b=c&d=e", "HTTP 404: \"Not Found\"", 1234.5),
        ("line\nbreaks\r\tand\u{01}controls\u{1F}", "http://h/\u{7F}", "tab\there", 1e300),
        ("ünïcödé 名前 🎉", "http://xn--n3h.example/✓", "", 0.1 + 0.2),
    ])
    func aDownloadIsWrittenAsTheEncoderWritesIt(name: String, url: String, error: String?, speed: Double) throws {
        let created = Date(timeIntervalSince1970: 1_790_000_000.987)
        var view = DownloadView(
            JobSnapshot(
                id: DownloadID(url), url: url, state: .failed, priority: 2, bytes: 123_456_789_012,
                totalBytes: error == nil ? nil : 987_654_321_098, bytesPerSecond: speed, destination: "/tmp/\(name)",
                attempts: 3, errorCode: error.map { _ in "http" }, error: error, createdAt: created,
                updatedAt: created.addingTimeInterval(59.5), finishedAt: error == nil ? nil : created.addingTimeInterval(3_600)))
        view.name = name
        view.connections = 4
        let expected = String(decoding: try ServiceJSON.encoder.encode(view), as: UTF8.self)
        #expect(EventJSON.download(view) == expected)
        // A completed one says what it moved.
        view.state = .completed
        view.bytesTransferred = error == nil ? 0 : 123_000
        view.unchanged = error == nil
        let completed = String(decoding: try ServiceJSON.encoder.encode(view), as: UTF8.self)
        #expect(EventJSON.download(view) == completed)
        #expect(completed.contains(#""unchanged":\#(error == nil)"#))
        #expect(try ServiceJSON.decoder.decode(DownloadView.self, from: Data(EventJSON.download(view).utf8)).url == url)

        let progress = ProgressView(
            id: url, bytes: 42, totalBytes: error == nil ? nil : 100, bytesPerSecond: speed, connections: 2,
            limit: error == nil ? nil : 1_048_576)
        #expect(EventJSON.progress(progress) == String(decoding: try ServiceJSON.encoder.encode(progress), as: UTF8.self))
    }

    @Test func integralSpeedsHaveNoFractionAndNonFiniteOnesAreZero() {
        var view = Self.plainView()
        view.bytesPerSecond = 2_000_000
        #expect(EventJSON.download(view).contains(#""bytesPerSecond":2000000,"#))
        view.bytesPerSecond = .nan
        #expect(EventJSON.download(view).contains(#""bytesPerSecond":0,"#))
    }

    @Test func datesAreWrittenAsTheEncoderWritesThem() throws {
        var generator = SystemRandomNumberGenerator()
        var view = Self.plainView()
        var times: [Double] = [0, -0.5, 59.999, 951_782_399.9, 951_782_400, -2_208_988_800, -2_208_988_801, 253_402_300_799.9]
        for _ in 0..<2_000 { times.append(Double.random(in: -2_300_000_000...4_200_000_000, using: &generator)) }
        for time in times {
            view.createdAt = Date(timeIntervalSince1970: time)
            view.finishedAt = Date(timeIntervalSince1970: time.rounded(.down))
            let expected = String(decoding: try ServiceJSON.encoder.encode(view), as: UTF8.self)
            #expect(EventJSON.download(view) == expected, "\(time)")
        }
    }

    static func plainView() -> DownloadView {
        let date = Date(timeIntervalSince1970: 1_790_000_000)
        return DownloadView(
            JobSnapshot(
                id: DownloadID("a"), url: "http://127.0.0.1/a", state: .running, priority: 0, bytes: 0, totalBytes: nil,
                bytesPerSecond: 0, destination: "/tmp/a", attempts: 0, errorCode: nil, error: nil, createdAt: date,
                updatedAt: date, finishedAt: nil))
    }
}
