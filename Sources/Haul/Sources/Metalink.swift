package import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// A Metalink 4 document (RFC 5854, `.meta4`): files, each with its mirrors and the
/// digests that check it.
///
/// ``parse(_:)`` reads and validates the XML, so a parsed document never names a file
/// outside its destination directory, never names the same file twice, and gives every file
/// at least one `http` or `https` URL, its mirrors sorted by preference.
///
/// ```xml
/// <metalink xmlns="urn:ietf:params:xml:ns:metalink">
///   <file name="dist/example.iso">
///     <size>14471447</size>
///     <hash type="sha-256">…</hash>
///     <pieces length="262144" type="sha-256"><hash>…</hash>…</pieces>
///     <url location="de" priority="1">https://de.example.com/example.iso</url>
///     <url location="us" priority="2">https://us.example.com/example.iso</url>
///   </file>
/// </metalink>
/// ```
///
/// ```swift
/// let metalink = try Metalink.parse(data)
/// for file in metalink.files {
///     let mirrors = file.preferredSources(location: "de")
/// }
/// ```
///
/// What is kept: a file's `name`, `size`, whole-file `hash`es and `pieces` of an algorithm
/// Haul checks (``Checksum/Algorithm``: `sha-256`, `sha-1`, `md5`; others, such as
/// `sha-512`, are skipped), and its `http` and `https` `url`s (`ftp:`, `magnet:` and other
/// schemes are skipped). Everything else is ignored: `metaurl` (torrents and other
/// metadata, which Haul does not fetch), descriptive elements such as `description`,
/// `publisher` or `signature`, and elements of other namespaces (RFC 5854 extensions).
///
/// Metalink 3 documents (`http://www.metalinker.org/`) are refused.
package struct Metalink: Sendable, Equatable {
    /// The files, in document order.
    package var files: [File]

    /// Creates a document from already validated files; ``parse(_:)`` is how a document is
    /// normally made.
    package init(files: [File]) {
        self.files = files
    }

    /// One `<file>` of a Metalink document.
    package struct File: Sendable, Equatable {
        /// Where the file goes, relative to the destination directory, with `/` between
        /// components; never absolute and never with a `.` or `..` component.
        package var name: String
        /// The size in bytes, if the document gives one.
        package var size: Int64?
        /// Digests of the whole file, one per algorithm, in document order.
        package var hashes: [Checksum]
        /// Digests of consecutive pieces, if the document gives them in an algorithm Haul
        /// checks (the strongest, when it gives several).
        package var pieces: Pieces?
        /// The `http` and `https` mirrors, by ``Source/priority`` (most preferred first);
        /// mirrors of equal priority keep their document order.
        ///
        /// `<metaurl>` elements (torrents and other metadata files) are not kept.
        package var urls: [Source]

        /// Creates a file; ``Metalink/parse(_:)`` is how files are normally made.
        package init(name: String, size: Int64? = nil, hashes: [Checksum] = [], pieces: Pieces? = nil, urls: [Source]) {
            self.name = name
            self.size = size
            self.hashes = hashes
            self.pieces = pieces
            self.urls = urls
        }

        /// The mirrors to try, in order: those at `location` first, then the others, each
        /// group by ``Source/priority`` as in ``urls``.
        ///
        /// `location` is an ISO 3166-1 alpha-2 country code such as `"de"`, compared
        /// without regard to case, like aria2's `--metalink-location`. With `nil` or an
        /// empty string the order is ``urls``.
        ///
        /// ```swift
        /// file.preferredSources(location: "fr").first?.url
        /// ```
        package func preferredSources(location: String?) -> [Source] {
            guard let location = location?.lowercased(), !location.isEmpty else { return urls }
            return urls.filter { $0.location == location } + urls.filter { $0.location != location }
        }

        /// The whole-file digest to check: the strongest the document gives (SHA-256, then
        /// SHA-1, then MD5).
        package var strongestHash: Checksum? {
            Checksum.Algorithm.allCases.lazy.compactMap { algorithm in hashes.first { $0.algorithm == algorithm } }.first
        }
    }

    /// A file's piece digests: `<pieces length="N" type="sha-256"><hash>…</hash>…</pieces>`.
    package struct Pieces: Sendable, Equatable {
        /// The length of every piece but the last, in bytes; more than zero.
        package var length: Int64
        /// The digest algorithm of every piece.
        package var algorithm: Checksum.Algorithm
        /// One digest per piece, in order, as lowercase hexadecimal.
        package var hashes: [String]

        /// Creates piece digests; ``Metalink/parse(_:)`` is how they are normally made.
        package init(length: Int64, algorithm: Checksum.Algorithm, hashes: [String]) {
            self.length = length
            self.algorithm = algorithm
            self.hashes = hashes
        }
    }

    /// One mirror of a file: `<url priority="1" location="de">https://…</url>`.
    package struct Source: Sendable, Equatable {
        /// An absolute `http` or `https` URL.
        package var url: URL
        /// From 1 (most preferred) to 999999; a `<url>` without a priority has 999999,
        /// as RFC 5854 says.
        package var priority: Int
        /// The mirror's ISO 3166-1 alpha-2 country code, lowercased, if the document gives one.
        package var location: String?

        /// Creates a mirror; `location` is lowercased.
        package init(url: URL, priority: Int = Metalink.lowestPriority, location: String? = nil) {
            self.url = url
            self.priority = priority
            self.location = location?.lowercased()
        }
    }

    /// The XML namespace of Metalink 4 (RFC 5854).
    package static let namespace = "urn:ietf:params:xml:ns:metalink"
    /// The XML namespace of Metalink 3, which Haul does not read.
    static let version3Namespace = "http://www.metalinker.org/"
    /// The priority of a `<url>` that has none, and the largest allowed (RFC 5854 §4.2.16.2).
    package static let lowestPriority = 999_999

    /// Parses and validates a Metalink 4 document.
    ///
    /// - Throws: ``DownloadError/Code/invalidManifest`` with a message that starts
    ///   `invalid Metalink: ` and names the offending file and line: malformed XML, a
    ///   document type declaration, a root other than `<metalink>` in the Metalink 4
    ///   namespace (a Metalink 3 document says so), no `<file>`, a file name that is empty,
    ///   absolute, or has a `.` or `..` component, a backslash or a control character, the
    ///   same name twice, a size or piece length that is not a non-negative (positive)
    ///   integer, a digest of the wrong length or not hexadecimal, a number of piece digests
    ///   that does not match the size, a priority outside 1…999999, or a file with no `http`
    ///   or `https` URL.
    package static func parse(_ data: Data) throws(DownloadError) -> Metalink {
        let reader = MetalinkXMLReader()
        try SafeXML.parse(data, with: reader, namespaces: true, root: "metalink", invalid: invalid)
        guard !reader.files.isEmpty else { throw invalid("the document lists no <file>") }
        return Metalink(files: reader.files)
    }

    /// `invalid Metalink: REASON`.
    static func invalid(_ reason: String) -> DownloadError {
        DownloadError(.invalidManifest, "invalid Metalink: \(reason)")
    }

    /// The algorithm a `type` attribute names, if Haul checks it: RFC 5854 uses the IANA
    /// names `sha-256`, `sha-1` and `md5` (and others Haul skips, such as `sha-512`).
    static func algorithm(named type: String) -> Checksum.Algorithm? {
        Checksum.Algorithm(rawValue: type.lowercased())
    }

    /// How strong `algorithm` is, to choose among several `<pieces>`: higher is stronger.
    static func strength(_ algorithm: Checksum.Algorithm) -> Int {
        switch algorithm {
        case .sha256: 3
        case .sha1: 2
        case .md5: 1
        }
    }

    /// `text` as lowercase hexadecimal of `algorithm`'s length, or `nil` if it is not.
    static func digest(_ text: String, _ algorithm: Checksum.Algorithm) -> String? {
        let lowered = text.lowercased()
        guard lowered.utf8.count == algorithm.hexLength,
            lowered.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        else { return nil }
        return lowered
    }

    /// `text` as a non-negative integer written in ASCII digits only (no sign, no spaces).
    static func nonNegativeInteger(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(text)
    }

    /// `text` as an absolute `http` or `https` URL with a host, or `nil` for anything else
    /// (other schemes, relative references, white space or control characters).
    static func httpURL(_ text: String) -> URL? {
        guard !text.isEmpty,
            !text.unicodeScalars.contains(where: { $0.value <= 0x20 || (0x7F...0x9F).contains($0.value) }),
            let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            components.host?.isEmpty == false
        else { return nil }
        return URL(string: text)
    }
}

/// The `XMLParser` delegate behind ``Metalink/parse(_:)``: walks the elements it knows in
/// the Metalink 4 namespace, skips everything else, and stops at the first error.
private final class MetalinkXMLReader: NSObject, SafeXMLReader {
    /// An open element, and what its end means.
    private enum Element {
        case root
        case file
        case size
        /// A whole-file `<hash>` of a type Haul checks; other types are `.ignored`.
        case hash(Checksum.Algorithm)
        case pieces
        case pieceHash
        case url(priority: Int, location: String?)
        /// Anything else, with all it contains.
        case ignored
    }

    /// A `<file>` being read.
    private struct Draft {
        var name: String
        var line: Int
        var size: Int64?
        var hashes: [Checksum] = []
        /// Every `<pieces>` of a supported type, in document order.
        var pieces: [Metalink.Pieces] = []
        var urls: [Metalink.Source] = []
    }

    var files: [Metalink.File] = []
    var failure: DownloadError?
    /// Whether the root element was seen.
    var sawRoot = false
    /// Whether `</metalink>` was seen.
    var rootClosed = false
    private var stack: [Element] = []
    private var text = ""
    private var draft: Draft?
    /// The line of each file name already read.
    private var lineByName: [String: Int] = [:]

    func parser(
        _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
        qualifiedName qName: String?, attributes: [String: String] = [:]
    ) {
        guard failure == nil else { return }
        let line = parser.lineNumber
        guard let parent = stack.last else {
            startRoot(parser, elementName, namespaceURI: namespaceURI, line: line)
            return
        }
        guard namespaceURI == Metalink.namespace else { return stack.append(.ignored) }
        do throws(DownloadError) {
            stack.append(try open(elementName, in: parent, attributes: attributes, line: line))
            text = ""
        } catch {
            fail(parser, error)
        }
    }

    func parser(
        _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
    ) {
        guard failure == nil, let element = stack.popLast() else { return }
        do throws(DownloadError) {
            try close(element, text: text.trimmingCharacters(in: .whitespacesAndNewlines))
        } catch {
            fail(parser, error)
        }
        text = ""
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        if collectsText { text += string }
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        if collectsText { text += String(decoding: CDATABlock, as: UTF8.self) }
    }

    func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
        fail(parser, Metalink.invalid("entity declarations are not allowed (line \(parser.lineNumber))"))
    }

    func parser(
        _ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?
    ) {
        fail(parser, Metalink.invalid("entity declarations are not allowed (line \(parser.lineNumber))"))
    }

    /// Whether the innermost open element is one whose text is read.
    private var collectsText: Bool {
        switch stack.last {
        case .size, .hash, .pieceHash, .url: true
        default: false
        }
    }

    private func fail(_ parser: XMLParser, _ error: DownloadError) {
        guard failure == nil else { return }
        failure = error
        parser.abortParsing()
    }

    private func startRoot(_ parser: XMLParser, _ name: String, namespaceURI: String?, line: Int) {
        guard !sawRoot else {
            return fail(parser, Metalink.invalid("malformed XML at line \(line): a second root element"))
        }
        sawRoot = true
        guard name == "metalink" else {
            return fail(parser, Metalink.invalid("the root element at line \(line) is <\(name)>, not <metalink>"))
        }
        switch namespaceURI ?? "" {
        case Metalink.namespace:
            stack.append(.root)
        case Metalink.version3Namespace:
            fail(parser, Metalink.invalid("Metalink 3 documents are not supported; use Metalink 4 (RFC 5854)"))
        case "":
            fail(
                parser,
                Metalink.invalid("<metalink> has no namespace: Metalink 4 uses xmlns=\"\(Metalink.namespace)\""))
        case let other:
            fail(
                parser,
                Metalink.invalid(
                    "<metalink> is in the namespace \"\(other)\", not \"\(Metalink.namespace)\" (Metalink 4)"))
        }
    }

    /// `invalid Metalink: file "NAME" (line N): REASON`.
    private func problem(_ reason: String) -> DownloadError {
        guard let draft else { return Metalink.invalid(reason) }
        return Metalink.invalid("file \(String(reflecting: draft.name)) (line \(draft.line)): \(reason)")
    }

    /// What the start of `name`, a Metalink element inside `parent`, opens.
    private func open(
        _ name: String, in parent: Element, attributes: [String: String], line: Int
    ) throws(DownloadError) -> Element {
        switch (parent, name) {
        case (.root, "file"):
            guard let fileName = attributes["name"] else {
                throw Metalink.invalid("the <file> at line \(line) has no name attribute")
            }
            draft = Draft(name: fileName, line: line)
            if let reason = Manifest.pathProblem(fileName) { throw problem(reason) }
            if let first = lineByName[fileName] { throw problem("duplicate name, already the file at line \(first)") }
            lineByName[fileName] = line
            return .file
        case (.file, "size"):
            return .size
        case (.file, "hash"):
            guard let type = attributes["type"] else { throw problem("a <hash> at line \(line) has no type attribute") }
            return Metalink.algorithm(named: type).map(Element.hash) ?? .ignored
        case (.file, "pieces"):
            guard let type = attributes["type"] else { throw problem("<pieces> at line \(line) has no type attribute") }
            guard let algorithm = Metalink.algorithm(named: type) else { return .ignored }
            let lengthText = attributes["length"] ?? ""
            guard let length = Metalink.nonNegativeInteger(lengthText), length > 0 else {
                throw problem(
                    "<pieces> at line \(line): length \(String(reflecting: lengthText)) is not a positive integer")
            }
            draft?.pieces.append(Metalink.Pieces(length: length, algorithm: algorithm, hashes: []))
            return .pieces
        case (.pieces, "hash"):
            return .pieceHash
        case (.file, "url"):
            var priority = Metalink.lowestPriority
            if let priorityText = attributes["priority"] {
                guard let value = Metalink.nonNegativeInteger(priorityText),
                    (1...Int64(Metalink.lowestPriority)).contains(value)
                else {
                    throw problem(
                        "the <url> at line \(line) has priority \(String(reflecting: priorityText)), "
                            + "not a number from 1 to 999999")
                }
                priority = Int(value)
            }
            let location = attributes["location"]?.trimmingCharacters(in: .whitespaces)
            return .url(priority: priority, location: location?.isEmpty == false ? location : nil)
        default:
            // metaurl (torrents and other metadata: not fetched), descriptive elements, and
            // anything in a place RFC 5854 does not define.
            return .ignored
        }
    }

    /// Applies the end of `element`, whose text (trimmed) is `text`.
    private func close(_ element: Element, text: String) throws(DownloadError) {
        switch element {
        case .root:
            rootClosed = true
        case .file:
            guard let draft else { return }
            files.append(try finish(draft))
            self.draft = nil
        case .size:
            guard draft?.size == nil else { throw problem("more than one <size>") }
            guard let size = Metalink.nonNegativeInteger(text) else {
                throw problem("size \(String(reflecting: text)) is not a non-negative integer")
            }
            draft?.size = size
        case .hash(let algorithm):
            guard let hex = Metalink.digest(text, algorithm) else {
                throw problem(
                    "\(algorithm.rawValue) hash \(String(reflecting: text)) "
                        + "is not \(algorithm.hexLength) hexadecimal digits")
            }
            guard draft?.hashes.contains(where: { $0.algorithm == algorithm }) == false else {
                throw problem("more than one \(algorithm.rawValue) <hash>")
            }
            do throws(DownloadError) {
                draft?.hashes.append(try Checksum(algorithm, hex: hex))
            } catch {
                throw problem(error.message)
            }
        case .pieceHash:
            // Only the algorithm and count are read, and the digest is appended in place: a
            // copy of the draft or of its pieces would copy every digest on every piece.
            guard let index = draft?.pieces.indices.last, let algorithm = draft?.pieces[index].algorithm else { return }
            guard let hex = Metalink.digest(text, algorithm) else {
                let number = draft?.pieces[index].hashes.count ?? 0
                throw problem(
                    "piece \(number) \(algorithm.rawValue) hash \(String(reflecting: text)) "
                        + "is not \(algorithm.hexLength) hexadecimal digits")
            }
            draft?.pieces[index].hashes.append(hex)
        case .pieces, .ignored:
            break
        case .url(let priority, let location):
            guard let url = Metalink.httpURL(text) else { return }
            draft?.urls.append(Metalink.Source(url: url, priority: priority, location: location))
        }
    }

    /// The file `draft` describes, once its size, pieces and URLs are checked together.
    private func finish(_ draft: Draft) throws(DownloadError) -> Metalink.File {
        for pieces in draft.pieces {
            if let size = draft.size {
                let expected = size / pieces.length + (size % pieces.length == 0 ? 0 : 1)
                guard pieces.hashes.count == expected else {
                    throw problem(
                        "<pieces> of \(pieces.length) bytes has \(pieces.hashes.count) hashes, "
                            + "but a file of \(size) bytes has \(expected) pieces")
                }
            } else if pieces.hashes.isEmpty {
                throw problem("<pieces> has no <hash>")
            }
        }
        guard !draft.urls.isEmpty else {
            throw problem("no http or https <url> (other schemes and <metaurl> are not used)")
        }
        // The strongest algorithm; the first of them if several <pieces> share it.
        let pieces = draft.pieces.enumerated().max { a, b in
            let (left, right) = (Metalink.strength(a.element.algorithm), Metalink.strength(b.element.algorithm))
            return left != right ? left < right : a.offset > b.offset
        }?.element
        // By priority, and by document order for equal priorities.
        let urls = draft.urls.enumerated()
            .sorted { a, b in
                a.element.priority != b.element.priority ? a.element.priority < b.element.priority : a.offset < b.offset
            }
            .map(\.element)
        return Metalink.File(name: draft.name, size: draft.size, hashes: draft.hashes, pieces: pieces, urls: urls)
    }
}
