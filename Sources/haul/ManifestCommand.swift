import ArgumentParser
import Foundation
import Haul

/// `haul manifest`: writes the sync manifest of a local directory.
///
/// Walks DIR (see `ManifestBuilder` for what is left out), hashes every file and writes the
/// manifest, sorted by path, to standard output or, atomically, to `-o FILE`.
struct ManifestCommand: ParsableCommand {
    static let configuration = HaulCommand.subcommandConfiguration(
        CommandConfiguration(
            commandName: "manifest",
            abstract: "Write the sync manifest of a directory.",
            discussion: """
                Lists every regular file below DIR with its size, SHA-256, modification time and \
                mode. Each url is the file's percent-encoded relative path, which resolves against \
                the manifest's own URL; --base-url makes them absolute (base URL + '/' + path). \
                Symbolic links leading outside DIR, *.haul-partial and *.haul-meta files and \
                .haul-* entries are skipped.

                With --zsync, a zsync control file (FILE.zsync) is written beside each file, as \
                zsyncmake 0.6.2 writes it (with a SHA-256 header too, which zsync 0.6.2 reads as \
                safe to ignore); the control files are not listed as files, but each entry names \
                its own (zsync=…). 'haul sync' then updates a changed file from the blocks its old \
                version holds, and 'haul get URL.zsync' (or zsync) builds a new version of a file \
                from an old one, fetching only the blocks that changed.
                """))

    enum FormatOption: String, ExpressibleByArgument, CaseIterable {
        case xml
        case json
    }

    @Argument(help: "The directory to describe.")
    var directory: String

    @Option(name: .customLong("base-url"), help: "Make every url absolute: URL/PATH.")
    var baseURL: String?

    @Option(help: "The manifest format.")
    var format: FormatOption = .xml

    @Option(name: .customLong("label"), help: "The manifest's version label (default: the current UTC time).")
    var label: String?

    @Option(name: .shortAndLong, help: "Write to FILE (atomically) instead of standard output.")
    var output: String?

    @Flag(help: "Write a zsync control file (FILE.zsync) beside each file, for delta downloads.")
    var zsync = false

    func validate() throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw ValidationError("'\(directory)' is not a directory.")
        }
        if let baseURL {
            guard let url = URL(string: baseURL), let scheme = url.scheme?.lowercased(),
                ["http", "https"].contains(scheme), url.host?.isEmpty == false, url.query == nil, url.fragment == nil
            else {
                throw ValidationError("--base-url '\(baseURL)' is not an http or https URL without query or fragment.")
            }
        }
        if let label, label.isEmpty || label.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw ValidationError("--label must be non-empty, without control characters.")
        }
    }

    func run() throws {
        let version = label ?? Self.now()
        let builder = ManifestBuilder(
            directory: URL(fileURLWithPath: directory), baseURL: baseURL.flatMap { URL(string: $0) },
            version: version)
        let data: Data
        do {
            var manifest = try builder.build()
            if zsync {
                manifest.files = ZsyncPublisher.withoutControlFiles(manifest.files).map { entry in
                    var entry = entry
                    entry.zsync = entry.url + ".zsync"
                    return entry
                }
                try ZsyncPublisher.writeControlFiles(for: manifest.files, in: URL(fileURLWithPath: directory))
            }
            data = try manifest.serialized(as: format == .xml ? .xml : .json)
        } catch let error as DownloadError {
            Console.err("haul: \(error.message)\n")
            throw ExitCode.failure
        } catch {
            Console.err("haul: \(error)\n")
            throw ExitCode.failure
        }
        guard let output else {
            Console.out(String(decoding: data, as: UTF8.self))
            return
        }
        do {
            // Foundation writes a temporary file next to FILE and renames it into place.
            try data.write(to: URL(fileURLWithPath: output), options: .atomic)
        } catch {
            Console.err("haul: cannot write \(output): \(error.localizedDescription)\n")
            throw ExitCode.failure
        }
    }

    private static func now() -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        formatter.timeZone = TimeZone(secondsFromGMT: 0)
        return formatter.string(from: Date())
    }
}
