/// How an object is uploaded: in one `PUT`, or as a multipart upload of equal parts (the
/// last may be smaller), within S3's limits.
///
/// S3's limits: a part is 5 MiB to 5 GiB (the last may be smaller), an upload has at most
/// 10,000 parts numbered from 1, an object is at most 5 TiB, and a single `PUT` at most
/// 5 GiB.
///
/// ```swift
/// let plan = try MultipartPlan(totalSize: 100 * MultipartPlan.mebibyte)
/// plan.partCount                  // 13: twelve of 8 MiB and one of 4 MiB
/// plan.byteRange(ofPart: 13)      // 100663296..<104857600
/// plan.part(containing: 9_000_000) // 2
/// ```
///
/// The part size is the preferred size (8 MiB unless told), rounded up to a whole MiB,
/// grown to the smallest whole MiB that keeps the upload within 10,000 parts.
///
/// **The single-`PUT` threshold** is 8 MiB by default, the same as the preferred part size
/// (and the AWS CLI's `multipart_threshold`): no request then carries more than one part's
/// worth of bytes, so a failed request costs at most 8 MiB to send again and the memory a
/// request's body needs is the same whichever way the object goes, while objects that fit in
/// one part (most) take one request instead of three (initiate, part, complete).
///
/// **Unknown size** (no `Content-Length`): a multipart upload of preferred-size parts, which
/// holds at most ``largestObjectSize`` (10,000 parts: 80,000 MiB, about 78 GiB, with 8 MiB
/// parts); a larger preferred part size raises that limit.
struct MultipartPlan: Hashable, Sendable {
    /// 1 MiB.
    static let mebibyte: Int64 = 1 << 20
    /// The smallest part but the last: 5 MiB.
    static let minimumPartSize: Int64 = 5 << 20
    /// The largest part, and the largest single `PUT`: 5 GiB.
    static let maximumPartSize: Int64 = 5 << 30
    /// The most parts an upload has.
    static let maximumPartCount: Int64 = 10_000
    /// The largest object: 5 TiB.
    static let maximumObjectSize: Int64 = 5 << 40
    /// Objects of at most this size go in one `PUT` unless told otherwise: 8 MiB.
    static let defaultSinglePutThreshold: Int64 = 8 << 20
    /// The part size preferred unless told otherwise: 8 MiB.
    static let defaultPreferredPartSize: Int64 = 8 << 20

    /// How the object goes.
    enum Layout: Hashable, Sendable {
        /// One `PUT` of `size` bytes.
        case singlePut(size: Int64)
        /// A multipart upload of `partSize`-byte parts; `totalSize` is `nil` when unknown.
        case multipart(partSize: Int64, totalSize: Int64?)
    }

    /// How the object goes.
    let layout: Layout

    /// Plans the upload of an object of `totalSize` bytes (`nil` when unknown).
    ///
    /// - Parameters:
    ///   - singlePutThreshold: objects of at most this size go in one `PUT`; at most 5 GiB.
    ///   - preferredPartSize: the part size unless more than 10,000 parts would be needed;
    ///     5 MiB to 5 GiB, rounded up to a whole MiB.
    /// - Throws: ``DownloadError/Code/invalidRequest`` for an object over 5 TiB or a negative
    ///   size, and for a threshold or part size outside its range (the message says which).
    init(
        totalSize: Int64?, singlePutThreshold: Int64 = defaultSinglePutThreshold,
        preferredPartSize: Int64 = defaultPreferredPartSize
    ) throws(DownloadError) {
        guard (0...Self.maximumPartSize).contains(singlePutThreshold) else {
            throw DownloadError.invalid(
                "the single-PUT threshold \(singlePutThreshold) is not between 0 and \(Self.maximumPartSize) bytes "
                    + "(5 GiB)")
        }
        guard (Self.minimumPartSize...Self.maximumPartSize).contains(preferredPartSize) else {
            throw DownloadError.invalid(
                "the S3 part size \(preferredPartSize) is not between \(Self.minimumPartSize) (5 MiB) "
                    + "and \(Self.maximumPartSize) bytes (5 GiB)")
        }
        let preferred = Self.roundedUpToMebibyte(preferredPartSize)
        guard let totalSize else {
            layout = .multipart(partSize: preferred, totalSize: nil)
            return
        }
        guard totalSize >= 0 else { throw DownloadError.invalid("an object cannot have \(totalSize) bytes") }
        guard totalSize <= Self.maximumObjectSize else {
            throw DownloadError.invalid(
                "an S3 object holds at most 5 TiB (\(Self.maximumObjectSize) bytes); this one has \(totalSize)")
        }
        guard totalSize > singlePutThreshold else {
            layout = .singlePut(size: totalSize)
            return
        }
        // The smallest whole MiB that needs at most 10,000 parts: at most 525 MiB for 5 TiB.
        let smallest = Self.roundedUpToMebibyte(Self.dividedRoundingUp(totalSize, Self.maximumPartCount))
        layout = .multipart(partSize: max(preferred, smallest), totalSize: totalSize)
    }

    /// Whether the object goes in one `PUT`.
    var isSinglePut: Bool {
        if case .singlePut = layout { return true }
        return false
    }

    /// The object's size, or `nil` when unknown.
    var totalSize: Int64? {
        switch layout {
        case .singlePut(let size): size
        case .multipart(_, let total): total
        }
    }

    /// The size of every part but the last (the whole object for a single `PUT`).
    var partSize: Int64 {
        switch layout {
        case .singlePut(let size): size
        case .multipart(let partSize, _): partSize
        }
    }

    /// The number of parts (1 for a single `PUT`), or `nil` when the size is unknown.
    var partCount: Int? {
        switch layout {
        case .singlePut: 1
        case .multipart(let partSize, let total?): Int(Self.dividedRoundingUp(total, partSize))
        case .multipart(_, nil): nil
        }
    }

    /// The largest object the plan can upload: its size when known, else 10,000 parts.
    var largestObjectSize: Int64 {
        totalSize ?? min(partSize * Self.maximumPartCount, Self.maximumObjectSize)
    }

    /// The bytes of part `number` (from 1, as S3 numbers parts), or `nil` for a part the
    /// plan does not have. With an unknown size, every part up to 10,000 has `partSize`
    /// bytes as far as the plan knows (up to ``largestObjectSize``): the last one ends where
    /// the content does.
    func byteRange(ofPart number: Int) -> Range<Int64>? {
        let count = partCount.map(Int64.init) ?? Self.dividedRoundingUp(largestObjectSize, partSize)
        guard number >= 1, Int64(number) <= count else { return nil }
        let start = Int64(number - 1) * partSize
        let end = start + partSize
        return start..<min(end, totalSize ?? end)
    }

    /// The part (from 1) that holds byte `offset`, or `nil` for an offset outside the object
    /// (or past what 10,000 parts hold, when the size is unknown).
    func part(containing offset: Int64) -> Int? {
        guard offset >= 0, offset < largestObjectSize, partSize > 0 else { return nil }
        return Int(offset / partSize) + 1
    }

    /// `value` rounded up to a whole MiB.
    static func roundedUpToMebibyte(_ value: Int64) -> Int64 {
        dividedRoundingUp(value, mebibyte) * mebibyte
    }

    /// `value / divisor`, rounded up, for a non-negative `value` and positive `divisor`.
    static func dividedRoundingUp(_ value: Int64, _ divisor: Int64) -> Int64 {
        value / divisor + (value % divisor == 0 ? 0 : 1)
    }
}
