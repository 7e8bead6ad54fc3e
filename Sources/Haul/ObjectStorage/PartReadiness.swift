/// Which parts of a multipart upload may be sent while the download still runs: those
/// whose bytes are all in the staged file and, for a download with piece checksums, lie
/// wholly in pieces that passed their check. Each part is handed out once.
///
/// A plain value with no I/O, table-tested (`PartReadinessTests`): ``PartStream`` keeps it
/// behind a lock, asks it after every write, and uploads what it hands out.
///
/// ```
///   part 2 of 8 MiB parts: bytes 8 MiB ..< 16 MiB
///   missing [(12 MiB, 20 MiB)]            → not ready
///   missing [(16 MiB, 20 MiB)]            → ready (handed out once)
///   with pieces: every piece over it checked, or not yet
/// ```
struct PartReadiness: Hashable, Sendable {
    let plan: MultipartPlan
    /// The content's size: the plan's, which is known (a stream needs it).
    let total: Int64
    /// The parts handed out (or already held by the store), by number from 1.
    private(set) var handedOut: Set<Int> = []

    /// Readiness for a multipart `plan` of known size; `nil` for a single `PUT` or an unknown
    /// size, which are never streamed.
    init?(plan: MultipartPlan) {
        guard !plan.isSinglePut, let total = plan.totalSize else { return nil }
        self.plan = plan
        self.total = total
    }

    /// The parts that hold any byte of `range` and are now ready, in order: no byte of them
    /// among `missing` (sorted, disjoint ranges `[start, end)`) and, when `isVerified` is
    /// given, every byte of them checked. Each is handed out once.
    ///
    /// With piece checksums, `range` should span the whole pieces a write touched: a part
    /// becomes ready when the last piece over it passes, which a write beside it can do.
    mutating func ready(
        around range: Range<Int64>, missing: [(Int64, Int64)], isVerified: ((Range<Int64>) -> Bool)? = nil
    ) -> [Int] {
        let clamped = max(0, range.lowerBound)..<min(total, range.upperBound)
        guard !clamped.isEmpty, let first = plan.part(containing: clamped.lowerBound),
            let last = plan.part(containing: clamped.upperBound - 1)
        else { return [] }
        var ready: [Int] = []
        for number in first...last where !handedOut.contains(number) {
            guard let bytes = plan.byteRange(ofPart: number), !Self.overlaps(bytes, missing),
                isVerified?(bytes) ?? true
            else { continue }
            handedOut.insert(number)
            ready.append(number)
        }
        return ready
    }

    /// Every part ready now (a resumed download's, whose bytes were written before it
    /// stopped), handed out once.
    mutating func ready(missing: [(Int64, Int64)], isVerified: ((Range<Int64>) -> Bool)? = nil) -> [Int] {
        ready(around: 0..<total, missing: missing, isVerified: isVerified)
    }

    /// `numbers` need not be handed out: the store holds them already.
    mutating func held(_ numbers: some Sequence<Int>) {
        handedOut.formUnion(numbers)
    }

    /// Whether any of the sorted, disjoint `ranges` holds a byte of `bytes`.
    static func overlaps(_ bytes: Range<Int64>, _ ranges: [(Int64, Int64)]) -> Bool {
        // The first range that ends after `bytes` starts: it overlaps if it starts before
        // `bytes` ends.
        var low = 0
        var high = ranges.count
        while low < high {
            let middle = (low + high) / 2
            if ranges[middle].1 <= bytes.lowerBound { low = middle + 1 } else { high = middle }
        }
        return low < ranges.count && ranges[low].0 < bytes.upperBound
    }
}
