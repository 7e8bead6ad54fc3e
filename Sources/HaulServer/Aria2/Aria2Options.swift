import Foundation

/// aria2's options as JSON-RPC carries them: names without `--`, values as strings (a list
/// of strings for `header`).
///
/// Every option aria2 1.36 knows is accepted and reported back as set; the few Haul acts on
/// are checked and written the way aria2 writes them (`1M` becomes `1048576`). A name aria2
/// does not know is refused with aria2's option error (aria2 itself ignores it quietly:
/// Haul says so rather than pretend to act on a typo).
package struct Aria2Options: Sendable, Equatable {
    /// Values by option name.
    package var values: [String: JSONValue]

    package init(_ values: [String: JSONValue] = [:]) {
        self.values = values
    }

    package subscript(name: String) -> String? {
        values[name]?.stringValue
    }

    /// The options Haul acts on (the rest are only kept and reported back).
    ///
    /// - `dir`, `out`: where a download goes (its directory must lie inside the service's
    ///   download roots); `dir` globally is the default directory.
    /// - `header`: extra request headers, `Name: value`.
    /// - `checksum`: `sha-256=HEX` (also `sha-1`, `md5`), verified before the file is moved
    ///   into place.
    /// - `max-download-limit`: a download's own speed limit; globally, the limit of
    ///   downloads added after it without one of their own.
    /// - `max-overall-download-limit`: the service's overall speed limit.
    /// - `max-concurrent-downloads`: how many downloads run at once.
    /// - `max-connection-per-server`: how many downloads use one host at once.
    /// - `pause`: `true` adds the download paused.
    /// - `split`: how many connections a large download uses (as `haul get -x`; a
    ///   `max-connection-per-server` set lower clamps it): for one download when it is
    ///   added, or globally for downloads started from then on.
    /// - `metalink-location`: for `aria2.addMetalink`, the country whose mirrors come
    ///   first (then the document's priorities).
    package static let mapped: Set<String> = [
        "dir", "out", "header", "checksum", "max-download-limit", "max-overall-download-limit",
        "max-concurrent-downloads", "max-connection-per-server", "pause", "split", "metalink-location",
    ]

    /// Every option name aria2 1.36 knows (`aria2c --help=#all`).
    package static let known: Set<String> = [
        "all-proxy", "all-proxy-passwd", "all-proxy-user", "allow-overwrite", "allow-piece-length-change",
        "always-resume", "async-dns", "async-dns-server", "auto-file-renaming", "auto-save-interval",
        "bt-detach-seed-only", "bt-enable-hook-after-hash-check", "bt-enable-lpd", "bt-exclude-tracker",
        "bt-external-ip", "bt-force-encryption", "bt-hash-check-seed", "bt-load-saved-metadata", "bt-lpd-interface",
        "bt-max-open-files", "bt-max-peers", "bt-metadata-only", "bt-min-crypto-level", "bt-prioritize-piece",
        "bt-remove-unselected-file", "bt-request-peer-speed-limit", "bt-require-crypto", "bt-save-metadata",
        "bt-seed-unverified", "bt-stop-timeout", "bt-tracker", "bt-tracker-connect-timeout", "bt-tracker-interval",
        "bt-tracker-timeout", "ca-certificate", "certificate", "check-certificate", "check-integrity", "checksum",
        "conditional-get", "conf-path", "connect-timeout", "console-log-level", "content-disposition-default-utf8",
        "continue", "daemon", "deferred-input", "dht-entry-point", "dht-entry-point6", "dht-file-path",
        "dht-file-path6", "dht-listen-addr6", "dht-listen-port", "dht-message-timeout", "dir", "disable-ipv6",
        "disk-cache", "download-result", "dry-run", "dscp", "enable-async-dns6", "enable-color", "enable-dht",
        "enable-dht6", "enable-http-keep-alive", "enable-http-pipelining", "enable-mmap", "enable-peer-exchange",
        "enable-rpc", "event-poll", "file-allocation", "follow-metalink", "follow-torrent", "force-save",
        "force-sequential", "ftp-passwd", "ftp-pasv", "ftp-proxy", "ftp-proxy-passwd", "ftp-proxy-user",
        "ftp-reuse-connection", "ftp-type", "ftp-user", "gid", "hash-check-only", "header", "help",
        "http-accept-gzip", "http-auth-challenge", "http-no-cache", "http-passwd", "http-proxy", "http-proxy-passwd",
        "http-proxy-user", "http-user", "https-proxy", "https-proxy-passwd", "https-proxy-user", "human-readable",
        "index-out", "input-file", "interface", "keep-unfinished-download-result", "listen-port", "load-cookies",
        "log", "log-level", "lowest-speed-limit", "max-concurrent-downloads", "max-connection-per-server",
        "max-download-limit", "max-download-result", "max-file-not-found", "max-mmap-limit",
        "max-overall-download-limit", "max-overall-upload-limit", "max-resume-failure-tries", "max-tries",
        "max-upload-limit", "metalink-base-uri", "metalink-enable-unique-protocol", "metalink-file",
        "metalink-language", "metalink-location", "metalink-os", "metalink-preferred-protocol", "metalink-version",
        "min-split-size", "min-tls-version", "multiple-interface", "netrc-path", "no-conf",
        "no-file-allocation-limit", "no-netrc", "no-proxy", "on-bt-download-complete", "on-download-complete",
        "on-download-error", "on-download-pause", "on-download-start", "on-download-stop",
        "optimize-concurrent-downloads", "out", "parameterized-uri", "pause", "pause-metadata", "peer-agent",
        "peer-id-prefix", "piece-length", "private-key", "proxy-method", "quiet", "realtime-chunk-checksum",
        "referer", "remote-time", "remove-control-file", "retry-wait", "reuse-uri", "rlimit-nofile",
        "rpc-allow-origin-all", "rpc-certificate", "rpc-listen-all", "rpc-listen-port", "rpc-max-request-size",
        "rpc-passwd", "rpc-private-key", "rpc-save-upload-metadata", "rpc-secret", "rpc-secure", "rpc-user",
        "save-cookies", "save-not-found", "save-session", "save-session-interval", "seed-ratio", "seed-time",
        "select-file", "server-stat-if", "server-stat-of", "server-stat-timeout", "show-console-readout",
        "show-files", "socket-recv-buffer-size", "split", "ssh-host-key-md", "stderr", "stop", "stop-with-process",
        "stream-piece-selector", "summary-interval", "timeout", "torrent-file", "truncate-console-readout",
        "uri-selector", "use-head", "user-agent", "version",
    ]

    /// Options given as parameter `index` of a call: an object of strings (`nil`: none).
    package static func parse(_ value: JSONValue?, index: Int) -> Result<Aria2Options, Aria2Error> {
        guard let value else { return .success(Aria2Options()) }
        guard case .object(let members) = value else { return .failure(.wrongType(index)) }
        var options = Aria2Options()
        for name in members.keys.sorted() {
            switch normalize(name, members[name]!) {
            case .success(let normalized): options.values[name] = normalized
            case .failure(let error): return .failure(error)
            }
        }
        return .success(options)
    }

    /// `value` checked and written as aria2 reports it.
    package static func normalize(_ name: String, _ value: JSONValue) -> Result<JSONValue, Aria2Error> {
        guard known.contains(name) else { return .failure(.badOption(name, "Haul does not know this option.")) }
        // A remote client never names a program to run: hooks come from the command line only.
        if name.hasPrefix("on-download-") || name == "on-bt-download-complete" {
            return .failure(
                .badOption(name, "Programs run after downloads are set only by whoever starts haul serve (--on-complete, --on-error)."))
        }
        if name == "header" {
            let lines: [String]
            switch value {
            case .string(let line): lines = [line]
            case .array(let items):
                guard items.allSatisfy({ $0.stringValue != nil }) else { return .failure(.badOption(name)) }
                lines = items.compactMap(\.stringValue)
            default: return .failure(.badOption(name))
            }
            for line in lines where header(line) == nil { return .failure(.badOption(name, "'\(line)' is not Name: value.")) }
            return .success(.array(lines.map { .string($0) }))
        }
        guard let text = value.stringValue else { return .failure(.badOption(name)) }
        switch name {
        case "max-download-limit", "max-overall-download-limit":
            guard let bytes = size(text) else { return .failure(.badOption(name)) }
            return .success(.string(String(bytes)))
        case "max-concurrent-downloads":
            guard let number = Int(text), (1...1_000).contains(number) else { return .failure(.badOption(name)) }
            return .success(.string(String(number)))
        case "max-connection-per-server", "split":
            guard let number = Int(text), (1...16).contains(number) else { return .failure(.badOption(name)) }
            return .success(.string(String(number)))
        case "pause":
            guard text == "true" || text == "false" else { return .failure(.badOption(name)) }
            return .success(.string(text))
        case "checksum":
            guard let equals = text.firstIndex(of: "="), equals != text.startIndex,
                text[text.index(after: equals)...].allSatisfy(\.isHexDigit), text.index(after: equals) != text.endIndex
            else { return .failure(.badOption(name)) }
            return .success(.string(text))
        case "dir", "out":
            guard !text.isEmpty, !text.utf8.contains(0) else { return .failure(.badOption(name)) }
            return .success(.string(text))
        default:
            return .success(.string(text))
        }
    }

    /// A size as aria2 takes it: bytes, or with `K` or `M` (1024 and 1024²); 0 for none.
    package static func size(_ text: String) -> Int? {
        var digits = Substring(text)
        var unit = 1
        switch text.last {
        case "K", "k": unit = 1 << 10
        case "M", "m": unit = 1 << 20
        default: break
        }
        if unit != 1 { digits = digits.dropLast() }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let number = Int(digits), number >= 0,
            number <= (1 << 40) / unit
        else { return nil }
        return number * unit
    }

    /// `(name, value)` of a `Name: value` header line.
    package static func header(_ line: String) -> (name: String, value: String)? {
        guard let colon = line.firstIndex(of: ":") else { return nil }
        let name = line[..<colon].trimmingCharacters(in: .whitespaces)
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { return nil }
        return (name, value)
    }

    /// These options laid over `base`.
    package func over(_ base: Aria2Options) -> Aria2Options {
        Aria2Options(base.values.merging(values) { _, mine in mine })
    }

    package var value: JSONValue { .object(values) }
}
