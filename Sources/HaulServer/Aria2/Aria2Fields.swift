import Foundation
import Haul

/// The objects aria2's status methods answer with, built from a download's view: pure, so
/// their shape is tested without a service.
package enum Aria2Fields {
    /// aria2's piece size for HTTP downloads (1 MiB): `pieceLength`, `numPieces` and the
    /// `bitfield` are reckoned in it.
    package static let pieceLength: Int64 = 1 << 20

    /// `tellStatus`'s object, with only `keys` when given (unknown keys are left out, as
    /// aria2 does). `uris` are the download's URIs, its own first, then its mirrors.
    package static func status(_ view: DownloadView, uris: [String], keys: Set<String>? = nil) -> JSONValue {
        let status = Aria2Status(view.state)
        let total = status == .complete ? view.bytes : (view.totalBytes ?? 0)
        let completed = min(view.bytes, total == 0 ? view.bytes : total)
        let pieces = total > 0 ? (total + pieceLength - 1) / pieceLength : 0
        var fields: [String: JSONValue] = [
            "gid": .string(Aria2GID(.init(view.id)).hex),
            "status": .string(status.rawValue),
            "totalLength": .number(total),
            "completedLength": .number(completed),
            "uploadLength": "0",
            "downloadSpeed": .number(status == .active ? Int64(view.bytesPerSecond) : 0),
            "uploadSpeed": "0",
            "connections": .number(status == .active ? view.connections : 0),
            "pieceLength": .number(pieceLength),
            "numPieces": .number(pieces),
            "dir": .string(PathText.directory(of: view.destination)),
            "files": files(view, uris: uris),
        ]
        if pieces > 0 { fields["bitfield"] = .string(bitfield(completed: completed, total: total)) }
        if status.isStopped {
            fields["errorCode"] = .number(Aria2ExitStatus.number(code: status == .complete ? nil : view.errorCode ?? "cancelled", message: view.error))
            fields["errorMessage"] = .string(status == .complete ? "" : view.error ?? (status == .removed ? "Removed" : ""))
        }
        if let keys { fields = fields.filter { keys.contains($0.key) } }
        return .object(fields)
    }

    /// `getFiles`: one file per download.
    package static func files(_ view: DownloadView, uris: [String]) -> JSONValue {
        let status = Aria2Status(view.state)
        let total = status == .complete ? view.bytes : (view.totalBytes ?? 0)
        return [
            [
                "index": "1",
                "path": .string(view.destination),
                "length": .number(total),
                "completedLength": .number(min(view.bytes, total == 0 ? view.bytes : total)),
                "selected": "true",
                "uris": Self.uris(view, uris: uris),
            ]
        ]
    }

    /// `getUris`: the first URI is `used` once the download has started, the rest (mirrors
    /// Haul keeps but does not fetch from) are `waiting`.
    package static func uris(_ view: DownloadView, uris: [String]) -> JSONValue {
        let started = view.bytes > 0 || view.state == .running || !view.state.isUnfinished
        return .array(
            uris.enumerated().map { index, uri in
                ["uri": .string(uri), "status": .string(index == 0 && started ? "used" : "waiting")]
            })
    }

    /// `getServers` of an active download.
    package static func servers(_ view: DownloadView) -> JSONValue {
        [
            [
                "index": "1",
                "servers": [
                    [
                        "uri": .string(view.url), "currentUri": .string(view.url),
                        "downloadSpeed": .number(Int64(view.bytesPerSecond)),
                    ]
                ],
            ]
        ]
    }

    /// aria2's bitfield: a bit per piece, highest bit first, as hex. Haul knows how many
    /// bytes are done, not which: the first `completed / pieceLength` pieces are marked.
    package static func bitfield(completed: Int64, total: Int64) -> String {
        let pieces = Int((total + pieceLength - 1) / pieceLength)
        let done = completed >= total ? pieces : Int(completed / pieceLength)
        var bytes = [UInt8](repeating: 0, count: (pieces + 7) / 8)
        for piece in 0..<done { bytes[piece / 8] |= 0x80 >> UInt8(piece % 8) }
        return bytes.map { $0 < 16 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }
}
