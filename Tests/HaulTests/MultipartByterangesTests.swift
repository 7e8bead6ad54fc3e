import NIOCore
import Testing

@testable import Haul

/// The `multipart/byteranges` reader, fed the bodies servers send, whole and in pieces.
@Suite("multipart/byteranges (rules)")
struct MultipartByterangesTests {
    static let content: [UInt8] = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 / 251) }

    /// A body as nginx writes it (a line break before the first delimiter), with `newline`.
    static func body(_ ranges: [Range<Int>], boundary: String = "00000000000000000001", newline: String = "\r\n")
        -> [UInt8]
    {
        var bytes: [UInt8] = []
        for range in ranges {
            bytes += Array("\(newline)--\(boundary)\(newline)".utf8)
            bytes += Array("Content-Type: application/octet-stream\(newline)".utf8)
            bytes += Array("Content-Range: bytes \(range.lowerBound)-\(range.upperBound - 1)/\(content.count)\(newline)\(newline)".utf8)
            bytes += content[range]
        }
        return bytes + Array("\(newline)--\(boundary)--\(newline)".utf8)
    }

    /// Reads `body` in pieces of `sizes` (cycled) and puts the runs where they belong.
    static func read(_ body: [UInt8], reader: inout MultipartByteranges, sizes: [Int]) throws -> [Int: UInt8] {
        var placed: [Int: UInt8] = [:]
        var start = 0
        var turn = 0
        while start < body.count {
            let end = min(body.count, start + sizes[turn % sizes.count])
            for run in try reader.read(ByteBuffer(bytes: body[start..<end])) {
                for (index, byte) in run.bytes.readableBytesView.enumerated() {
                    #expect(placed[Int(run.offset) + index] == nil, "byte \(Int(run.offset) + index) came twice")
                    placed[Int(run.offset) + index] = byte
                }
            }
            start = end
            turn += 1
        }
        return placed
    }

    @Test(arguments: [[1 << 20], [1], [2, 3, 5, 7, 11, 13, 1000], [37]])
    func everyPartsBytesComeOutAtTheirOffsets(sizes: [Int]) throws {
        let ranges = [0..<2048, 4096..<4099, 6000..<10_000]
        var reader = try #require(MultipartByteranges(contentType: "multipart/byteranges; boundary=00000000000000000001"))
        let placed = try Self.read(Self.body(ranges), reader: &reader, sizes: sizes)
        #expect(placed.count == ranges.reduce(0) { $0 + $1.count })
        for range in ranges {
            for offset in range { #expect(placed[offset] == Self.content[offset]) }
        }
        #expect(reader.isFinished)
        #expect(reader.total == Int64(Self.content.count))
    }

    @Test func aQuotedBoundaryAndBareLineFeedsAreRead() throws {
        var reader = try #require(MultipartByteranges(contentType: #"Multipart/Byteranges; charset=x; boundary="a b""#))
        let placed = try Self.read(Self.body([10..<20, 30..<31], boundary: "a b", newline: "\n"), reader: &reader, sizes: [3])
        #expect(placed.keys.sorted() == Array(10..<20) + [30])
        #expect(reader.isFinished)
    }

    @Test(arguments: ["application/octet-stream", "multipart/byteranges", "multipart/mixed; boundary=x"])
    func otherContentTypesAreNotRead(contentType: String) {
        #expect(MultipartByteranges(contentType: contentType) == nil)
    }

    @Test(arguments: [
        ("--B\r\nContent-Type: x\r\n\r\nabc", "no Content-Range"),
        ("--B\r\nContent-Range: bytes 0-1/2\r\n\r\nab\r\n--B\r\nContent-Range: bytes 0-1/3\r\n\r\n", "disagree"),
        ("--B\r\nContent-Range: bytes 5-1/9\r\n\r\n", "invalid Content-Range"),
        ("--Bx", "neither a line break"),
    ])
    func aBadBodyIsAProtocolViolation(body: String, reason: String) throws {
        var reader = try #require(MultipartByteranges(contentType: "multipart/byteranges; boundary=B"))
        let error = #expect(throws: DownloadError.self) { _ = try reader.read(ByteBuffer(string: body)) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.message.contains(reason) == true, "\(String(describing: error))")
    }
}
