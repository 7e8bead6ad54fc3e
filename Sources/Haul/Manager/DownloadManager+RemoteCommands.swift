import Foundation
import Logging

/// Commands other processes leave in the store for this manager's jobs (`haul pause`,
/// `cancel`, `retry`), read whenever the store signals (see ``StoreSignal/wake``) with the
/// rest of its news.
extension DownloadManager {
    /// Applies commands other processes left for this manager's jobs, and admits jobs
    /// queued for it.
    func pollJournal() async {
        guard let store, !isShutDown else { return }
        if let commands = try? await store.commands() {
            for (id, command) in commands {
                store.clearCommand(command, for: id)
                guard let job = jobs[id] else { continue }
                switch command {
                case .pause: stop(job, intent: .pause)
                case .cancel: stop(job, intent: .cancel(.userRequested))
                case .resume: resume(job)
                }
            }
        }
        await pollFollowed()
        await admitFromStore()
    }
}
