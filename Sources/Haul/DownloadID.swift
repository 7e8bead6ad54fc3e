/// The caller's name for a download, unique among active downloads of a manager.
///
/// Adding a request whose ID matches an active download joins that download instead of
/// starting a second transfer (see ``DownloadManager/Configuration/duplicatePolicy``).
public struct DownloadID: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral, Codable
{
    /// The ID's text.
    public let rawValue: String

    /// Creates an ID from any text.
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(stringLiteral value: String) { self.rawValue = value }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    public static func < (lhs: DownloadID, rhs: DownloadID) -> Bool { lhs.rawValue < rhs.rawValue }
}
