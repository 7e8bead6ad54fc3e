import Crypto
import Foundation

/// What the journal's `credentials` column says about a job's credential headers: their
/// names, and either that their values are stored in `headers` (the user opted in) or a
/// key that finds them in the ``CredentialVault`` of the process that queued the job.
///
/// The key is a truncated HMAC-SHA256 of the values under a random key of that process, so
/// it reveals nothing about them, and means nothing to any other process.
///
/// Text form: `Authorization, X-Api-Key; key=3f2a…` or `Authorization; stored`
/// (`; withheld` until a vault fills in the key). Header names are tokens, which never
/// contain `,`, `;` or spaces.
struct CredentialReference: Hashable, Sendable {
    /// The credential headers' names, as given.
    var names: [String]
    /// Whether the values are in the journal's `headers` column.
    var stored: Bool
    /// The vault key, when withheld and deposited.
    var key: String?

    init(names: [String], stored: Bool, key: String? = nil) {
        self.names = names
        self.stored = stored
        self.key = key
    }

    init?(text: String) {
        guard let semicolon = text.lastIndex(of: ";") else { return nil }
        names = text[..<semicolon].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let storage = text[text.index(after: semicolon)...].trimmingCharacters(in: .whitespaces)
        stored = storage == "stored"
        key = storage.hasPrefix("key=") ? String(storage.dropFirst(4)) : nil
    }

    var text: String {
        names.joined(separator: ", ") + "; " + (stored ? "stored" : key.map { "key=" + $0 } ?? "withheld")
    }
}

/// The credential headers of the downloads a manager queued, kept in its memory only,
/// so that the journal need not store them.
///
/// Requests with the same credentials share one entry: a million URLs queued with one
/// `Authorization` header cost one entry. Jobs restored from the journal get their
/// credentials back from here; a job queued by another process, whose vault is gone,
/// cannot (see ``DownloadError/Code/credentialsRequired``).
struct CredentialVault: Sendable {
    typealias Header = (name: String, value: String)

    /// This process's random key: references mean nothing elsewhere. (Kept as bytes:
    /// `SymmetricKey` is not `Sendable`.)
    private let key: Data = {
        // Eight bytes a call to the system's generator, not one.
        var generator = SystemRandomNumberGenerator()
        var bytes = Data(count: 32)
        bytes.withUnsafeMutableBytes { buffer in
            for offset in stride(from: 0, to: 32, by: 8) {
                buffer.storeBytes(of: generator.next() as UInt64, toByteOffset: offset, as: UInt64.self)
            }
        }
        return bytes
    }()
    private var entries: [String: [Header]] = [:]
    /// The last deposit, so that a long list sharing one header is hashed once.
    private var last: (headers: [Header], key: String)?

    /// Keeps `request`'s credential headers and writes the reference that finds them into
    /// `record` (made from `request`); nothing to do when the journal stores them.
    mutating func deposit(_ request: DownloadRequest, into record: inout JobRecord) {
        guard var reference = record.credentialReference, !reference.stored else { return }
        let secret = request.headers.filter { request.isCredential($0.name) }
        let fingerprint: String
        if let last, Self.same(last.headers, secret) {
            fingerprint = last.key
        } else {
            var canonical = Data()
            for header in secret {
                canonical.append(contentsOf: Array(header.name.lowercased().utf8))
                canonical.append(0)
                canonical.append(contentsOf: Array(header.value.utf8))
                canonical.append(0)
            }
            let code = HMAC<SHA256>.authenticationCode(for: canonical, using: SymmetricKey(data: key))
            fingerprint = Hex.lowercase(code.prefix(12))
            if entries[fingerprint] == nil { entries[fingerprint] = secret }
            last = (secret, fingerprint)
        }
        reference.key = fingerprint
        record.credentials = reference.text
    }

    /// Gives `request`, rebuilt from `record`, the credential headers it was queued with.
    ///
    /// - Throws: ``DownloadError/Code/credentialsRequired`` when they are neither in the
    ///   journal nor here.
    func restore(_ request: inout DownloadRequest, from record: JobRecord) throws(DownloadError) {
        guard let reference = record.credentialReference, !reference.stored else { return }
        guard let key = reference.key, let secret = entries[key] else {
            throw DownloadError(
                .credentialsRequired,
                "started with credentials (\(reference.names.joined(separator: ", "))) that are not stored in the "
                    + "journal: run the same haul get command again with them, or pass --store-credentials "
                    + "(DownloadRequest.storesCredentials) to keep them in the journal; the download stays paused")
        }
        request.headers += secret
    }

    private static func same(_ a: [Header], _ b: [Header]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }
}
