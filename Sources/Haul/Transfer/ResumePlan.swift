/// The resume rules, as a plain value with no I/O: what to ask for, and what to do with
/// the answer.
///
/// - A partial with a validator is resumed with `Range: bytes=N-` and `If-Range`.
/// - A partial without one restarts from zero, unless blind resume is allowed.
/// - A segment of a split download asks for its range alone (`Range: bytes=N-M`), under
///   the validator the content was fetched under; its answer is judged by the same rules.
/// - A 206 is accepted only when its `Content-Range` starts at the requested offset and
///   (with an ETag) the ETag is the one we hold.
/// - A 200 means the content changed or the server ignores ranges: start from zero.
/// - A 416 on a partial that already holds the whole content is done.
/// - With nothing to resume, a request may revalidate the completed file of an earlier run
///   (`If-None-Match`, else `If-Modified-Since`), or a cached response with the conditions
///   the cache rules give: a 304 means it is still current.
struct ResumePlan: Hashable, Sendable {
    /// The byte the request asks to start at; 0 asks for everything.
    let offset: Int64
    /// Where the range asked for ends (exclusive), for a segment; `nil`: the content's end.
    let end: Int64?
    /// The validator sent in `If-Range`, if any.
    let validator: Validator?
    /// The full size recorded with the partial, if known.
    let knownTotal: Int64?
    /// The validator of a completed file to revalidate, for a request from byte 0.
    var revalidating: Validator?
    /// The conditional header fields that revalidate a cached response (see
    /// ``CacheRules/Lookup/revalidate(_:)``), for a request from byte 0 that revalidates
    /// no completed file.
    var conditions: [HeaderField] = []

    /// A plan that asks for the whole content.
    static let fresh = ResumePlan(offset: 0, validator: nil, knownTotal: nil)

    init(offset: Int64, validator: Validator?, knownTotal: Int64?) {
        self.offset = offset
        self.end = nil
        self.validator = validator
        self.knownTotal = knownTotal
    }

    /// A plan that asks for `range` of a content of `total` bytes (a segment), under
    /// `validator` (`nil`: a mirror's first request, whose size is checked).
    init(range: Range<Int64>, validator: Validator?, total: Int64) {
        self.offset = range.lowerBound
        self.end = range.upperBound
        self.validator = validator
        self.knownTotal = total
    }

    /// Plans the next request for a partial file of `existingBytes` bytes.
    init(existingBytes: Int64, stored: PartialMetadata?, allowsBlindResume: Bool) {
        guard existingBytes > 0 else {
            self = .fresh
            return
        }
        if let validator = stored?.validator {
            self.init(offset: existingBytes, validator: validator, knownTotal: stored?.totalBytes)
        } else if allowsBlindResume {
            self.init(offset: existingBytes, validator: nil, knownTotal: stored?.totalBytes)
        } else {
            self = .fresh
        }
    }

    /// The headers that ask for the rest of the content.
    var requestHeaders: [(String, String)] {
        if let end { return Self.rangeHeaders([offset..<end], validator: validator) }
        guard offset > 0 else {
            switch revalidating {
            case .etag(let etag): return [("If-None-Match", etag)]
            case .lastModified(let date): return [("If-Modified-Since", date)]
            case nil: return conditions.map { ($0.name, $0.value) }
            }
        }
        var headers = [("Range", "bytes=\(offset)-")]
        if let validator { headers.append(("If-Range", validator.headerValue)) }
        return headers
    }

    /// The headers that ask for `ranges` (ascending, each non-empty) in one request, under
    /// `validator` when there is one: `Range: bytes=A-B,C-D` and `If-Range`.
    static func rangeHeaders(_ ranges: [Range<Int64>], validator: Validator?) -> [(String, String)] {
        var headers = [("Range", "bytes=" + ranges.map { "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ","))]
        if let validator { headers.append(("If-Range", validator.headerValue)) }
        return headers
    }

    /// What to do with a response.
    enum Action: Hashable, Sendable {
        /// Write the body at `offset`; `truncate` first empties the partial file.
        /// `total` is the full content's size when the server said it.
        case write(offset: Int64, truncate: Bool, total: Int64?)
        /// The partial already holds all `total` bytes.
        case complete(total: Int64)
        /// The completed file being revalidated is still current (304).
        case notModified
        /// The partial cannot be trusted: discard it and ask again from zero.
        case restart(reason: String)
        /// Follow a redirect to `location` (not yet resolved against the request URL).
        case redirect(location: String)
        /// An HTTP error status.
        case fail(status: Int, retryAfter: String?)
    }

    /// Decides what to do with a response of `status` whose headers `header` reads
    /// (case-insensitively).
    func evaluate(status: Int, header: (String) -> String?) -> Action {
        switch status {
        case 206:
            guard let contentRange = header("Content-Range").flatMap(ContentRange.init),
                let range = contentRange.range
            else {
                return .restart(reason: "206 response without a valid Content-Range")
            }
            guard range.lowerBound == offset else {
                return .restart(
                    reason: "Content-Range starts at \(range.lowerBound) but \(offset) was requested"
                )
            }
            if case .etag(let held) = validator, let etag = header("ETag"), etag != held {
                return .restart(reason: "ETag changed from \(held) to \(etag)")
            }
            let total = contentRange.total ?? (range.upperBound + 1 == knownTotal ? knownTotal : nil)
            return .write(offset: offset, truncate: false, total: total)
        case 200...299:
            // Most servers send the digits alone: parsed as they are before anything is trimmed.
            let length = header("Content-Length").flatMap { Int64($0) ?? Int64($0.trimmingCharacters(in: .whitespaces)) }
            return .write(offset: 0, truncate: true, total: status == 204 ? 0 : length)
        case 416:
            if offset > 0 {
                let total = header("Content-Range").flatMap(ContentRange.init)?.total ?? knownTotal
                // Complete only if the size is the one the partial was started with.
                if total == offset, knownTotal == nil || knownTotal == total { return .complete(total: offset) }
            }
            return .restart(reason: "the server cannot serve bytes from \(offset) on")
        case 304 where offset == 0 && (revalidating != nil || !conditions.isEmpty):
            return .notModified
        case 301, 302, 303, 307, 308:
            guard let location = header("Location"), !location.isEmpty else {
                return .fail(status: status, retryAfter: nil)
            }
            return .redirect(location: location)
        default:
            return .fail(status: status, retryAfter: header("Retry-After"))
        }
    }
}
