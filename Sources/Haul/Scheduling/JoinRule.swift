/// Whether a request that matches an active download, by ID or by destination, may join
/// it, and what its handle then needs on top of the shared result.
///
/// Joining shares one transfer, so it is allowed only where the two callers want the same
/// bytes in the same place: the same file (or directory and name), or memory and memory.
/// A memory request may also join a file download of the same ID: it gets the bytes of the
/// verified file. Anything else would hand one caller a result it did not ask for.
enum JoinRule {
    /// What a joining handle's result needs.
    enum Delivery: Equatable {
        /// The download's own result.
        case shared
        /// The result with its bytes in `data`, at most `limit` of them: read from the
        /// verified file for a file download, checked against the smaller limit for a
        /// memory one.
        case memory(limit: Int)
    }

    /// How `request`, whose partial paths are `paths`, joins the active download of
    /// `existing`, stored at `existingPaths`.
    ///
    /// - Throws: ``DownloadError/Code/duplicate`` when the destinations disagree, with a
    ///   message that says what to do.
    static func delivery(
        joining request: DownloadRequest, paths: PartialPaths?, existing: DownloadRequest,
        existingPaths: PartialPaths?
    ) throws(DownloadError) -> Delivery {
        switch (paths, existingPaths) {
        case (nil, nil):
            guard case .memory(let limit) = request.destination,
                case .memory(let existingLimit) = existing.destination, limit < existingLimit
            else { return .shared }
            return .memory(limit: limit)
        case (nil, .some):
            guard case .memory(let limit) = request.destination else { return .shared }
            return .memory(limit: limit)
        case (.some, nil):
            throw DownloadError(
                .duplicate,
                "\(request.id) is already downloading to memory; "
                    + "give this request a distinct id to save it to a file too")
        case (.some(let paths), .some(let existingPaths)):
            if paths.partial == existingPaths.partial, paths.fixedName == existingPaths.fixedName { return .shared }
            if paths.partial == existingPaths.partial {
                throw DownloadError(
                    .duplicate,
                    "\(request.id) would use the same partial file as \(existing.id), which saves to "
                        + "\(describe(existingPaths)); name both destinations the same way, "
                        + "or wait for \(existing.id) to finish")
            }
            throw DownloadError(
                .duplicate,
                "\(request.id) is already downloading to \(describe(existingPaths)); "
                    + "give this request a distinct id to save it to \(describe(paths)) too")
        }
    }

    private static func describe(_ paths: PartialPaths) -> String {
        guard let name = paths.fixedName else { return "\(paths.directoryPath) (named by the server)" }
        return PartialPaths.join(paths.directoryPath, name)
    }
}
