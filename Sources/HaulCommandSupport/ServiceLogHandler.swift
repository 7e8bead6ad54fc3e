package import Foundation
import Haul
package import Logging
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How `haul serve` and `haul worker` write their log on standard error (`--log-format`).
package enum LogFormat: String, Sendable, CaseIterable {
    /// One line a person reads: `haul serve: MESSAGE (key: value, …)`.
    case text
    /// One JSON object per line: `time`, `level`, `label`, `message`, the download's `id`
    /// where there is one, and the other metadata under `metadata`.
    case json
}

/// A log handler for the service and the worker (and for the hooks of `haul get` and
/// `haul resume`): one line per event on standard error, as text or JSON (``LogFormat``),
/// with every credential taken out first (``CredentialRedaction``): a URL's user and
/// password, a signed URL's signature, a token.
package struct ServiceLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    /// The logger's label (`haul.serve`, `haul.worker`).
    let label: String
    /// What text lines start with (`haul serve`).
    let name: String
    let format: LogFormat
    /// Where lines go; standard error unless a test gives its own.
    let write: @Sendable (String) -> Void

    package init(
        label: String, name: String, format: LogFormat, level: Logger.Level,
        write: @escaping @Sendable (String) -> Void = ServiceLogHandler.standardError
    ) {
        self.label = label
        self.name = name
        self.format = format
        self.logLevel = level
        self.write = write
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        if let error = event.error, merged["error"] == nil { merged["error"] = "\(error)" }
        write(Self.line(event: event, metadata: merged, label: label, name: name, format: format, time: Date()))
    }

    /// The line for `event` (ending in a newline), credentials taken out.
    package static func line(
        event: LogEvent, metadata: Logger.Metadata, label: String, name: String, format: LogFormat, time: Date
    ) -> String {
        let message = CredentialRedaction.redact("\(event.message)")
        let values = metadata.mapValues { CredentialRedaction.redact(Self.flatten($0)) }
        switch format {
        case .text:
            let details =
                values.isEmpty ? "" : " (" + values.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
            return "\(name): \(message)\(details)\n"
        case .json:
            var fields: [(String, String)] = [
                ("time", quoted(UTCDateText.rfc3339(time))), ("level", quoted(event.level.rawValue)),
                ("label", quoted(label)), ("message", quoted(message)),
            ]
            var rest = values
            if let id = rest.removeValue(forKey: "id") { fields.append(("id", quoted(id))) }
            if !rest.isEmpty {
                let object = rest.sorted { $0.key < $1.key }.map { "\(quoted($0.key)):\(quoted($0.value))" }
                fields.append(("metadata", "{" + object.joined(separator: ",") + "}"))
            }
            return "{" + fields.map { "\(quoted($0.0)):\($0.1)" }.joined(separator: ",") + "}\n"
        }
    }

    /// A metadata value as one string (lists and dictionaries as swift-log prints them).
    private static func flatten(_ value: Logger.MetadataValue) -> String {
        switch value {
        case .string(let string): string
        case .stringConvertible(let convertible): convertible.description
        default: value.description
        }
    }

    private static let lock = NIOLock()

    /// Writes `line` to standard error whole: lines from different threads never interleave.
    package static let standardError: @Sendable (String) -> Void = { line in
        lock.withLock {
            let bytes = Array(line.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { writeStandardError($0.baseAddress! + offset, $0.count - offset) }
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }
}

/// Writes to descriptor 2 (a free function: inside the handler, `write` is its property).
private func writeStandardError(_ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    write(2, bytes, count)
}

/// A JSON string literal.
private func quoted(_ text: String) -> String {
    var output = ""
    JSONText.appendQuoted(text, to: &output)
    return output
}
