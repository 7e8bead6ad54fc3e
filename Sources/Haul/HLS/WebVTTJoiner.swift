import Foundation

/// Joins the WebVTT segments of a subtitle rendition into one WebVTT file: the first
/// segment's header (its `WEBVTT` line, its `X-TIMESTAMP-MAP` and its style and region
/// blocks), then the cues of every segment in order, each once.
///
/// Each HLS subtitle segment is a WebVTT file of its own. Its `X-TIMESTAMP-MAP` header
/// (RFC 8216, 3.5) says which transport-stream time (`MPEGTS`, 90 kHz) its cue time
/// `LOCAL` stands for; a segment whose map differs from the first's (after a
/// discontinuity) has its cues moved so that they mean the same media time under the
/// first's map. A cue that spans a segment boundary is repeated by segmenters in both
/// segments: the copy equal to one of the previous segment's cues is dropped.
///
/// A value with no I/O: ``HLSAssembly`` feeds it each decrypted segment.
struct WebVTTJoiner: Sendable {
    /// Why a segment cannot be joined.
    struct Problem: Error, Equatable, CustomStringConvertible {
        let description: String
    }

    /// The first segment's map, as the media time (seconds) of cue time 0.
    private var firstOrigin: Double?
    /// Whether the header has been written.
    private var started = false
    /// The cues of the previous segment, as written.
    private var previousCues: Set<String> = []

    /// The bytes to write for `segment`, the next one in order.
    ///
    /// - Throws: ``Problem`` for a segment that is not WebVTT text, or whose map or cue
    ///   timings cannot be read.
    mutating func append(_ segment: Data) throws(Problem) -> Data {
        guard var text = String(data: segment, encoding: .utf8) else { throw Problem(description: "the segment is not UTF-8 text") }
        if text.hasPrefix("\u{FEFF}") { text.removeFirst() }
        text = text.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
        var blocks = text.components(separatedBy: "\n\n").map { $0.trimmingCharacters(in: .newlines) }.filter { !$0.isEmpty }
        guard let header = blocks.first, header == "WEBVTT" || header.hasPrefix("WEBVTT ") || header.hasPrefix("WEBVTT\t")
            || header.hasPrefix("WEBVTT\n")
        else { throw Problem(description: "the segment is not WebVTT (no WEBVTT header)") }
        blocks.removeFirst()
        let headerLines = header.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let map = headerLines.first { $0.hasPrefix("X-TIMESTAMP-MAP=") }
        let origin = try map.map { line throws(Problem) in try Self.origin(ofMap: line) }
        var shift = 0.0
        var out = ""
        if !started {
            started = true
            firstOrigin = origin
            out = headerLines.filter { $0.hasPrefix("WEBVTT") || $0.hasPrefix("X-TIMESTAMP-MAP=") }.joined(separator: "\n") + "\n\n"
        } else if let origin, let firstOrigin {
            shift = origin - firstOrigin
            // MPEGTS is a 33-bit counter: a map past its wrap is one period on.
            let period = Double(1 << 33) / 90_000
            if shift < -period / 2 { shift += period }
        }
        var cues: Set<String> = []
        for var block in blocks {
            let isCue = block.split(separator: "\n").prefix(2).contains { $0.contains("-->") }
            // Style and region blocks come before any cue: the first segment's only.
            guard isCue || out.hasPrefix("WEBVTT") && cues.isEmpty && previousCues.isEmpty else { continue }
            if isCue, shift != 0 { block = try Self.shifted(block, by: shift) }
            if isCue {
                guard !previousCues.contains(block) else { continue }
                cues.insert(block)
            }
            out += block + "\n\n"
        }
        previousCues = cues
        return Data(out.utf8)
    }

    /// The media time (seconds) of cue time 0 under an `X-TIMESTAMP-MAP=MPEGTS:n,LOCAL:t`
    /// line (its two fields in either order).
    static func origin(ofMap line: String) throws(Problem) -> Double {
        var mpegts: Double?
        var local: Double?
        for field in line.dropFirst("X-TIMESTAMP-MAP=".count).split(separator: ",") {
            let parts = field.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            switch parts[0] {
            case "MPEGTS": mpegts = Double(parts[1]).map { $0 / 90_000 }
            case "LOCAL": local = timestamp(parts[1])
            default: break
            }
        }
        guard let mpegts, let local else { throw Problem(description: "an X-TIMESTAMP-MAP it cannot read: \(line)") }
        return mpegts - local
    }

    /// Seconds of a WebVTT timestamp, `hh:mm:ss.ttt` or `mm:ss.ttt`.
    static func timestamp(_ text: some StringProtocol) -> Double? {
        let fields = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(fields.count), let seconds = Double(fields[fields.count - 1]), seconds >= 0, seconds < 60,
            fields[fields.count - 1].contains(".")
        else { return nil }
        var total = seconds
        var scale = 60.0
        for field in fields.dropLast().reversed() {
            guard let value = Int(field), value >= 0 else { return nil }
            total += Double(value) * scale
            scale *= 60
        }
        return total
    }

    /// `seconds` as `hh:mm:ss.ttt`.
    static func text(ofTimestamp seconds: Double) -> String {
        let millis = Int((max(0, seconds) * 1000).rounded())
        let (hours, rest) = millis.quotientAndRemainder(dividingBy: 3_600_000)
        let (minutes, rest2) = rest.quotientAndRemainder(dividingBy: 60_000)
        let (secs, ms) = rest2.quotientAndRemainder(dividingBy: 1000)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let three = ms < 10 ? "00\(ms)" : ms < 100 ? "0\(ms)" : "\(ms)"
        return "\(two(hours)):\(two(minutes)):\(two(secs)).\(three)"
    }

    /// `block` (a cue) with its timing line's start and end moved by `shift` seconds.
    static func shifted(_ block: String, by shift: Double) throws(Problem) -> String {
        var lines = block.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let index = lines.prefix(2).firstIndex(where: { $0.contains("-->") }) else { return block }
        let line = lines[index]
        let arrow = line.range(of: "-->")!
        let start = line[..<arrow.lowerBound].trimmingCharacters(in: .whitespaces)
        let after = line[arrow.upperBound...].trimmingCharacters(in: .whitespaces)
        let endText = after.prefix { !$0.isWhitespace }
        let settings = after.dropFirst(endText.count)
        guard let from = timestamp(start), let to = timestamp(endText) else {
            throw Problem(description: "a cue timing it cannot read: \(line)")
        }
        lines[index] = "\(text(ofTimestamp: from + shift)) --> \(text(ofTimestamp: to + shift))\(settings)"
        return lines.joined(separator: "\n")
    }
}
