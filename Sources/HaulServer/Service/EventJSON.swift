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

/// One JSON object, member by member; keys are written as given (plain ASCII names).
struct JSONObjectWriter {
    private var text = "{"
    private var first = true

    init() {
        text.reserveCapacity(512)
    }

    mutating func finish() -> String {
        text += "}"
        return text
    }

    private mutating func key(_ name: String) {
        if !first { text += "," }
        first = false
        text += "\""
        text += name
        text += "\":"
    }

    mutating func integer(_ name: String, _ value: some BinaryInteger) {
        key(name)
        text += String(value)
    }

    /// As `JSONEncoder`: integral values without a fraction, others as Swift prints them;
    /// a value JSON cannot hold (infinite, NaN) as 0.
    mutating func double(_ name: String, _ value: Double) {
        key(name)
        guard value.isFinite else {
            text += "0"
            return
        }
        var number = value.description
        if number.hasSuffix(".0") { number.removeLast(2) }
        text += number
    }

    mutating func date(_ name: String, _ date: Date) {
        key(name)
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        text += "\""
        text += Self.digits(Int(parts.tm_year) + 1900, 4) + "-" + Self.digits(Int(parts.tm_mon) + 1, 2) + "-"
        text += Self.digits(Int(parts.tm_mday), 2) + "T" + Self.digits(Int(parts.tm_hour), 2) + ":"
        text += Self.digits(Int(parts.tm_min), 2) + ":" + Self.digits(Int(parts.tm_sec), 2) + "Z\""
    }

    mutating func string(_ name: String, _ value: String) {
        key(name)
        JSONText.appendQuoted(value, to: &text)
    }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}
