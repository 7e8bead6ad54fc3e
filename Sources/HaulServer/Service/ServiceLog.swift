package import Foundation
package import Haul
package import Logging
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How `haul serve` and `haul worker` write their log on standard error.
package enum LogFormat: String, Sendable, CaseIterable {
    /// One line a person reads: `haul serve: MESSAGE (key: value, …)`.
    case text
    /// One JSON object per line: `time`, `level`, `label`, `message`, the download's `id`
    /// where there is one, and the other metadata under `metadata`.
    case json
}

/// A log handler for the service and the worker: one line per event on standard error, as
/// text or JSON (``LogFormat``), with every credential taken out first
/// (``CredentialRedaction``): a URL's user and password, a signed URL's signature, a token.
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

/// Takes credentials out of text bound for a log: the user and password of a URL
/// (`https://user:secret@host` → `https://***@host`), the values of query parameters that
/// sign or authorize a URL (`X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`,
/// `X-Goog-Signature`, `Signature`, `sig`, `token`, `access_token`, `key`, `password`, …),
/// and what follows `Bearer` or `Basic`.
package enum CredentialRedaction {
    /// Query parameters whose values are credentials, lowercased.
    static let secretParameters: Set<String> = [
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
        "signature", "sig", "token", "access_token", "auth", "key", "api_key", "apikey", "password", "passwd",
        "secret", "client_secret", "policy", "key-pair-id",
    ]

    package static func redact(_ text: String) -> String {
        // Fast path: nothing that could hold a credential.
        guard text.contains("@") || text.contains("=") || text.contains("Bearer") || text.contains("Basic") else {
            return text
        }
        var result = redactUserInfo(text)
        result = redactParameters(result)
        result = redactSchemes(result)
        return result
    }

    /// `scheme://user:password@` → `scheme://***@`.
    private static func redactUserInfo(_ text: String) -> String {
        var output = ""
        var rest = Substring(text)
        while let marker = rest.range(of: "://") {
            output += rest[..<marker.upperBound]
            rest = rest[marker.upperBound...]
            // The authority ends at the first of / ? # or white space; a user part at its last @.
            let authorityEnd =
                rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" || $0.isWhitespace || $0 == "\"" || $0 == "'" }
                ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@") {
                output += "***@"
                rest = rest[rest.index(after: at)...]
            }
        }
        return output + rest
    }

    /// `?…&sig=VALUE` → `?…&sig=***` for the parameters in ``secretParameters``.
    private static func redactParameters(_ text: String) -> String {
        var output = ""
        var rest = Substring(text)
        while let equals = rest.firstIndex(of: "=") {
            let before = rest[..<equals]
            // The parameter's name runs back to ? or & (or a space or quote for a form in text).
            let nameStart =
                before.lastIndex { $0 == "?" || $0 == "&" || $0 == ";" || $0.isWhitespace || $0 == "\"" || $0 == "," }
                .map { before.index(after: $0) } ?? before.startIndex
            let name = before[nameStart...].lowercased()
            output += rest[...equals]
            rest = rest[rest.index(after: equals)...]
            guard secretParameters.contains(name) else { continue }
            let valueEnd =
                rest.firstIndex { $0 == "&" || $0 == "#" || $0.isWhitespace || $0 == "\"" || $0 == "'" || $0 == ")" || $0 == "," }
                ?? rest.endIndex
            if valueEnd > rest.startIndex { output += "***" }
            rest = rest[valueEnd...]
        }
        return output + rest
    }

    /// `Bearer TOKEN` and `Basic CREDENTIALS` → `Bearer ***`, `Basic ***`.
    private static func redactSchemes(_ text: String) -> String {
        var result = text
        for scheme in ["Bearer ", "Basic "] {
            var output = ""
            var rest = Substring(result)
            while let found = rest.range(of: scheme) {
                output += rest[..<found.upperBound]
                rest = rest[found.upperBound...]
                let end = rest.firstIndex { $0.isWhitespace || $0 == "\"" || $0 == "'" || $0 == "," } ?? rest.endIndex
                if end > rest.startIndex { output += "***" }
                rest = rest[end...]
            }
            result = output + rest
        }
        return result
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

/// Logs the end of every download a manager runs, for the operator of a service or worker
/// (a library logs nothing at `info` on its own; the service and the worker do): a
/// completion at `info` with its size, a failure at `notice` with its error code, a
/// cancellation at `info`, each with the download's `id`.
package enum DownloadLog {
    /// Logs `events` until they end, and counts them in `metrics`, if any.
    package static func record(
        _ events: AsyncStream<DownloadManager.Event>, to logger: Logger, metrics: ServiceMetrics? = nil
    ) async {
        for await event in events {
            // Counted before it is logged: a line in the log says the metrics have it.
            metrics?.count(event)
            log(event, to: logger)
        }
    }

    /// Logs `event`, if it is one that is logged.
    package static func log(_ event: DownloadManager.Event, to logger: Logger) {
        let id = Logger.MetadataValue.string(event.id.rawValue)
        switch event.event {
        case .started:
            logger.debug("download started", metadata: ["id": id])
        case .completed(let result):
            var metadata: Logger.Metadata = ["id": id, "bytes": "\(result.byteCount)"]
            if let path = result.savedAt { metadata["path"] = .string(path) }
            logger.info("download completed", metadata: metadata)
        case .failed(let error):
            logger.notice("download failed", metadata: ["id": id, "code": "\(error.code)", "error": .string(error.message)])
        case .cancelled(let reason):
            logger.info("download stopped", metadata: ["id": id, "reason": .string(reason.rawValue)])
        case .retrying(let attempt, let reason, _):
            logger.debug("download retrying", metadata: ["id": id, "attempt": "\(attempt)", "error": .string(reason.message)])
        default:
            break
        }
    }
}
