import Crypto
package import Haul

/// A download's aria2 GID: 16 lowercase hex digits, the first 8 bytes of the SHA-256 of its
/// ``DownloadID``. Derived, never stored, so it is the same after every restart of the
/// service, and the same in every service that holds the download.
package struct Aria2GID: Hashable, Sendable, Comparable, CustomStringConvertible {
    package let hex: String

    package init(_ id: DownloadID) {
        let digest = SHA256.hash(data: Array(id.rawValue.utf8))
        hex = digest.prefix(8).map { byte in
            let text = String(byte, radix: 16)
            return byte < 16 ? "0" + text : text
        }.joined()
    }

    package var description: String { hex }

    package static func < (lhs: Aria2GID, rhs: Aria2GID) -> Bool { lhs.hex < rhs.hex }
}

/// Finds downloads by GID or by a unique prefix of one, as aria2 does.
///
/// ```swift
/// var index = Aria2GIDIndex()
/// let gid = index.insert("https://example.com/a.iso")
/// index.lookup(String(gid.hex.prefix(4)))  // .success("https://example.com/a.iso")
/// ```
package struct Aria2GIDIndex: Sendable {
    private var ids: [String: DownloadID] = [:]

    package init() {}

    package var count: Int { ids.count }

    /// Adds `id`; returns its GID.
    @discardableResult
    package mutating func insert(_ id: DownloadID) -> Aria2GID {
        let gid = Aria2GID(id)
        if ids[gid.hex] == nil { ids[gid.hex] = id }
        return gid
    }

    package mutating func remove(_ id: DownloadID) {
        let gid = Aria2GID(id)
        if ids[gid.hex] == id { ids[gid.hex] = nil }
    }

    /// Whether `text` could name a GID at all: 1 to 16 hex digits.
    package static func isValid(_ text: String) -> Bool {
        (1...16).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            (48...57).contains(byte) || (97...102).contains(byte) || (65...70).contains(byte)
        }
    }

    /// The download `text` names: a whole GID or a prefix that only one GID has. The errors
    /// are aria2's: `Invalid GID x`, `GID x is not found`, `GID x is not unique`.
    package func lookup(_ text: String) -> Result<DownloadID, Aria2Error> {
        guard Self.isValid(text) else { return .failure(Aria2Error("Invalid GID \(text)")) }
        let wanted = text.lowercased()
        if wanted.utf8.count == 16 {
            return ids[wanted].map { .success($0) } ?? .failure(Aria2Error("GID \(text) is not found"))
        }
        var found: DownloadID?
        for (gid, id) in ids where gid.hasPrefix(wanted) {
            guard found == nil else { return .failure(Aria2Error("GID \(text) is not unique")) }
            found = id
        }
        return found.map { .success($0) } ?? .failure(Aria2Error("GID \(text) is not found"))
    }
}
