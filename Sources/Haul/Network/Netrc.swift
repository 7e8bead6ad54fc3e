import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Credentials from a netrc file (`~/.netrc`), as curl and ftp read it.
///
/// A netrc file lists machines with a login and a password:
///
/// ```
/// machine files.example.com login alice password s3cret
/// default login anonymous password guest
/// ```
///
/// `machine NAME` starts an entry for that host; `default` one for every host no entry
/// names (it should come last). Within an entry, `login` and `password` take the next
/// word; `account` is read and ignored; `macdef NAME` skips a macro up to the next empty
/// line. Words are separated by spaces, tabs or line breaks; a word in double quotes may
/// hold spaces and the escapes `\"`, `\\`, `\n`, `\r` and `\t`; a line starting with `#`
/// is a comment.
///
/// A manager with ``DownloadManager/Configuration/netrc`` sends a request
/// `Authorization: Basic …` from the entry of its URL's host when the request carries no
/// `Authorization` of its own, and like every credential only to that origin: a redirect
/// to another host or port does not get it (see ``DownloadRequest/sensitiveHeaderNames``).
///
/// ```swift
/// var configuration = DownloadManager.Configuration()
/// configuration.netrc = try Netrc(contentsOfFile: Netrc.defaultPath)
/// ```
public struct Netrc: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// A login and password.
    public struct Credentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
        CustomReflectable
    {
        /// The user name.
        public let login: String
        /// The password.
        public let password: String

        /// Creates credentials.
        public init(login: String, password: String) {
            self.login = login
            self.password = password
        }

        /// The login only: the password is never shown.
        public var description: String { "\(login):***" }

        /// The same as ``description``.
        public var debugDescription: String { "Credentials(\(description))" }

        /// The login only (what `dump` shows).
        public var customMirror: Mirror { Mirror(self, children: ["login": login]) }

        /// The `Authorization` value for these credentials.
        var basicAuthorization: String {
            "Basic " + Data("\(login):\(password)".utf8).base64EncodedString()
        }
    }

    /// The entries by host name, lowercased.
    let machines: [String: Credentials]
    /// The `default` entry.
    let fallback: Credentials?

    /// The hosts listed, without any login or password: safe to print.
    public var description: String {
        "Netrc(machines: \(machines.keys.sorted()), default: \(fallback != nil))"
    }

    /// The hosts only (what `dump` shows).
    public var customMirror: Mirror {
        Mirror(self, children: ["machines": machines.keys.sorted(), "hasDefault": fallback != nil])
    }

    /// `$NETRC` when set, else `~/.netrc`, as curl looks for it.
    public static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["NETRC"], !path.isEmpty { return path }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return (home as NSString).appendingPathComponent(".netrc")
    }

    /// Parses the text of a netrc file.
    ///
    /// An entry without a password is ignored (there is nothing to send); for a host
    /// listed twice, the first entry counts, as in curl.
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` naming the line of a keyword
    ///   without its value, an unterminated quote, or an unknown word (the values are
    ///   never shown).
    public init(parsing text: String) throws(DownloadError) {
        var machines: [String: Credentials] = [:]
        var fallback: Credentials?
        var tokens = Tokenizer(text)
        enum Target { case machine(String), fallback }
        var target: Target?
        var login: String?
        var password: String?
        func close() {
            guard let target, let password else { return }
            let credentials = Credentials(login: login ?? "", password: password)
            switch target {
            case .machine(let name):
                if machines[name] == nil { machines[name] = credentials }
            case .fallback:
                if fallback == nil { fallback = credentials }
            }
        }
        func value(after keyword: String, line: Int) throws(DownloadError) -> String {
            guard let next = try tokens.next() else {
                throw DownloadError(.invalidConfiguration, "netrc line \(line): '\(keyword)' without a value")
            }
            return next.text
        }
        while let token = try tokens.next() {
            switch token.text {
            case "machine":
                close()
                target = .machine(try value(after: "machine", line: token.line).lowercased())
                login = nil
                password = nil
            case "default":
                close()
                target = .fallback
                login = nil
                password = nil
            case "login" where target != nil:
                login = try value(after: "login", line: token.line)
            case "password" where target != nil:
                password = try value(after: "password", line: token.line)
            case "account" where target != nil:
                _ = try value(after: "account", line: token.line)
            case "macdef":
                close()
                target = nil
                _ = try value(after: "macdef", line: token.line)
                tokens.skipMacro()
            default:
                throw DownloadError(
                    .invalidConfiguration,
                    target == nil
                        ? "netrc line \(token.line): expected 'machine', 'default' or 'macdef'"
                        : "netrc line \(token.line): unknown keyword (expected login, password, account, machine, default or macdef)"
                )
            }
        }
        close()
        self.machines = machines
        self.fallback = fallback
    }

    /// Reads and parses the netrc file at `path`. Blocking: it reads the file; call it
    /// off any event loop.
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` when the file cannot be
    ///   read, or does not parse (see ``init(parsing:)``); the message names the file.
    public init(contentsOfFile path: String) throws(DownloadError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let reason = access(path, R_OK) == 0 ? "\(error.localizedDescription)" : String(cString: strerror(errno))
            throw DownloadError(.invalidConfiguration, "cannot read the netrc file \(path): \(reason)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw DownloadError(.invalidConfiguration, "the netrc file \(path) is not UTF-8 text")
        }
        do {
            try self.init(parsing: text)
        } catch {
            throw DownloadError(.invalidConfiguration, "\(path): \(error.message)")
        }
    }

    /// Whether the file at `path` can be read by other users (mode bits 044): curl reads
    /// such a file anyway, but a password in it is not private. `false` when it cannot be
    /// examined.
    public static func isReadableByOthers(path: String) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        return info.st_mode & 0o044 != 0
    }

    /// The credentials for `host`: its `machine` entry, else the `default` one.
    public func credentials(forHost host: String) -> Credentials? {
        var name = host.lowercased()
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        return machines[name] ?? fallback
    }

    /// Splits netrc text into words, with the line each starts on.
    private struct Tokenizer {
        let scalars: [Unicode.Scalar]
        var index = 0
        var line = 1

        init(_ text: String) { scalars = Array(text.unicodeScalars) }

        mutating func next() throws(DownloadError) -> (text: String, line: Int)? {
            while index < scalars.count {
                let c = scalars[index]
                if c == "\n" {
                    line += 1
                    index += 1
                } else if c == " " || c == "\t" || c == "\r" {
                    index += 1
                } else if c == "#" && atLineStart {
                    while index < scalars.count, scalars[index] != "\n" { index += 1 }
                } else {
                    break
                }
            }
            guard index < scalars.count else { return nil }
            let start = line
            var word = String.UnicodeScalarView()
            if scalars[index] == "\"" {
                index += 1
                while true {
                    guard index < scalars.count, scalars[index] != "\n" else {
                        throw DownloadError(.invalidConfiguration, "netrc line \(start): a quote that does not end")
                    }
                    let c = scalars[index]
                    index += 1
                    if c == "\"" { break }
                    if c == "\\", index < scalars.count {
                        let escaped = scalars[index]
                        index += 1
                        switch escaped {
                        case "n": word.append("\n")
                        case "r": word.append("\r")
                        case "t": word.append("\t")
                        default: word.append(escaped)
                        }
                    } else {
                        word.append(c)
                    }
                }
            } else {
                while index < scalars.count {
                    let c = scalars[index]
                    if c == " " || c == "\t" || c == "\r" || c == "\n" { break }
                    word.append(c)
                    index += 1
                }
            }
            return (String(word), start)
        }

        /// Whether `index` is the first non-blank character of its line.
        private var atLineStart: Bool {
            var i = index - 1
            while i >= 0 {
                let c = scalars[i]
                if c == "\n" { return true }
                if c != " " && c != "\t" { return false }
                i -= 1
            }
            return true
        }

        /// Skips a macro definition: everything up to an empty line.
        mutating func skipMacro() {
            // The rest of the macdef line.
            while index < scalars.count, scalars[index] != "\n" { index += 1 }
            while index < scalars.count {
                // At a line break: an empty line ends the macro.
                index += 1
                line += 1
                var lineEnd = index
                while lineEnd < scalars.count, scalars[lineEnd] != "\n" { lineEnd += 1 }
                let blank = scalars[index..<lineEnd].allSatisfy { $0 == " " || $0 == "\t" || $0 == "\r" }
                index = lineEnd
                if blank { return }
            }
        }
    }
}
