import Foundation

#if canImport(FoundationXML)
import FoundationXML
#endif

/// What ``SafeXML/parse(_:with:namespaces:root:invalid:)`` needs of the `XMLParser` delegate
/// that reads a document: the first error it found, and whether it saw its root open and
/// close.
protocol SafeXMLReader: XMLParserDelegate {
    var failure: DownloadError? { get }
    var sawRoot: Bool { get }
    var rootClosed: Bool { get }
}

/// Parses an XML document from someone else (a sync manifest, a Metalink file) with the
/// checks both need, in one place:
/// - no document type declaration (so no entity expansion and no external entity to fetch);
/// - through a stream, which `XMLParser` feeds to libxml2 in pieces: given a whole document
///   at once, libxml2 stops at 10 MB ("huge input lookup");
/// - FoundationXML on Linux can report success for a document with content after its root,
///   or cut off inside it: both are errors here.
enum SafeXML {
    /// Parses `data` with `reader`, whose root element is `root`.
    ///
    /// - Throws: `invalid(reason)`, for the first problem: a DTD, malformed XML (with its
    ///   line), no root, a document that ends before the root's end, or `reader`'s own
    ///   failure.
    static func parse(
        _ data: Data, with reader: some SafeXMLReader, namespaces: Bool, root: String,
        invalid: (String) -> DownloadError
    ) throws(DownloadError) {
        if data.range(of: Data("<!DOCTYPE".utf8)) != nil || data.range(of: Data("<!ENTITY".utf8)) != nil {
            throw invalid("XML document type declarations are not allowed")
        }
        let parser = XMLParser(stream: InputStream(data: data))
        parser.shouldProcessNamespaces = namespaces
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        let succeeded = parser.parse()
        if let failure = reader.failure { throw failure }
        guard succeeded, parser.parserError == nil else {
            let code = (parser.parserError as? NSError)?.code ?? -1
            let reason = errorNames[code].map { "\($0) (XMLParser error \(code))" } ?? "XMLParser error \(code)"
            throw invalid("malformed XML at line \(parser.lineNumber): \(reason)")
        }
        guard reader.sawRoot else { throw invalid("no <\(root)> element") }
        guard reader.rootClosed else {
            throw invalid("malformed XML at line \(parser.lineNumber): the document ends before </\(root)>")
        }
    }

    /// Names for the `XMLParser.ErrorCode` values a bad document most often produces.
    static let errorNames: [Int: String] = [
        4: "empty document", 5: "unexpected end of document", 9: "invalid character",
        23: "unclosed tag or extra content", 38: "attribute value without quotes",
        39: "attribute without value", 41: "duplicate attribute", 64: "bad XML declaration",
        73: "unclosed start tag", 76: "mismatched end tag", 77: "unclosed tag",
    ]
}
