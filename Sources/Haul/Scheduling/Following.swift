/// The rules for following a download that another live process sharing the journal
/// runs, as a plain value: fed the job's journal row at each poll, it says what to tell
/// this manager's callers, and when to take the job over.
///
/// - While the holder lives and the job is unfinished: progress, from the row's
///   checkpoints; `paused` when the holder pauses it (unless a resume asked for by this
///   process is still pending), and a fresh `started` when it goes on.
/// - Completed: the file the row names (the caller checks it is there).
/// - Failed or cancelled there: the same end here.
/// - A holder that died (its lock is free) while the job was queued, running or waiting,
///   or a row that is gone: take the job over, partial file and all.
struct Following: Sendable, Hashable {
    /// The holder's owner token.
    var holder: Int64
    /// Who the holder is.
    var owner: JournalOwner
    /// Whether the holder has the job paused, as last reported.
    var isPaused = false
    /// The committed bytes last reported, to report progress only when it moves.
    var reportedBytes: Int64 = -1

    enum Action: Hashable, Sendable {
        case none
        case progress(DownloadProgress)
        case paused
        /// It runs again after a pause.
        case resumed
        /// Done there: the file at `path` should hold `size` bytes.
        case completed(path: String, size: Int64, finalURL: String)
        case failed(code: String?, message: String)
        case cancelled
        case takeOver
    }

    init(holder: Int64, owner: JournalOwner) {
        self.holder = holder
        self.owner = owner
    }

    /// What to do about `row` (`nil`: the row is gone), given the live owners other than
    /// `me`.
    mutating func evaluate(row: JobRecord?, live: [Int64: JournalOwner], me: Int64) -> Action {
        guard let row else { return .takeOver }
        switch row.state {
        case .completed:
            return .completed(
                path: row.filePath ?? JobSnapshot(row).destination, size: row.fileSize ?? row.bytesCommitted,
                finalURL: row.finalURL ?? row.url)
        case .failed:
            return .failed(code: row.errorCode, message: row.lastError ?? "failed in \(owner)")
        case .cancelled:
            return .cancelled
        case .paused:
            // A resume this process asked for is on its way.
            if row.command == "resume", row.isHeld(byOtherThan: me, live: Set(live.keys)) { return .none }
            if isPaused { return .none }
            isPaused = true
            return .paused
        case .queued, .running, .waiting:
            guard row.isHeld(byOtherThan: me, live: Set(live.keys)), let holder = row.holder else { return .takeOver }
            if holder != self.holder {
                self.holder = holder
                if let owner = live[holder] { self.owner = owner }
            }
            if isPaused {
                isPaused = false
                reportedBytes = row.bytesCommitted
                return .resumed
            }
            guard row.bytesCommitted != reportedBytes else { return .none }
            reportedBytes = row.bytesCommitted
            return .progress(
                DownloadProgress(
                    completedBytes: row.bytesCommitted, totalBytes: row.totalBytes,
                    bytesPerSecond: row.state == .running ? row.bytesPerSecond : 0))
        }
    }
}
