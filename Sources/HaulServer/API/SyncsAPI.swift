import Foundation
import Haul
package import Hummingbird

/// `POST /api/v1/syncs`: starts a content sync (see ``Syncer``) of a directory inside the
/// download roots from a manifest URL; 202 with its ID. Its progress comes over the
/// event stream as `sync` events, and its files' downloads as `download` events like any.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct SyncsAPI: Sendable {
    let core: ServiceCore

    package init(core: ServiceCore) {
        self.core = core
    }

    package func addRoutes<Context: RequestContext>(to group: RouterGroup<Context>) {
        group.post("syncs") { request, _ in try await self.start(request) }
    }

    struct Body: Decodable {
        var manifest: String
        var directory: String?
        var delete: Bool?
        var atomic: Bool?
    }

    struct Started: Encodable {
        var id: String
    }

    /// A `sync` event.
    struct Event: Encodable, Sendable {
        var id: String
        var state: String
        var message: String
        var directory: String
        var files: Int?
        var downloaded: Int?
        var failed: Int?
    }

    func start(_ request: Request) async throws -> Response {
        let body = try await DownloadsAPI.decode(Body.self, from: request)
        guard let url = URL(string: body.manifest), let scheme = url.scheme?.lowercased(),
            scheme == "http" || scheme == "https", url.host?.isEmpty == false
        else {
            throw APIError.invalid("manifest", "'\(body.manifest)' is not an http or https URL")
        }
        let directory: String
        do {
            directory = try core.batch.directory(body.directory, field: "directory")
        } catch {
            throw APIError.invalid(error.field, error.message)
        }
        var options = SyncOptions()
        options.deleteExtraneous = body.delete ?? false
        options.atomic = body.atomic ?? false
        let id = "sync-\(UUID().uuidString.lowercased())"
        let (hub, syncer) = (core.hub, Syncer(manager: core.manager))
        await hub.publishSync(Event(id: id, state: "running", message: "started", directory: directory))
        core.track(
            Task {
                do throws(DownloadError) {
                    let summary = try await syncer.sync(
                        from: url, into: URL(fileURLWithPath: directory), options: options
                    ) { event in
                        guard case .manifest(_, let count, _) = event else { return }
                        Task {
                            await hub.publishSync(
                                Event(id: id, state: "running", message: "manifest lists \(count) files",
                                    directory: directory, files: count))
                        }
                    }
                    await hub.publishSync(
                        Event(
                            id: id, state: summary.failures.isEmpty ? "completed" : "failed",
                            message: summary.failures.first.map { "\($0.path): \($0.error.message)" } ?? "in step",
                            directory: directory, files: summary.plan.changes.count + summary.plan.unchangedCount,
                            downloaded: summary.downloaded.files + summary.updated.files, failed: summary.failures.count))
                } catch {
                    await hub.publishSync(Event(id: id, state: "failed", message: error.message, directory: directory))
                }
            })
        return try ServiceJSON.response(Started(id: id), status: .accepted)
    }
}
