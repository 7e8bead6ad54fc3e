import Foundation
import HTTPTypes
package import Hummingbird
import NIOCore

/// The dashboard: the plain HTML, CSS and JavaScript files of `Sources/HaulServer/Dashboard`,
/// shipped as the package's resources, read once at start and served from memory: `/` is
/// `index.html`, and `/dashboard/NAME` each file. Only those files exist: no path from a
/// request ever reaches the file system.
@available(macOS 14, iOS 17, tvOS 17, *)
package struct DashboardFiles: Sendable {
    struct File: Sendable {
        var bytes: ByteBuffer
        var type: String
    }

    private let files: [String: File]

    /// Reads the files from `directory`, or finds the resources next to the executable.
    package init(directory: String? = nil) {
        var files: [String: File] = [:]
        if let directory = directory ?? Self.resourceDirectory(),
            let names = try? FileManager.default.contentsOfDirectory(atPath: directory)
        {
            for name in names {
                guard let data = FileManager.default.contents(atPath: (directory as NSString).appendingPathComponent(name))
                else { continue }
                files[name] = File(bytes: ByteBuffer(bytes: data), type: Self.type(of: name))
            }
        }
        self.files = files
    }

    /// Whether the dashboard's files were found.
    package var isAvailable: Bool { files["index.html"] != nil }

    /// The API's OpenAPI document, `openapi.json` among the dashboard's files.
    package static let openAPIName = "openapi.json"

    package func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("/") { _, _ in try self.response(for: "index.html") }
        router.get("dashboard/{name}") { _, context in try self.response(for: try context.parameters.require("name")) }
    }

    func response(for name: String) throws -> Response {
        guard let file = files[name] else {
            if name == "index.html" {
                throw APIError(
                    .notFound, code: "notFound",
                    message:
                        "the dashboard's files are not installed next to the haul executable, nor in ../share/haul (Haul_HaulServer.resources)")
            }
            throw APIError.notFound("dashboard file \(name)")
        }
        return Response(
            status: .ok,
            headers: [
                .contentType: file.type, .cacheControl: "no-cache",
                HTTPField.Name("X-Content-Type-Options")!: "nosniff",
                HTTPField.Name("Content-Security-Policy")!:
                    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'",
                HTTPField.Name("Referrer-Policy")!: "no-referrer",
            ],
            body: ResponseBody(byteBuffer: file.bytes))
    }

    static func type(of name: String) -> String {
        switch (name as NSString).pathExtension {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        case "svg": "image/svg+xml"
        case "json": "application/json; charset=utf-8"
        case "png": "image/png"
        default: "application/octet-stream"
        }
    }

    /// `Dashboard` inside the resource bundle SwiftPM puts next to the executable (or the
    /// test runner): `*_HaulServer.resources`; for an installed `PREFIX/bin/haul`, the one
    /// `scripts/install.sh` puts in `PREFIX/share/haul`.
    static func resourceDirectory() -> String? {
        var places: [String] = []
        if let executable = Bundle.main.executableURL?.resolvingSymlinksInPath() {
            let directory = executable.deletingLastPathComponent()
            places.append(directory.path)
            places.append(directory.deletingLastPathComponent().appendingPathComponent("share/haul").path)
        }
        places.append(Bundle.main.bundlePath)
        for place in places {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: place) else { continue }
            for name in names.sorted() where name.hasSuffix("_HaulServer.resources") {
                let directory = (place as NSString).appendingPathComponent(name)
                for candidate in ["Dashboard", "Resources/Dashboard", ""] {
                    let path = (directory as NSString).appendingPathComponent(candidate)
                    if FileManager.default.fileExists(atPath: (path as NSString).appendingPathComponent("index.html")) {
                        return path
                    }
                }
            }
        }
        return nil
    }
}
