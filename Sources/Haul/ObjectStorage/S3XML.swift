import Foundation

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// S3's XML: responses read into ``Element`` trees through ``SafeXML`` (no document type
/// declarations, so no entities), and the `CompleteMultipartUpload` request body written.
///
/// Responses are read with or without S3's namespace
/// (`xmlns="http://s3.amazonaws.com/doc/2006-03-01/"`): AWS and SeaweedFS send it on
/// results, and `<Error>` bodies usually come without it. Elements of other namespaces are
/// skipped.
///
/// ```swift
/// switch try S3XML.decode(S3InitiatedUpload.self, from: body) {
/// case .value(let upload): upload.uploadID
/// case .error(let error): throw …  // S3 can answer 200 with an <Error> body
/// }
/// ```
enum S3XML {
    /// The namespace of S3's XML.
    static let namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

    /// An element of a response: its local name, its own text (not trimmed: a key may begin
    /// or end with spaces) and its child elements in document order.
    struct Element: Sendable, Hashable {
        /// The local name, such as `UploadId`.
        let name: String
        /// The text directly inside the element, entities decoded.
        var text: String
        /// The child elements, in document order.
        var children: [Element]

        /// The first child named `name`.
        func child(_ name: String) -> Element? {
            children.first { $0.name == name }
        }

        /// Every child named `name`, in document order.
        func children(_ name: String) -> [Element] {
            children.filter { $0.name == name }
        }
    }

    /// What a response body holds: the expected result, or S3's `<Error>`.
    enum Reply<Value: Sendable>: Sendable {
        /// The expected result.
        case value(Value)
        /// An `<Error>` body (sent with an error status, and by `CompleteMultipartUpload`
        /// sometimes with 200).
        case error(S3ErrorResponse)
    }

    /// Reads `data` as a `Value` or an `<Error>`.
    ///
    /// - Throws: ``DownloadError/Code/protocolViolation`` with a message starting
    ///   `invalid S3 response:` for malformed XML, a DTD, a root element other than
    ///   `Value.rootName` or `Error`, or a result missing what it must have.
    static func decode<Value: S3XMLDecodable>(
        _ type: Value.Type, from data: Data
    ) throws(DownloadError) -> Reply<Value> {
        let root = try parse(data, roots: [Value.rootName, S3ErrorResponse.rootName])
        if root.name == S3ErrorResponse.rootName { return .error(try S3ErrorResponse(element: root)) }
        return .value(try Value(element: root))
    }

    /// Reads `data` into its root element, which must be named one of `roots`.
    ///
    /// - Throws: ``DownloadError/Code/protocolViolation``, as ``decode(_:from:)``.
    static func parse(_ data: Data, roots: [String]) throws(DownloadError) -> Element {
        let reader = S3XMLTreeReader(roots: roots)
        try SafeXML.parse(
            data, with: reader, namespaces: true, root: roots.first ?? "", invalid: { invalid($0) })
        guard let root = reader.root else { throw invalid("no <\(roots.first ?? "")> element") }
        return root
    }

    /// `invalid S3 response: REASON`, a protocol violation.
    static func invalid(_ reason: String) -> DownloadError {
        DownloadError(.protocolViolation, "invalid S3 response: \(reason)")
    }

    // MARK: - Reading values

    /// The text of `element`'s child `name`, or an error naming both.
    static func required(_ name: String, in element: Element) throws(DownloadError) -> String {
        guard let text = element.child(name)?.text, !text.isEmpty else {
            throw invalid("<\(element.name)> has no <\(name)>")
        }
        return text
    }

    /// The integer in `text` (white space around it ignored), or an error naming `what`.
    static func integer(_ text: String, _ what: String) throws(DownloadError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = Int64(trimmed)
        else { throw invalid("\(what) \(String(reflecting: text)) is not a non-negative integer") }
        return value
    }

    /// `true` or `false` in `text` (any case, white space ignored); `false` without a text.
    static func boolean(_ text: String?, _ what: String) throws(DownloadError) -> Bool {
        switch text?.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() {
        case nil, "", "false": return false
        case "true": return true
        case let other?: throw invalid("\(what) \(String(reflecting: other)) is neither true nor false")
        }
    }

    // MARK: - Writing

    /// The body of `CompleteMultipartUpload`: `parts` in ascending part number, each with
    /// its `ETag` and, when it has one, `ChecksumSHA256`.
    ///
    /// ```xml
    /// <CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
    ///   <Part><PartNumber>1</PartNumber><ETag>&quot;…&quot;</ETag></Part>
    /// </CompleteMultipartUpload>
    /// ```
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` for no parts, a part number outside
    ///   1…10,000 or given twice, or an ETag or checksum with a character XML cannot hold.
    static func completeMultipartUploadBody(_ parts: [S3CompletedPart]) throws(DownloadError) -> Data {
        guard !parts.isEmpty else {
            throw DownloadError.invalid("a multipart upload is completed with at least one part")
        }
        let sorted = parts.sorted { $0.number < $1.number }
        var xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUpload xmlns=\"\(namespace)\">"
        var previous = 0
        for part in sorted {
            guard (1...Int(MultipartPlan.maximumPartCount)).contains(part.number) else {
                throw DownloadError.invalid("S3 part number \(part.number) is not between 1 and 10000")
            }
            guard part.number != previous else { throw DownloadError.invalid("S3 part \(part.number) is listed twice") }
            previous = part.number
            xml += "<Part><PartNumber>\(part.number)</PartNumber><ETag>\(try escaped(part.etag))</ETag>"
            if let checksum = part.checksumSHA256 { xml += "<ChecksumSHA256>\(try escaped(checksum))</ChecksumSHA256>" }
            xml += "</Part>"
        }
        xml += "</CompleteMultipartUpload>"
        return Data(xml.utf8)
    }

    /// `text` with `&`, `<`, `>`, `"` and `'` as entities.
    ///
    /// - Throws: ``DownloadError/Code/invalidRequest`` for a character XML 1.0 cannot hold
    ///   (control characters other than tab and line breaks, U+FFFE, U+FFFF).
    static func escaped(_ text: String) throws(DownloadError) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            default:
                guard scalar.value >= 0x20, scalar.value != 0xFFFE, scalar.value != 0xFFFF else {
                    throw DownloadError.invalid(
                        "\(String(reflecting: text)) holds U+\(String(scalar.value, radix: 16, uppercase: true)), "
                            + "which XML cannot carry")
                }
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}

/// A result read from an S3 XML response.
protocol S3XMLDecodable: Sendable {
    /// The name of the response's root element, such as `ListPartsResult`.
    static var rootName: String { get }
    /// Reads the result from its root element.
    init(element: S3XML.Element) throws(DownloadError)
}

/// The `XMLParser` delegate behind ``S3XML/parse(_:roots:)``: builds the tree of elements in
/// S3's namespace (or none), skips elements of other namespaces, and fails on a root it does
/// not expect.
private final class S3XMLTreeReader: NSObject, SafeXMLReader {
    /// The first problem found; parsing stops there.
    var failure: DownloadError?
    /// Whether the root element was seen.
    var sawRoot = false
    /// Whether the root element was closed.
    var rootClosed = false
    /// The root element, once closed.
    var root: S3XML.Element?
    /// The root names accepted.
    private let roots: [String]
    /// The open elements, outermost first.
    private var stack: [S3XML.Element] = []
    /// How deep inside an element of another namespace the parser is (0 outside one).
    private var skipping = 0

    init(roots: [String]) {
        self.roots = roots
    }

    func parser(
        _ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?,
        qualifiedName qName: String?, attributes: [String: String] = [:]
    ) {
        guard failure == nil else { return }
        if skipping > 0 {
            skipping += 1
            return
        }
        let namespace = namespaceURI ?? ""
        guard namespace.isEmpty || namespace == S3XML.namespace else {
            if stack.isEmpty {
                fail(parser, S3XML.invalid("the root <\(elementName)> is in the namespace \"\(namespace)\", not S3's"))
            }
            skipping = 1
            return
        }
        if stack.isEmpty {
            guard !sawRoot else { return fail(parser, S3XML.invalid("a second root element <\(elementName)>")) }
            sawRoot = true
            guard roots.contains(elementName) else {
                let expected = roots.map { "<\($0)>" }.joined(separator: " or ")
                return fail(parser, S3XML.invalid("the root element is <\(elementName)>, not \(expected)"))
            }
        }
        stack.append(S3XML.Element(name: elementName, text: "", children: []))
    }

    func parser(
        _ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName qName: String?
    ) {
        guard failure == nil else { return }
        if skipping > 0 {
            skipping -= 1
            return
        }
        guard let element = stack.popLast() else { return }
        if let parent = stack.indices.last {
            stack[parent].children.append(element)
        } else {
            root = element
            rootClosed = true
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        guard skipping == 0, let index = stack.indices.last else { return }
        stack[index].text += string
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        guard skipping == 0, let index = stack.indices.last else { return }
        stack[index].text += String(decoding: CDATABlock, as: UTF8.self)
    }

    func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
        fail(parser, S3XML.invalid("entity declarations are not allowed"))
    }

    func parser(
        _ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?
    ) {
        fail(parser, S3XML.invalid("entity declarations are not allowed"))
    }

    private func fail(_ parser: XMLParser, _ error: DownloadError) {
        guard failure == nil else { return }
        failure = error
        parser.abortParsing()
    }
}
