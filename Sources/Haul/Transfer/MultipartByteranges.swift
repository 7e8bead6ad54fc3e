import Foundation
import NIOCore

/// Reads a `multipart/byteranges` body (RFC 9110, 14.6) as it streams in: the answer to a
/// request for several ranges at once. Each part has its own `Content-Range`; its bytes
/// come out with the offset in the content they belong at, as slices of the buffers fed in
/// (no copy). The parts' lengths come from their `Content-Range`, so a boundary inside the
/// data is never looked for.
///
/// A plain value with no I/O, tested without sockets (`MultipartByterangesTests`).
///
/// ```
/// \r\n--BOUNDARY\r\n
/// Content-Type: application/octet-stream\r\n
/// Content-Range: bytes 0-2047/20972297\r\n
/// \r\n
/// <2048 bytes>\r\n--BOUNDARY\r\n
/// …
/// \r\n--BOUNDARY--\r\n
/// ```
struct MultipartByteranges: Sendable {
    /// The delimiter that starts each part: `--` and the boundary.
    private let delimiter: [UInt8]
    private var state: State = .seeking([])
    /// The content's size, as the parts' `Content-Range` say (each must say the same).
    private(set) var total: Int64?

    private enum State: Sendable {
        /// Looking for the next delimiter, in the bytes kept so far.
        case seeking([UInt8])
        /// After a delimiter: `--` ends the body, a line break starts a part's headers.
        case delimited([UInt8])
        /// A part's headers, up to the empty line.
        case headers([UInt8])
        /// A part's data: the next byte belongs at `offset`, `remaining` to come.
        case data(offset: Int64, remaining: Int64)
        /// The closing delimiter was read: what follows is ignored.
        case finished
    }

    /// The most bytes kept while looking for a delimiter or the end of a part's headers.
    static let headerLimit = 16 << 10

    /// A reader for a response whose `Content-Type` is `contentType`; `nil` when it is not
    /// `multipart/byteranges` with a boundary.
    init?(contentType: String) {
        let parameters = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let type = parameters.first, type.lowercased() == "multipart/byteranges" else { return nil }
        for parameter in parameters.dropFirst() {
            guard let equals = parameter.firstIndex(of: "="),
                parameter[..<equals].trimmingCharacters(in: .whitespaces).lowercased() == "boundary"
            else { continue }
            var value = parameter[parameter.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard !value.isEmpty, value.utf8.count <= 70 else { return nil }
            delimiter = Array("--\(value)".utf8)
            return
        }
        return nil
    }

    /// Whether the closing delimiter has been read.
    var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    /// Reads `buffer`, the next bytes of the body; returns the data it holds, each run with
    /// the offset in the content of its first byte.
    ///
    /// - Throws: ``DownloadError/Code/protocolViolation`` for a part without a valid
    ///   `Content-Range`, parts that disagree on the content's size, or headers (or bytes
    ///   between parts) longer than ``headerLimit``.
    mutating func read(_ buffer: ByteBuffer) throws(DownloadError) -> [(offset: Int64, bytes: ByteBuffer)] {
        var buffer = buffer
        var runs: [(offset: Int64, bytes: ByteBuffer)] = []
        while buffer.readableBytes > 0 {
            switch state {
            case .finished:
                return runs
            case .data(let offset, let remaining):
                let count = Int(min(Int64(buffer.readableBytes), remaining))
                runs.append((offset, buffer.readSlice(length: count)!))
                state = remaining == Int64(count) ? .seeking([]) : .data(offset: offset + Int64(count), remaining: remaining - Int64(count))
            case .seeking(var kept):
                kept += buffer.readBytes(length: 1)!
                if kept.count >= delimiter.count, kept.suffix(delimiter.count).elementsEqual(delimiter) {
                    state = .delimited([])
                } else {
                    guard kept.count <= Self.headerLimit else { throw Self.violation("no part delimiter where one was due") }
                    // Only the delimiter's length matters for the match.
                    if kept.count > 2 * delimiter.count { kept.removeFirst(kept.count - delimiter.count) }
                    state = .seeking(kept)
                }
            case .delimited(var kept):
                kept += buffer.readBytes(length: 1)!
                // (Transport padding, spaces or tabs, may follow a delimiter.)
                let text = Array(kept.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
                switch text {
                case Array("--".utf8):
                    state = .finished
                case Array("\r\n".utf8), Array("\n".utf8):
                    state = .headers([])
                case [], Array("-".utf8), Array("\r".utf8):
                    guard kept.count <= 256 else { throw Self.violation("a part delimiter is followed by too much padding") }
                    state = .delimited(kept)
                default:
                    throw Self.violation("a part delimiter is followed by neither a line break nor '--'")
                }
            case .headers(var kept):
                // Up to the end of the headers, or all of the buffer.
                let view = buffer.readableBytesView
                var taken = 0
                var ended = false
                for byte in view {
                    kept.append(byte)
                    taken += 1
                    if kept.count >= 2, kept.last == UInt8(ascii: "\n"),
                        kept.suffix(2).elementsEqual("\n\n".utf8) || kept.suffix(4).elementsEqual("\r\n\r\n".utf8)
                    {
                        ended = true
                        break
                    }
                }
                buffer.moveReaderIndex(forwardBy: taken)
                guard kept.count <= Self.headerLimit else { throw Self.violation("a part's headers are too long") }
                guard ended else {
                    state = .headers(kept)
                    continue
                }
                // A part that ends its headers without any (a bare line break) is the empty line.
                let range = try Self.contentRange(of: kept)
                if let total, total != range.total {
                    throw Self.violation("the parts disagree on the content's size (\(total), then \(range.total))")
                }
                total = range.total
                state =
                    range.upperBound > range.lowerBound
                    ? .data(offset: range.lowerBound, remaining: range.upperBound - range.lowerBound) : .seeking([])
            }
        }
        return runs
    }

    /// The `Content-Range` of a part's headers: where its bytes go, and the content's size.
    /// Read from the bytes (a delta download's answer has tens of thousands of parts).
    private static func contentRange(of headers: [UInt8]) throws(DownloadError) -> (
        lowerBound: Int64, upperBound: Int64, total: Int64
    ) {
        let name = Array("content-range".utf8)
        let found: Result<(Int64, Int64, Int64), DownloadError>? = headers.withUnsafeBufferPointer { headers in
            var start = 0
            while start < headers.count {
                var end = start
                while end < headers.count, headers[end] != UInt8(ascii: "\n"), headers[end] != UInt8(ascii: "\r") { end += 1 }
                defer { start = end + 1 }
                guard let colon = headers[start..<end].firstIndex(of: UInt8(ascii: ":")) else { continue }
                var nameEnd = colon
                while nameEnd > start, headers[nameEnd - 1] == UInt8(ascii: " ") || headers[nameEnd - 1] == UInt8(ascii: "\t") {
                    nameEnd -= 1
                }
                var nameStart = start
                while nameStart < nameEnd, headers[nameStart] == UInt8(ascii: " ") || headers[nameStart] == UInt8(ascii: "\t") {
                    nameStart += 1
                }
                guard nameEnd - nameStart == name.count,
                    zip(headers[nameStart..<nameEnd], name).allSatisfy({ $0 | 0x20 == $1 })
                else { continue }
                let value = UnsafeBufferPointer(rebasing: headers[(colon + 1)..<end])
                guard let parsed = ContentRange(bytes: value), let range = parsed.range, let total = parsed.total else {
                    return .failure(violation("a part has an invalid Content-Range: \(String(decoding: value, as: UTF8.self))"))
                }
                return .success((range.lowerBound, range.upperBound + 1, total))
            }
            return nil
        }
        switch found {
        case .success(let range): return (range.0, range.1, range.2)
        case .failure(let error): throw error
        case nil: throw violation("a part has no Content-Range")
        }
    }

    private static func violation(_ reason: String) -> DownloadError {
        DownloadError(.protocolViolation, "invalid multipart/byteranges answer: \(reason)")
    }
}
