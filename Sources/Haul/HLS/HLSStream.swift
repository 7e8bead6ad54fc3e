import Foundation

/// What makes a ``DownloadRequest`` the download of an HLS stream
/// (``DownloadRequest/stream``): the request's URL is a playlist (`.m3u8`, RFC 8216), and
/// its destination receives the stream as one playable file, as ``HLSDownloader`` writes it.
///
/// ```swift
/// var request = DownloadRequest(
///     url: URL(string: "https://example.com/show/master.m3u8")!,
///     destination: .file(URL(fileURLWithPath: "/videos/show.ts")))
/// request.stream = HLSStream(variant: .best)
/// let result = try await manager.download(request).result
/// print(result.fileURL!.path)   // /videos/show.ts
/// ```
///
/// Such a download is a job like any other: it is journaled (a service restarted, `haul
/// resume` or a worker goes on at the segments missing), paused, cancelled and reported
/// as one download, and it takes one of the manager's slots. Its segments are fetched as
/// that job's own connections, in parallel within the per-host caps.
public struct HLSStream: Sendable, Hashable {
    /// Which variant of a master playlist to download; ``HLSVariantChoice/best`` by
    /// default.
    public var variant: HLSVariantChoice
    /// Whether the chosen variant's audio, video and subtitle renditions are saved beside the file
    /// (see ``HLSOptions/renditions``).
    public var renditions: Bool
    /// The most media to record (see ``HLSOptions/maxDuration``); `nil` for all of it.
    public var maxDuration: Duration?

    /// Creates the options of a stream download.
    public init(variant: HLSVariantChoice = .best, renditions: Bool = false, maxDuration: Duration? = nil) {
        self.variant = variant
        self.renditions = renditions
        self.maxDuration = maxDuration
    }

    /// The options as text that ``init(encoded:)`` reads back (a journal row, a shared
    /// queue's column): a JSON object.
    package var encoded: String {
        var fields = [#""variant":"\#(variant.description)""#]
        if renditions { fields.append(#""renditions":true"#) }
        if let maxDuration { fields.append(#""maxDuration":\#(maxDuration.inSeconds)"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }

    /// The longest ``maxDuration`` the service and the journal take, in seconds (about 31
    /// years): a recording is not planned for longer.
    package static let longestDuration: Double = 1_000_000_000

    /// Reads ``encoded``; `nil` when the text is not such an object.
    package init?(encoded text: String) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
            let variantText = object["variant"] as? String, let variant = HLSVariantChoice(argument: variantText)
        else { return nil }
        self.variant = variant
        self.renditions = object["renditions"] as? Bool ?? false
        if let seconds = object["maxDuration"] as? Double {
            guard seconds > 0, seconds <= Self.longestDuration else { return nil }
            self.maxDuration = .seconds(seconds)
        } else {
            self.maxDuration = nil
        }
    }

    /// The file name a stream from `url` gets when its destination names none: the
    /// playlist's name without its extension (`show.m3u8` → `show`); the container's
    /// extension (`.ts`, `.mp4`) is added once the playlist is read.
    static func suggestedName(for url: URL) -> String {
        let last = url.lastPathComponent
        let stem = (last as NSString).deletingPathExtension
        return FileNaming.sanitize(stem) ?? "stream"
    }
}

extension HLSOptions {
    /// Options that download `stream` with `request`'s headers and priority.
    init(_ stream: HLSStream, for request: DownloadRequest) {
        self.init(
            variant: stream.variant, renditions: stream.renditions, maxDuration: stream.maxDuration,
            headers: request.headers, sensitiveHeaderNames: request.sensitiveHeaderNames, priority: request.priority)
    }
}
