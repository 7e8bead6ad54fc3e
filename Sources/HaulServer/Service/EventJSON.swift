import Foundation
import Haul

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The JSON of the events sent most, `download` and `progress`, written by hand: the same
/// bytes as ``ServiceJSON/encoder`` (sorted keys, absent `nil`s, unescaped slashes, dates
/// in ISO 8601 to the second), at a fraction of the cost. A batch of 5,000 small files is
/// 15,000 such events, and `JSONEncoder` was the service's largest cost in following them.
/// `EventJSONTests` holds it to the encoder's output.
package enum EventJSON {
    /// A download's view, as `ServiceJSON.encoder` writes it.
    package static func download(_ view: DownloadView) -> String {
        var json = JSONObjectWriter()
        json.integer("attempts", view.attempts)
        json.integer("bytes", view.bytes)
        json.double("bytesPerSecond", view.bytesPerSecond)
        if let transferred = view.bytesTransferred { json.integer("bytesTransferred", transferred) }
        json.integer("connections", view.connections)
        json.date("createdAt", view.createdAt)
        json.string("destination", view.destination)
        if let error = view.error { json.string("error", error) }
        if let code = view.errorCode { json.string("errorCode", code) }
        if let finished = view.finishedAt { json.date("finishedAt", finished) }
        json.string("id", view.id)
        json.string("name", view.name)
        json.string("priority", view.priority)
        json.string("state", view.state.rawValue)
        if let total = view.totalBytes { json.integer("totalBytes", total) }
        json.bool("unchanged", view.unchanged)
        json.date("updatedAt", view.updatedAt)
        json.string("url", view.url)
        return json.finish()
    }

    /// A progress event, as `ServiceJSON.encoder` writes it.
    package static func progress(_ progress: ProgressView) -> String {
        var json = JSONObjectWriter()
        json.integer("bytes", progress.bytes)
        json.double("bytesPerSecond", progress.bytesPerSecond)
        json.integer("connections", progress.connections)
        json.string("id", progress.id)
        if let limit = progress.limit { json.integer("limit", limit) }
        if let total = progress.totalBytes { json.integer("totalBytes", total) }
        return json.finish()
    }
}

/// One JSON object, member by member, as bytes; keys are written as given (plain ASCII
/// names).
struct JSONObjectWriter {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    private var first = true

    init() {
        bytes.reserveCapacity(512)
    }

    mutating func finish() -> String {
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }

    private mutating func key(_ name: StaticString) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func integer(_ name: StaticString, _ value: Int64) {
        key(name)
        appendDigits(value)
    }

    mutating func integer(_ name: StaticString, _ value: Int) {
        integer(name, Int64(value))
    }

    mutating func bool(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes += (value ? "true" : "false").utf8
    }

    /// As `JSONEncoder`: integral values without a fraction, others as Swift prints them;
    /// a value JSON cannot hold (infinite, NaN) as 0.
    mutating func double(_ name: StaticString, _ value: Double) {
        key(name)
        guard value.isFinite else {
            bytes.append(UInt8(ascii: "0"))
            return
        }
        if value == value.rounded(), value.magnitude < 1e15, value != 0 || value.sign == .plus {
            appendDigits(Int64(value))
            return
        }
        var number = value.description
        if number.hasSuffix(".0") { number.removeLast(2) }
        bytes += number.utf8
    }

    /// As `JSONEncoder`'s ISO 8601: UTC, to the second (truncated).
    mutating func date(_ name: StaticString, _ date: Date) {
        key(name)
        let seconds = date.timeIntervalSince1970.rounded(.down)
        let iso =
            seconds.magnitude < 1e12
            ? UTCDateText.text(
                millisecondsSince1970: Int64(seconds) * 1000, separator: UInt8(ascii: "T"), milliseconds: false,
                zulu: true) : nil
        bytes.append(UInt8(ascii: "\""))
        bytes += (iso ?? Self.gmtimeText(seconds)).utf8
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func string(_ name: StaticString, _ value: String) {
        key(name)
        JSONText.appendQuoted(value, to: &bytes)
    }

    private mutating func appendDigits(_ value: Int64) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var position = digits.count
            repeat {
                position -= 1
                digits[position] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[position...]))
        }
    }

    /// A date outside the years 1900 to 9999, through the C library.
    private static func gmtimeText(_ seconds: Double) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        return digits(Int(parts.tm_year) + 1900, 4) + "-" + digits(Int(parts.tm_mon) + 1, 2) + "-"
            + digits(Int(parts.tm_mday), 2) + "T" + digits(Int(parts.tm_hour), 2) + ":" + digits(Int(parts.tm_min), 2)
            + ":" + digits(Int(parts.tm_sec), 2) + "Z"
    }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}
