import Foundation
import Logging

/// Commands other processes leave in the journal for this manager's jobs (`haul pause`,
/// `cancel`, `retry`), polled a few times a second with the rest of the journal's news.
extension DownloadManager {
    /// Applies commands other processes left for this manager's jobs, and admits jobs
    /// queued for it.
    func pollJournal() async {
        guard let store, !isShutDown else { return }
        if let commands = try? await store.commands(for: me) {
            for (id, command) in commands {
                store.clearCommand(command, for: id)
                guard let job = jobs[id] else { continue }
                switch command {
                case "pause": stop(job, intent: .pause)
                case "cancel": stop(job, intent: .cancel(.userRequested))
                case "resume": resume(job)
                default: logger.debug("unknown journal command", metadata: ["id": "\(id)", "command": "\(command)"])
                }
            }
        }
        await pollFollowed()
        await admitFromStore()
    }
}
