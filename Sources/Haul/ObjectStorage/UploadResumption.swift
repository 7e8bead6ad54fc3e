/// The rules for going on with a multipart upload after a kill: which record to trust,
/// which of its parts the store really holds, which other uploads to the key to abort, and
/// which parts are left to send. Plain functions of what is known, with no I/O:
/// ``ObjectUpload`` asks the store and carries the answers out.
enum UploadResumption {
    /// What to do with the sidecar's record before uploading.
    enum Start: Equatable, Sendable {
        /// The record fits this upload: ask the store for its parts (``reconcile(_:listed:plan:)``).
        case verify(ObjectUpload.UploadRecord)
        /// The record is of another object, size, part size or version of the content:
        /// abort its upload, start anew.
        case abandon(ObjectUpload.UploadRecord)
        /// No record: start a new upload.
        case fresh
    }

    /// Whether `stored` (the sidecar's record, if any) can be continued for an object of
    /// `size` bytes at `location` in parts of `partSize`, read from the content `validator`
    /// names (`nil`: a content without one, whose parts are never trusted across runs
    /// unless the record predates validators).
    static func start(
        stored: ObjectUpload.UploadRecord?, location: S3Location, size: Int64, partSize: Int64, validator: String?
    ) -> Start {
        guard let stored else { return .fresh }
        return stored.matches(location, size: size, partSize: partSize, validator: validator)
            ? .verify(stored) : .abandon(stored)
    }

    /// `record` with only the parts the store lists with the same number, ETag and size as
    /// the plan gives that part. (A store may list one number twice after a part was sent
    /// again, as SeaweedFS does: any listing that matches keeps it, since completion names
    /// the ETag.)
    static func reconcile(
        _ record: ObjectUpload.UploadRecord, listed: [S3UploadedPart], plan: MultipartPlan
    ) -> ObjectUpload.UploadRecord {
        struct Held: Hashable {
            var number: Int
            var etag: String
            var size: Int64
        }
        let held = Set(listed.map { Held(number: $0.number, etag: $0.etag, size: $0.size) })
        var kept = record
        kept.parts = record.parts.filter { part in
            guard let range = plan.byteRange(ofPart: part.number) else { return false }
            return held.contains(Held(number: part.number, etag: part.etag, size: Int64(range.count)))
        }
        return kept
    }

    /// The unfinished uploads to the key to abort: every one but `keeping`'s.
    static func stale(_ pending: [S3PendingUpload], keeping uploadID: String?) -> [String] {
        pending.map(\.uploadID).filter { $0 != uploadID }
    }

    /// The parts of `plan` that `record` does not hold, in order.
    static func missing(_ record: ObjectUpload.UploadRecord, plan: MultipartPlan) -> [Int] {
        let done = Set(record.parts.map(\.number))
        return (1...max(1, plan.partCount ?? 1)).filter { !done.contains($0) }
    }
}
