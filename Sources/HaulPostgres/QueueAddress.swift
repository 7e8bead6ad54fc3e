public import Foundation

/// An error of the shared queue, with a message a person can act on.
public struct QueueError: Error, Sendable, CustomStringConvertible {
    /// What went wrong and what to do about it.
    public let message: String

    /// An error saying `message`.
    public init(_ message: String) {
        self.message = message
    }

    public var description: String { message }
}

/// Where the shared queue's PostgreSQL database is: a `postgres://` URL, with its password
/// from wherever it is allowed to come from. The password is never part of
/// ``description``.
///
/// ```
/// postgres://haul@db.example/haul                 TCP, port 5432
/// postgres://haul@db.example:6432/haul?sslmode=require
/// postgres://haul@/haul?host=/var/run/postgresql  a Unix socket in that directory
/// ```
///
/// The password, in order: the URL's own, only where the URL did not come from the command
/// line (`HAUL_QUEUE_URL`); `PGPASSWORD`; the first matching line of the password file
/// (`PGPASSFILE`, else `~/.pgpass`: `host:port:database:user:password`, `*` matching
/// anything, as libpq reads it).
public struct QueueAddress: Sendable, Hashable, CustomStringConvertible {
    /// Whether the connection uses TLS (the URL's `sslmode`, as libpq names them).
    public enum TLSMode: String, Sendable, Hashable {
        /// Never.
        case disable
        /// When the server offers it (libpq's default).
        case prefer
        /// Always; the connection fails without it.
        case require
    }

    /// The host name, or `nil` for a Unix socket.
    public var host: String?
    /// The TCP port (5432 unless the URL gives one), also the socket file's suffix.
    public var port: Int
    /// The directory of the Unix socket, for a socket connection.
    public var socketDirectory: String?
    /// The role to connect as.
    public var user: String
    /// The database's name.
    public var database: String
    /// Whether to use TLS.
    public var tls: TLSMode
    var password: String?

    /// Reads `text`; `fromCommandLine` refuses a password in it.
    public init(
        parsing text: String, fromCommandLine: Bool, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(QueueError) {
        guard let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql"
        else {
            throw QueueError("'\(Self.redacted(text))' is not a postgres:// URL (postgres://USER@HOST[:PORT]/DATABASE)")
        }
        if components.password != nil, fromCommandLine {
            throw QueueError(
                "the queue's password must not be given on the command line, where other users can see it: put it in PGPASSWORD or ~/.pgpass, or give the whole URL in HAUL_QUEUE_URL"
            )
        }
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        user = components.user ?? environment["PGUSER"] ?? environment["USER"] ?? "postgres"
        port = components.port ?? query["port"].flatMap(Int.init) ?? 5432
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        database = path.isEmpty ? user : path
        let hostText = components.host.flatMap { $0.removingPercentEncoding } ?? ""
        if let socket = query["host"], socket.hasPrefix("/") {
            host = nil
            socketDirectory = socket
        } else if hostText.hasPrefix("/") {
            host = nil
            socketDirectory = hostText
        } else {
            guard !hostText.isEmpty else { throw QueueError("the queue URL names no host (postgres://USER@HOST/DATABASE)") }
            host = hostText
            socketDirectory = nil
        }
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "allow", "prefer": tls = .prefer
        case "require", "verify-ca", "verify-full": tls = .require
        case let other: throw QueueError("unknown sslmode '\(other)' (disable, prefer or require)")
        }
        password =
            components.password?.removingPercentEncoding ?? environment["PGPASSWORD"]
            ?? Self.passwordFromFile(
                path: environment["PGPASSFILE"] ?? environment["HOME"].map { $0 + "/.pgpass" },
                host: host ?? "localhost", port: port, database: database, user: user)
    }

    /// The URL without its password.
    public var description: String {
        if let socketDirectory {
            return "postgres://\(user)@/\(database)?host=\(socketDirectory)&port=\(port)"
        }
        return "postgres://\(user)@\(host ?? "")\(port == 5432 ? "" : ":\(port)")/\(database)"
    }

    /// The path of the Unix socket, for a socket connection.
    var socketPath: String? { socketDirectory.map { $0 + "/.s.PGSQL.\(port)" } }

    /// `text` with any password in it replaced, for an error message.
    static func redacted(_ text: String) -> String {
        guard var components = URLComponents(string: text), components.password != nil else { return text }
        components.password = "***"
        return components.string ?? "(a URL)"
    }

    /// The password of the first line of a `.pgpass`-style file that matches.
    static func passwordFromFile(path: String?, host: String, port: Int, database: String, user: String) -> String? {
        guard let path, let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        return passwordFromLines(text, host: host, port: port, database: database, user: user)
    }

    static func passwordFromLines(_ text: String, host: String, port: Int, database: String, user: String) -> String? {
        for line in text.split(whereSeparator: \.isNewline) where !line.hasPrefix("#") {
            // Fields are separated by ':'; '\:' and '\\' escape.
            var fields: [String] = []
            var field = ""
            var escaped = false
            for character in line {
                if escaped {
                    field.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == ":", fields.count < 4 {
                    fields.append(field)
                    field = ""
                } else {
                    field.append(character)
                }
            }
            fields.append(field)
            guard fields.count == 5 else { continue }
            let wanted = [host, String(port), database, user]
            if zip(fields.prefix(4), wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return fields[4] }
        }
        return nil
    }
}
