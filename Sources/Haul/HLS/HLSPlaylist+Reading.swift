import Foundation

extension HLSPlaylist {
    /// The MIME types (lower-cased, without parameters) that identify an HLS playlist.
    static let contentTypes: Set<String> = [
        "application/vnd.apple.mpegurl",
        "application/x-mpegurl",
        "audio/mpegurl",
        "audio/x-mpegurl",
    ]

    /// Parses the text of a master or media playlist.
    ///
    /// - Parameters:
    ///   - text: The playlist. Lines may end with LF or CRLF; a leading byte order mark is ignored.
    ///   - url: The URL the playlist was (finally, after redirects) loaded from; relative URIs
    ///     are resolved against it.
    /// - Returns: `.master` if the playlist has `EXT-X-STREAM-INF` (or only other master-playlist
    ///   tags and no segments), `.media` otherwise.
    /// - Throws: ``HLSPlaylistError`` with the offending line when the playlist is malformed.
    ///
    /// Runs in time linear in the size of `text` and never traps, whatever the input.
    static func parse(_ text: String, url: URL) throws(HLSPlaylistError) -> HLSPlaylist {
        var reader = HLSPlaylistReader(baseURL: url)
        return try reader.read(text)
    }

    /// Whether a response looks like an HLS playlist: its content type is one of the HLS MIME
    /// types (case-insensitive, parameters ignored), or its body starts with `#EXTM3U`
    /// (after an optional UTF-8 byte order mark).
    static func looksLikePlaylist(contentType: String?, firstBytes: some Collection<UInt8>) -> Bool {
        if let contentType {
            let essence = contentType.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)
                .first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            if contentTypes.contains(essence) { return true }
        }
        let byteOrderMark: [UInt8] = [0xEF, 0xBB, 0xBF]
        let header = Array("#EXTM3U".utf8)
        var prefix = Array(firstBytes.prefix(byteOrderMark.count + header.count))
        if prefix.starts(with: byteOrderMark) { prefix.removeFirst(byteOrderMark.count) }
        return prefix.starts(with: header)
    }
}

/// The line-by-line state machine behind ``HLSPlaylist/parse(_:url:)``.
///
/// Tags that apply to the next segment (`EXTINF`, `EXT-X-BYTERANGE`, `EXT-X-DISCONTINUITY`,
/// `EXT-X-PROGRAM-DATE-TIME`) or the next variant (`EXT-X-STREAM-INF`) are held as pending
/// until the URI line that follows them; keys and maps stay in effect until replaced.
private struct HLSPlaylistReader {
    /// An `EXTINF` waiting for its URI line.
    struct PendingSegment {
        var duration: Double
        var title: String?
        var line: Int
    }

    /// An `EXT-X-BYTERANGE` waiting for its URI line.
    struct PendingByteRange {
        var length: Int
        var offset: Int?
        var line: Int
    }

    /// An `EXT-X-STREAM-INF` waiting for its URI line (its `url` is a placeholder until then).
    struct PendingVariant {
        var variant: HLSVariant
        var line: Int
    }

    /// The URL relative URIs are resolved against.
    let baseURL: URL
    /// The 1-based number of the line being processed.
    var lineNumber = 0

    // Playlist kind.
    var firstStreamInfLine: Int?
    var firstSegmentLine: Int?
    var sawMasterOnlyTag = false

    // Media playlist state.
    var targetDuration: Int?
    var mediaSequence = 0
    var mediaSequenceLine = 0
    var discontinuitySequence = 0
    var discontinuitySequenceLine = 0
    var hasEndList = false
    var playlistType: HLSMediaPlaylist.PlaylistType?
    var independentSegments = false
    var segments: [HLSSegment] = []
    var pendingSegment: PendingSegment?
    var pendingByteRange: PendingByteRange?
    var pendingDiscontinuity = false
    var pendingProgramDateTime: String?
    var currentKey: HLSKey?
    /// The `KEYFORMAT` of the key chosen from the current run of `EXT-X-KEY` tags.
    var currentKeyFormat = HLSKey.identityKeyFormat
    /// Whether an `EXT-X-KEY` was seen since the last segment URI (so the next one joins the same run).
    var keyRunOpen = false
    var currentMap: HLSMap?

    // Master playlist state.
    var variants: [HLSVariant] = []
    var renditions: [HLSRendition] = []
    var sessionKeys: [HLSKey] = []
    var pendingVariant: PendingVariant?

    /// Creates a reader resolving URIs against `baseURL`.
    init(baseURL: URL) {
        self.baseURL = baseURL
    }

    /// An error at the current line.
    func failure(_ reason: String) -> HLSPlaylistError {
        HLSPlaylistError(line: lineNumber, reason: reason)
    }

    /// Runs `body`, attaching the current line number to any attribute-level error it throws.
    func atCurrentLine<T>(_ body: () throws(HLSAttributeList.ParseError) -> T) throws(HLSPlaylistError) -> T {
        do throws(HLSAttributeList.ParseError) {
            return try body()
        } catch {
            throw failure(error.reason)
        }
    }

    /// Splits `text` into lines (LF or CRLF), trims them, skips blank ones, checks the `#EXTM3U`
    /// header and dispatches tags and URI lines; then assembles the playlist.
    mutating func read(_ text: String) throws(HLSPlaylistError) -> HLSPlaylist {
        let bytes = Array(text.utf8)
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D }
        var lineStart = 0
        var lineIndex = 0
        var sawHeader = false
        while lineStart <= bytes.count {
            var lineEnd = lineStart
            while lineEnd < bytes.count, bytes[lineEnd] != 0x0A { lineEnd += 1 }
            lineIndex += 1
            var start = lineStart, end = lineEnd
            lineStart = lineEnd + 1
            if lineIndex == 1, end - start >= 3, bytes[start] == 0xEF, bytes[start + 1] == 0xBB, bytes[start + 2] == 0xBF {
                start += 3
            }
            while start < end, isSpace(bytes[start]) { start += 1 }
            while end > start, isSpace(bytes[end - 1]) { end -= 1 }
            guard start < end else { continue }

            lineNumber = lineIndex
            let line = String(decoding: bytes[start..<end], as: UTF8.self)
            if !sawHeader {
                guard line == "#EXTM3U" || line.hasPrefix("#EXTM3U ") || line.hasPrefix("#EXTM3U\t") else {
                    throw failure("playlist does not start with #EXTM3U")
                }
                sawHeader = true
            } else if line.hasPrefix("#EXT") {
                try handleTag(line)
            } else if !line.hasPrefix("#") {
                try handleURI(line)
            }
            // Anything else starting with "#" is a comment.
        }
        guard sawHeader else {
            throw HLSPlaylistError(line: 1, reason: "empty playlist (no #EXTM3U)")
        }
        return try finish()
    }

    /// Dispatches one tag line (starting with `#EXT`); unknown tags are ignored.
    mutating func handleTag(_ line: String) throws(HLSPlaylistError) {
        let name: Substring
        let value: Substring?
        if let colon = line.firstIndex(of: ":") {
            name = line[..<colon]
            value = line[line.index(after: colon)...]
        } else {
            name = line[...]
            value = nil
        }
        switch name {
        case "#EXTINF":
            try handleSegmentInfo(value)
        case "#EXT-X-TARGETDURATION":
            targetDuration = try requiredValue(value, of: name) { text throws(HLSAttributeList.ParseError) in
                if let integer = HLSAttributeList.decimalInteger(text) { return integer }
                // Tolerate a decimal target duration by rounding it up.
                if let seconds = HLSAttributeList.decimalFloat(text, allowNegative: false), seconds <= Double(Int32.max) {
                    return Int(seconds.rounded(.up))
                }
                throw HLSAttributeList.ParseError(reason: "invalid EXT-X-TARGETDURATION '\(text)'")
            }
        case "#EXT-X-MEDIA-SEQUENCE":
            mediaSequence = try requiredInteger(value, of: name)
            mediaSequenceLine = lineNumber
        case "#EXT-X-DISCONTINUITY-SEQUENCE":
            discontinuitySequence = try requiredInteger(value, of: name)
            discontinuitySequenceLine = lineNumber
        case "#EXT-X-ENDLIST":
            hasEndList = true
        case "#EXT-X-PLAYLIST-TYPE":
            // Unknown values are ignored rather than rejected.
            playlistType = value.flatMap { HLSMediaPlaylist.PlaylistType(rawValue: String($0)) }
        case "#EXT-X-INDEPENDENT-SEGMENTS":
            independentSegments = true
        case "#EXT-X-BYTERANGE":
            let range = try requiredValue(value, of: name) { text throws(HLSAttributeList.ParseError) in
                try Self.byteRange(text)
            }
            pendingByteRange = PendingByteRange(length: range.length, offset: range.offset, line: lineNumber)
        case "#EXT-X-DISCONTINUITY":
            pendingDiscontinuity = true
        case "#EXT-X-PROGRAM-DATE-TIME":
            pendingProgramDateTime = value.map(String.init)
        case "#EXT-X-KEY":
            try handleKey(value)
        case "#EXT-X-MAP":
            let attributes = try attributeList(value)
            let baseURL = baseURL
            currentMap = try atCurrentLine { () throws(HLSAttributeList.ParseError) in
                try Self.map(from: attributes, baseURL: baseURL)
            }
        case "#EXT-X-STREAM-INF":
            try handleStreamInf(value)
        case "#EXT-X-MEDIA":
            sawMasterOnlyTag = true
            let attributes = try attributeList(value)
            let baseURL = baseURL
            if let rendition = try atCurrentLine({ () throws(HLSAttributeList.ParseError) in
                try Self.rendition(from: attributes, baseURL: baseURL)
            }) {
                renditions.append(rendition)
            }
        case "#EXT-X-SESSION-KEY":
            sawMasterOnlyTag = true
            let attributes = try attributeList(value)
            let baseURL = baseURL
            let (key, _) = try atCurrentLine { () throws(HLSAttributeList.ParseError) in
                try Self.key(from: attributes, baseURL: baseURL)
            }
            if let key { sessionKeys.append(key) }
        case "#EXT-X-I-FRAME-STREAM-INF", "#EXT-X-SESSION-DATA":
            // I-frame-only streams are not playable variants; session data is not modelled.
            sawMasterOnlyTag = true
        default:
            break
        }
    }

    /// Handles `EXTINF:<duration>[,<title>]`.
    mutating func handleSegmentInfo(_ value: Substring?) throws(HLSPlaylistError) {
        if let pendingSegment {
            throw HLSPlaylistError(line: pendingSegment.line, reason: "EXTINF without a URI")
        }
        if let firstStreamInfLine {
            throw failure("EXTINF in a playlist that has EXT-X-STREAM-INF (line \(firstStreamInfLine))")
        }
        guard let value else { throw failure("EXTINF without a duration") }
        let durationText: Substring
        var title: String?
        if let comma = value.firstIndex(of: ",") {
            durationText = value[..<comma]
            let rawTitle = value[value.index(after: comma)...].trimmingCharacters(in: .whitespaces)
            title = rawTitle.isEmpty ? nil : rawTitle
        } else {
            durationText = value
        }
        let trimmedDuration = durationText.trimmingCharacters(in: .whitespaces)
        guard let duration = HLSAttributeList.decimalFloat(trimmedDuration, allowNegative: false) else {
            throw failure("invalid EXTINF duration '\(trimmedDuration)' (expected a non-negative number)")
        }
        pendingSegment = PendingSegment(duration: duration, title: title, line: lineNumber)
        if firstSegmentLine == nil { firstSegmentLine = lineNumber }
    }

    /// Handles `EXT-X-STREAM-INF:<attribute-list>`; the variant is completed by the next URI line.
    mutating func handleStreamInf(_ value: Substring?) throws(HLSPlaylistError) {
        if let pendingVariant {
            throw HLSPlaylistError(line: pendingVariant.line, reason: "EXT-X-STREAM-INF without a URI")
        }
        if let firstSegmentLine {
            throw failure("EXT-X-STREAM-INF in a playlist that has EXTINF (line \(firstSegmentLine))")
        }
        if firstStreamInfLine == nil { firstStreamInfLine = lineNumber }
        let attributes = try attributeList(value)
        let baseURL = baseURL
        let variant = try atCurrentLine { () throws(HLSAttributeList.ParseError) in
            try Self.variant(from: attributes, placeholderURL: baseURL)
        }
        pendingVariant = PendingVariant(variant: variant, line: lineNumber)
    }

    /// Handles `EXT-X-KEY`. Within a run of key tags before the same segment (one per KEYFORMAT),
    /// the `identity` key wins if present, otherwise the first one; a new run replaces the old key.
    mutating func handleKey(_ value: Substring?) throws(HLSPlaylistError) {
        let attributes = try attributeList(value)
        let baseURL = baseURL
        let (key, keyFormat) = try atCurrentLine { () throws(HLSAttributeList.ParseError) in
            try Self.key(from: attributes, baseURL: baseURL)
        }
        if !keyRunOpen {
            keyRunOpen = true
            currentKey = key
            currentKeyFormat = keyFormat
        } else if currentKeyFormat != HLSKey.identityKeyFormat, keyFormat == HLSKey.identityKeyFormat {
            currentKey = key
            currentKeyFormat = keyFormat
        }
    }

    /// Handles a URI line: completes the pending variant or the pending segment.
    mutating func handleURI(_ line: String) throws(HLSPlaylistError) {
        let baseURL = baseURL
        let url = try atCurrentLine { () throws(HLSAttributeList.ParseError) in
            try Self.resolve(line, against: baseURL)
        }
        if var pending = pendingVariant {
            pending.variant.url = url
            variants.append(pending.variant)
            pendingVariant = nil
            return
        }
        guard let info = pendingSegment else {
            throw failure("URI without a preceding EXTINF or EXT-X-STREAM-INF")
        }

        var byteRange: HLSByteRange?
        if let pendingRange = pendingByteRange {
            let offset: Int
            if let explicit = pendingRange.offset {
                offset = explicit
            } else if let previous = segments.last, let previousRange = previous.byteRange, previous.url == url {
                offset = previousRange.end
            } else {
                throw HLSPlaylistError(
                    line: pendingRange.line,
                    reason: "EXT-X-BYTERANGE without an offset, but the previous segment is not a sub-range of the same resource"
                )
            }
            guard !offset.addingReportingOverflow(pendingRange.length).overflow else {
                throw HLSPlaylistError(line: pendingRange.line, reason: "EXT-X-BYTERANGE is too large")
            }
            byteRange = HLSByteRange(offset: offset, length: pendingRange.length)
        }

        segments.append(HLSSegment(
            url: url,
            duration: info.duration,
            title: info.title,
            sequenceNumber: 0,  // assigned in finish(), once EXT-X-MEDIA-SEQUENCE is surely known
            byteRange: byteRange,
            discontinuity: pendingDiscontinuity,
            discontinuitySequence: 0,  // likewise
            key: currentKey,
            map: currentMap,
            programDateTime: pendingProgramDateTime
        ))
        pendingSegment = nil
        pendingByteRange = nil
        pendingDiscontinuity = false
        pendingProgramDateTime = nil
        keyRunOpen = false
    }

    /// Checks for dangling tags and builds the master or media playlist.
    mutating func finish() throws(HLSPlaylistError) -> HLSPlaylist {
        if let pendingSegment {
            throw HLSPlaylistError(line: pendingSegment.line, reason: "EXTINF without a URI")
        }
        if let pendingVariant {
            throw HLSPlaylistError(line: pendingVariant.line, reason: "EXT-X-STREAM-INF without a URI")
        }
        if firstStreamInfLine != nil || (segments.isEmpty && sawMasterOnlyTag) {
            return .master(HLSMasterPlaylist(
                variants: variants,
                renditions: renditions,
                sessionKeys: sessionKeys,
                independentSegments: independentSegments
            ))
        }

        if let firstSegmentLine, targetDuration == nil {
            throw HLSPlaylistError(line: firstSegmentLine, reason: "media playlist without EXT-X-TARGETDURATION")
        }
        var discontinuityNumber = discontinuitySequence
        for index in segments.indices {
            let (sequenceNumber, overflow) = mediaSequence.addingReportingOverflow(index)
            guard !overflow else {
                throw HLSPlaylistError(line: mediaSequenceLine, reason: "EXT-X-MEDIA-SEQUENCE is too large")
            }
            segments[index].sequenceNumber = sequenceNumber
            if segments[index].discontinuity {
                let (next, overflow) = discontinuityNumber.addingReportingOverflow(1)
                guard !overflow else {
                    throw HLSPlaylistError(line: discontinuitySequenceLine, reason: "EXT-X-DISCONTINUITY-SEQUENCE is too large")
                }
                discontinuityNumber = next
            }
            segments[index].discontinuitySequence = discontinuityNumber
        }
        return .media(HLSMediaPlaylist(
            targetDuration: targetDuration ?? 0,
            mediaSequence: mediaSequence,
            discontinuitySequence: discontinuitySequence,
            hasEndList: hasEndList,
            playlistType: playlistType,
            segments: segments,
            independentSegments: independentSegments
        ))
    }

    // MARK: Value helpers

    /// Parses a tag's attribute list (an absent value is an empty list).
    func attributeList(_ value: Substring?) throws(HLSPlaylistError) -> HLSAttributeList {
        try atCurrentLine { () throws(HLSAttributeList.ParseError) in
            try HLSAttributeList(parsing: value ?? "")
        }
    }

    /// Converts a tag's required value with `convert`, failing at the current line if absent or invalid.
    func requiredValue<T>(
        _ value: Substring?,
        of tag: Substring,
        _ convert: (String) throws(HLSAttributeList.ParseError) -> T
    ) throws(HLSPlaylistError) -> T {
        let text = value?.trimmingCharacters(in: .whitespaces) ?? ""
        guard !text.isEmpty else { throw failure("\(tag.dropFirst()) without a value") }
        return try atCurrentLine { () throws(HLSAttributeList.ParseError) in try convert(text) }
    }

    /// A tag's required decimal-integer value.
    func requiredInteger(_ value: Substring?, of tag: Substring) throws(HLSPlaylistError) -> Int {
        try requiredValue(value, of: tag) { text throws(HLSAttributeList.ParseError) in
            guard let integer = HLSAttributeList.decimalInteger(text) else {
                throw HLSAttributeList.ParseError(reason: "invalid \(tag.dropFirst()) '\(text)'")
            }
            return integer
        }
    }

    /// Resolves a URI against the playlist URL, yielding an absolute URL.
    static func resolve(_ uri: String, against baseURL: URL) throws(HLSAttributeList.ParseError) -> URL {
        guard let url = URL(string: uri, relativeTo: baseURL) else {
            throw HLSAttributeList.ParseError(reason: "cannot resolve URI '\(uri)'")
        }
        return url.absoluteURL
    }

    /// Parses `<length>[@<offset>]`.
    static func byteRange(_ text: String) throws(HLSAttributeList.ParseError) -> (length: Int, offset: Int?) {
        let parts = text.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false)
        guard let length = HLSAttributeList.decimalInteger(parts[0]) else {
            throw HLSAttributeList.ParseError(reason: "invalid byte range '\(text)'")
        }
        guard parts.count == 2 else { return (length, nil) }
        guard let offset = HLSAttributeList.decimalInteger(parts[1]) else {
            throw HLSAttributeList.ParseError(reason: "invalid byte range '\(text)'")
        }
        return (length, offset)
    }

    /// Builds an `EXT-X-MAP` initialization section; a `BYTERANGE` without an offset starts at 0.
    static func map(from attributes: HLSAttributeList, baseURL: URL) throws(HLSAttributeList.ParseError) -> HLSMap {
        guard let uri = attributes.string("URI") else {
            throw HLSAttributeList.ParseError(reason: "EXT-X-MAP without URI")
        }
        var map = HLSMap(url: try resolve(uri, against: baseURL))
        if let rangeText = attributes.string("BYTERANGE") {
            let (length, offset) = try byteRange(rangeText)
            let start = offset ?? 0
            guard !start.addingReportingOverflow(length).overflow else {
                throw HLSAttributeList.ParseError(reason: "EXT-X-MAP BYTERANGE is too large")
            }
            map.byteRange = HLSByteRange(offset: start, length: length)
        }
        return map
    }

    /// Builds a key from `EXT-X-KEY` / `EXT-X-SESSION-KEY` attributes. Returns a nil key for
    /// `METHOD=NONE`, together with the `KEYFORMAT` (default `identity`).
    static func key(
        from attributes: HLSAttributeList,
        baseURL: URL
    ) throws(HLSAttributeList.ParseError) -> (key: HLSKey?, keyFormat: String) {
        guard let methodText = attributes.string("METHOD") else {
            throw HLSAttributeList.ParseError(reason: "key without METHOD")
        }
        let keyFormat = attributes.string("KEYFORMAT") ?? HLSKey.identityKeyFormat
        if methodText == "NONE" { return (nil, keyFormat) }

        var key = HLSKey(method: HLSKey.Method(attributeValue: methodText), keyFormat: keyFormat)
        if let uri = attributes.string("URI") {
            key.url = try resolve(uri, against: baseURL)
        } else if key.method == .aes128 {
            throw HLSAttributeList.ParseError(reason: "METHOD=AES-128 without URI")
        }
        if attributes["IV"] != nil {
            guard let iv = try? attributes.hexBytes("IV"), iv.count == 16 else {
                throw HLSAttributeList.ParseError(reason: "IV must be 0x followed by 32 hexadecimal digits")
            }
            key.iv = iv
        }
        key.keyFormatVersions = attributes.string("KEYFORMATVERSIONS")
        return (key, keyFormat)
    }

    /// Builds a variant from `EXT-X-STREAM-INF` attributes, with `placeholderURL` until its URI line is read.
    static func variant(
        from attributes: HLSAttributeList,
        placeholderURL: URL
    ) throws(HLSAttributeList.ParseError) -> HLSVariant {
        guard let bandwidth = try attributes.integer("BANDWIDTH") else {
            throw HLSAttributeList.ParseError(reason: "EXT-X-STREAM-INF without BANDWIDTH")
        }
        var closedCaptions: String?
        if let attribute = attributes.attribute("CLOSED-CAPTIONS"), attribute.isQuoted || attribute.value != "NONE" {
            closedCaptions = attribute.value
        }
        return HLSVariant(
            url: placeholderURL,
            bandwidth: bandwidth,
            averageBandwidth: try attributes.integer("AVERAGE-BANDWIDTH"),
            codecs: attributes.string("CODECS"),
            resolution: try attributes.resolution("RESOLUTION"),
            frameRate: try attributes.decimal("FRAME-RATE"),
            audioGroup: attributes.string("AUDIO"),
            videoGroup: attributes.string("VIDEO"),
            subtitlesGroup: attributes.string("SUBTITLES"),
            closedCaptions: closedCaptions
        )
    }

    /// Builds a rendition from `EXT-X-MEDIA` attributes; nil for an unknown `TYPE` (ignored).
    static func rendition(
        from attributes: HLSAttributeList,
        baseURL: URL
    ) throws(HLSAttributeList.ParseError) -> HLSRendition? {
        guard let typeText = attributes.string("TYPE") else {
            throw HLSAttributeList.ParseError(reason: "EXT-X-MEDIA without TYPE")
        }
        guard let type = HLSRendition.MediaType(rawValue: typeText) else { return nil }
        guard let groupID = attributes.string("GROUP-ID") else {
            throw HLSAttributeList.ParseError(reason: "EXT-X-MEDIA without GROUP-ID")
        }
        guard let name = attributes.string("NAME") else {
            throw HLSAttributeList.ParseError(reason: "EXT-X-MEDIA without NAME")
        }
        var url: URL?
        if type != .closedCaptions, let uri = attributes.string("URI") {
            url = try resolve(uri, against: baseURL)
        }
        return HLSRendition(
            type: type,
            groupID: groupID,
            name: name,
            language: attributes.string("LANGUAGE"),
            url: url,
            isDefault: attributes.flag("DEFAULT"),
            autoselect: attributes.flag("AUTOSELECT")
        )
    }
}
