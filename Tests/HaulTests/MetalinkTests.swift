import Foundation
import Haul
import Testing

@Suite("Metalink documents")
struct MetalinkTests {
    static let sha256 = String(repeating: "ab", count: 32)
    static let sha1 = String(repeating: "cd", count: 20)
    static let md5 = String(repeating: "ef", count: 16)

    /// A Metalink 4 document with `body` inside its root.
    static func document(_ body: String) -> Data {
        Data(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
            \(body)
            </metalink>
            """.utf8)
    }

    /// A `<file>` with one https URL after `body`, so that only `body` can be wrong.
    static func file(_ name: String, _ body: String = "") -> String {
        """
          <file name="\(name)">
            \(body)
            <url>https://example.com/\(name)</url>
          </file>
        """
    }

    static func url(_ text: String) throws -> URL {
        try #require(URL(string: text))
    }

    // MARK: - Reading

    @Test func aFullDocumentIsRead() throws {
        // Given: two files with sizes, digests, pieces, mirrors and elements Haul ignores
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <generator>MirrorBrain/2.9.2</generator>
              <published>2026-01-01T00:00:00Z</published>
              <file name="dist/example.iso">
                <description>An example</description>
                <size>600000</size>
                <hash type="sha-256">\(Self.sha256.uppercased())</hash>
                <hash type="sha-512">\(String(repeating: "0", count: 128))</hash>
                <pieces length="262144" type="sha-256">
                  <hash>\(String(repeating: "1", count: 64))</hash>
                  <hash>\(String(repeating: "2", count: 64))</hash>
                  <hash>\(String(repeating: "A", count: 64))</hash>
                </pieces>
                <url location="de" priority="2">https://de.example.com/example.iso</url>
                <url location="US" priority="1">http://us.example.com/example.iso</url>
                <url priority="3">https://any.example.com/example.iso?a=1&amp;b=2</url>
                <metaurl mediatype="torrent" priority="1">https://example.com/example.iso.torrent</metaurl>
              </file>
              <file name="notes.txt">
                <hash type="md5">\(Self.md5)</hash>
                <hash type="sha-1">\(Self.sha1)</hash>
                <url>
                  https://example.com/notes.txt
                </url>
              </file>
            </metalink>
            """

        // When
        let metalink = try Metalink.parse(Data(xml.utf8))

        // Then
        let expected = Metalink(files: [
            Metalink.File(
                name: "dist/example.iso", size: 600_000,
                hashes: [try Checksum(.sha256, hex: Self.sha256)],
                pieces: Metalink.Pieces(
                    length: 262_144, algorithm: .sha256,
                    hashes: ["1", "2", "a"].map { String(repeating: $0, count: 64) }),
                urls: [
                    Metalink.Source(url: try Self.url("http://us.example.com/example.iso"), priority: 1, location: "us"),
                    Metalink.Source(url: try Self.url("https://de.example.com/example.iso"), priority: 2, location: "de"),
                    Metalink.Source(url: try Self.url("https://any.example.com/example.iso?a=1&b=2"), priority: 3),
                ]),
            Metalink.File(
                name: "notes.txt",
                hashes: [try Checksum(.md5, hex: Self.md5), try Checksum(.sha1, hex: Self.sha1)],
                urls: [Metalink.Source(url: try Self.url("https://example.com/notes.txt"), priority: 999_999)]),
        ])
        #expect(metalink == expected)
    }

    @Test func urlsAreSortedByPriorityKeepingDocumentOrderForTies() throws {
        // Given: priorities 3, none, 1, 2, 1
        let xml = Self.document(
            """
              <file name="f">
                <url priority="3">https://c.example/f</url>
                <url>https://none.example/f</url>
                <url priority="1">https://a1.example/f</url>
                <url priority="2">https://b.example/f</url>
                <url priority="1">https://a2.example/f</url>
              </file>
            """)

        // When
        let file = try #require(try Metalink.parse(xml).files.first)

        // Then: 1 before 2 before 3 before none; the two 1s in document order
        #expect(file.urls.map(\.url.host) == ["a1.example", "a2.example", "b.example", "c.example", "none.example"])
        #expect(file.urls.map(\.priority) == [1, 1, 2, 3, 999_999])
    }

    /// A preferred location, and the hosts in the order it gives.
    struct LocationCase: Sendable, CustomTestStringConvertible {
        var location: String?
        var hosts: [String]
        var testDescription: String { "location \(location.map { String(reflecting: $0) } ?? "nil")" }
    }

    static let locationCases: [LocationCase] = [
        LocationCase(location: nil, hosts: ["us1", "de1", "us2", "de2", "none"]),
        LocationCase(location: "", hosts: ["us1", "de1", "us2", "de2", "none"]),
        LocationCase(location: "de", hosts: ["de1", "de2", "us1", "us2", "none"]),
        LocationCase(location: "DE", hosts: ["de1", "de2", "us1", "us2", "none"]),
        LocationCase(location: "us", hosts: ["us1", "us2", "de1", "de2", "none"]),
        LocationCase(location: "fr", hosts: ["us1", "de1", "us2", "de2", "none"]),
    ]

    @Test(arguments: locationCases)
    func aPreferredLocationComesFirstThenPriority(_ check: LocationCase) throws {
        // Given
        let xml = Self.document(
            """
              <file name="f">
                <url>https://none/f</url>
                <url location="de" priority="20">https://de2/f</url>
                <url location="us" priority="10">https://us1/f</url>
                <url location="Us" priority="15">https://us2/f</url>
                <url location="de" priority="10">https://de1/f</url>
              </file>
            """)
        let file = try #require(try Metalink.parse(xml).files.first)

        // When
        let ordered = file.preferredSources(location: check.location)

        // Then
        #expect(ordered.map(\.url.host) == check.hosts)
    }

    @Test func onlyHTTPAndHTTPSURLsAreKept() throws {
        // Given: one usable URL among others Haul cannot fetch
        let xml = Self.document(
            """
              <file name="f">
                <url priority="1">ftp://ftp.example.com/f</url>
                <url priority="1">magnet:?xt=urn:btih:c12fe1c06bba254a9dc9f519b335aa7c1367a88a</url>
                <url priority="1">file:///etc/passwd</url>
                <url priority="1">/relative/f</url>
                <url priority="1">https://exa mple.com/f</url>
                <url priority="1">https:///no-host</url>
                <url priority="2">HTTPS://mirror.example.com/f</url>
                <metaurl mediatype="torrent">https://example.com/f.torrent</metaurl>
              </file>
            """)

        // When
        let file = try #require(try Metalink.parse(xml).files.first)

        // Then
        #expect(file.urls.map(\.url.absoluteString) == ["HTTPS://mirror.example.com/f"])
    }

    @Test func piecesOfTheStrongestSupportedAlgorithmAreKept() throws {
        // Given: md5, sha-512 (not supported) and sha-1 pieces, the size unknown
        let xml = Self.document(
            Self.file(
                "f",
                """
                <pieces length="10" type="md5"><hash>\(Self.md5)</hash></pieces>
                <pieces length="10" type="sha-512"><hash>not even hex</hash></pieces>
                <pieces length="20" type="sha-1"><hash>\(Self.sha1)</hash><hash>\(Self.sha1)</hash></pieces>
                """))

        // When
        let file = try #require(try Metalink.parse(xml).files.first)

        // Then
        #expect(file.size == nil)
        #expect(file.pieces == Metalink.Pieces(length: 20, algorithm: .sha1, hashes: [Self.sha1, Self.sha1]))
    }

    /// Sizes, and the number of 4-byte pieces each has.
    @Test(arguments: [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
    func thePieceCountMatchingTheSizeIsAccepted(size: Int, count: Int) throws {
        let hashes = String(repeating: "<hash>\(Self.md5)</hash>", count: count)
        let xml = Self.document(
            Self.file("f", "<size>\(size)</size><pieces length=\"4\" type=\"md5\">\(hashes)</pieces>"))
        let file = try #require(try Metalink.parse(xml).files.first)
        #expect(file.pieces?.hashes.count == count)
    }

    @Test func aLargeFileWithManyPiecesIsRead() throws {
        // Given: 100,000 pieces of 1 MiB (a 100 GB image), about 7 MB of XML
        let count = 100_000
        let hashes = (0..<count).map { String(format: "<hash>%064x</hash>\n", $0) }.joined()
        let xml = Self.document(
            Self.file(
                "big.img", #"<size>\#(count << 20)</size><pieces length="1048576" type="sha-256">\#(hashes)</pieces>"#))

        // When
        let file = try #require(try Metalink.parse(xml).files.first)

        // Then
        #expect(file.pieces?.hashes.count == count)
        #expect(file.pieces?.hashes.last == String(format: "%064x", count - 1))
    }

    @Test func namespacesAreProcessedNotMatchedByPrefix() throws {
        // Given: the Metalink namespace under a prefix, and a foreign element named like ours
        let xml = """
            <ml:metalink xmlns:ml="urn:ietf:params:xml:ns:metalink" xmlns:x="https://example.com/ext">
              <ml:file name="f">
                <x:url>https://foreign.example.com/f</x:url>
                <x:size>not a number</x:size>
                <ml:size>7</ml:size>
                <ml:url>https://example.com/f</ml:url>
              </ml:file>
              <x:file name="../ignored"/>
            </ml:metalink>
            """

        // When
        let metalink = try Metalink.parse(Data(xml.utf8))

        // Then
        #expect(metalink.files.map(\.name) == ["f"])
        #expect(metalink.files.first?.size == 7)
        #expect(metalink.files.first?.urls.map(\.url.host) == ["example.com"])
    }

    // MARK: - Refusals

    /// A document that must be refused, and what the error must say.
    struct Refusal: Sendable, CustomTestStringConvertible {
        var label: String
        var xml: String
        var reason: String
        var testDescription: String { label }

        /// A refusal of a Metalink 4 document with `body` inside its root.
        init(_ label: String, body: String, _ reason: String) {
            self.label = label
            self.xml = String(decoding: MetalinkTests.document(body), as: UTF8.self)
            self.reason = reason
        }

        /// A refusal of `xml` as it is.
        init(_ label: String, xml: String, _ reason: String) {
            self.label = label
            self.xml = xml
            self.reason = reason
        }
    }

    static let refusals: [Refusal] = [
        // File names
        Refusal(
            "leading dot-dot", body: file("../etc/passwd"), #"file "../etc/passwd" (line 3): path has a '..' component"#),
        Refusal("inner dot-dot", body: file("a/../../b"), #"file "a/../../b" (line 3): path has a '..' component"#),
        Refusal("trailing dot-dot", body: file("a/.."), #"file "a/.." (line 3): path has a '..' component"#),
        Refusal("absolute", body: file("/etc/passwd"), #"file "/etc/passwd" (line 3): path is absolute"#),
        Refusal("backslash", body: file(#"a\b"#), #"file "a\\b" (line 3): path contains a backslash"#),
        Refusal("dot component", body: file("a/./b"), #"file "a/./b" (line 3): path has a '.' component"#),
        Refusal("empty name", body: file(""), #"file "" (line 3): path is empty"#),
        Refusal("tab in name", body: file("a&#9;b"), #"file "a\tb" (line 3): path contains a NUL or control character"#),
        Refusal("no name", body: "<file><url>https://e/f</url></file>", "the <file> at line 3 has no name attribute"),
        Refusal(
            "duplicate name", body: file("same") + "\n" + file("same"),
            #"file "same" (line 7): duplicate name, already the file at line 3"#),
        // Sizes and digests
        Refusal(
            "negative size", body: file("f", "<size>-1</size>"),
            #"file "f" (line 3): size "-1" is not a non-negative integer"#),
        Refusal("signed size", body: file("f", "<size>+1</size>"), "is not a non-negative integer"),
        Refusal("fractional size", body: file("f", "<size>1.5</size>"), "is not a non-negative integer"),
        Refusal("two sizes", body: file("f", "<size>1</size><size>1</size>"), "more than one <size>"),
        Refusal(
            "short sha-256", body: file("f", #"<hash type="sha-256">abcd</hash>"#),
            #"file "f" (line 3): sha-256 hash "abcd" is not 64 hexadecimal digits"#),
        Refusal(
            "non-hex sha-1", body: file("f", #"<hash type="sha-1">\#(String(repeating: "g", count: 40))</hash>"#),
            "sha-1 hash \"ggg"),
        Refusal(
            "sha-256 length under md5", body: file("f", #"<hash type="md5">\#(sha256)</hash>"#),
            "is not 32 hexadecimal digits"),
        Refusal("hash without type", body: file("f", "<hash>\(sha256)</hash>"), "a <hash> at line 4 has no type attribute"),
        Refusal(
            "two sha-256 hashes",
            body: file("f", #"<hash type="sha-256">\#(sha256)</hash><hash type="SHA-256">\#(sha256)</hash>"#),
            "more than one sha-256 <hash>"),
        // Pieces
        Refusal(
            "too few pieces",
            body: file("f", #"<size>9</size><pieces length="4" type="md5"><hash>\#(md5)</hash></pieces>"#),
            #"file "f" (line 3): <pieces> of 4 bytes has 1 hashes, but a file of 9 bytes has 3 pieces"#),
        Refusal(
            "too many pieces, size after",
            body: file(
                "f", #"<pieces length="4" type="md5"><hash>\#(md5)</hash><hash>\#(md5)</hash></pieces><size>4</size>"#),
            "has 2 hashes, but a file of 4 bytes has 1 pieces"),
        Refusal(
            "bad piece hash", body: file("f", #"<pieces length="4" type="sha-1"><hash>\#(md5)</hash></pieces>"#),
            "piece 0 sha-1 hash"),
        Refusal(
            "zero piece length", body: file("f", #"<pieces length="0" type="md5"><hash>\#(md5)</hash></pieces>"#),
            #"length "0" is not a positive integer"#),
        Refusal(
            "no piece length", body: file("f", #"<pieces type="md5"><hash>\#(md5)</hash></pieces>"#),
            #"length "" is not a positive integer"#),
        Refusal("no piece hashes", body: file("f", #"<pieces length="4" type="md5"></pieces>"#), "<pieces> has no <hash>"),
        // URLs
        Refusal(
            "only ftp and magnet",
            body: #"<file name="f"><url>ftp://e/f</url><url>magnet:?xt=urn:btih:00</url></file>"#,
            #"file "f" (line 3): no http or https <url>"#),
        Refusal(
            "only a metaurl", body: #"<file name="f"><metaurl mediatype="torrent">https://e/f.torrent</metaurl></file>"#,
            #"file "f" (line 3): no http or https <url>"#),
        Refusal(
            "zero priority", body: #"<file name="f"><url priority="0">https://e/f</url></file>"#,
            #"has priority "0", not a number from 1 to 999999"#),
        Refusal(
            "huge priority", body: #"<file name="f"><url priority="1000000">https://e/f</url></file>"#,
            "not a number from 1 to 999999"),
        // Documents
        Refusal(
            "no files", body: "<published>2026-01-01T00:00:00Z</published>",
            "invalid Metalink: the document lists no <file>"),
        Refusal(
            "DOCTYPE", xml: #"<!DOCTYPE metalink [<!ENTITY x "y">]><metalink xmlns="urn:ietf:params:xml:ns:metalink"/>"#,
            "document type declarations are not allowed"),
        Refusal("wrong root", xml: #"<manifest version="v"/>"#, "the root element at line 1 is <manifest>, not <metalink>"),
        Refusal("no namespace", xml: "<metalink>\(file("f"))</metalink>", "<metalink> has no namespace"),
        Refusal(
            "other namespace", xml: #"<metalink xmlns="https://example.com/">\#(file("f"))</metalink>"#,
            #"is in the namespace "https://example.com/""#),
        Refusal(
            "Metalink 3",
            xml: """
                <metalink version="3.0" xmlns="http://www.metalinker.org/">
                  <files><file name="f"><resources>
                    <url type="http" preference="100">http://e/f</url>
                  </resources></file></files>
                </metalink>
                """,
            "Metalink 3 documents are not supported; use Metalink 4 (RFC 5854)"),
        Refusal(
            "unclosed tag",
            xml: #"<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="f"><url>https://e/f</url></metalink>"#,
            "malformed XML at line 1"),
        Refusal(
            "cut off", xml: "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\">\n\(file("f"))", "malformed XML at line"),
        Refusal(
            "second root",
            xml: #"<metalink xmlns="urn:ietf:params:xml:ns:metalink">\#(file("f"))</metalink><metalink/>"#,
            "malformed XML"),
        // Not XML 1.0 at all: libxml2 names the line where it noticed, which may be later.
        Refusal("control character", body: file("a&#1;b"), "malformed XML at line"),
        Refusal("empty", xml: "", "invalid Metalink: no <metalink> element"),
        Refusal("not XML", xml: #"{"files": []}"#, "malformed XML at line 1"),
    ]

    @Test(arguments: refusals)
    func invalidDocumentsAreRefused(_ refusal: Refusal) throws {
        // When
        let error = try #require(throws: DownloadError.self) { try Metalink.parse(Data(refusal.xml.utf8)) }

        // Then
        #expect(error.code == .invalidManifest)
        #expect(error.message.hasPrefix("invalid Metalink: "), "\(error.message)")
        #expect(error.message.contains(refusal.reason), "\(error.message)")
    }

    @Test func theRefusedShapesParseWithoutTheirFault() throws {
        // The same shapes with the fault removed parse, so each refusal is for its fault.
        let threePieces = String(repeating: "<hash>\(Self.md5)</hash>", count: 3)
        let fixed = Self.document(
            Self.file("a/b")
                + Self.file("f", #"<size>9</size><pieces length="4" type="md5">\#(threePieces)</pieces>"#)
                + Self.file("g", #"<hash type="sha-256">\#(Self.sha256)</hash><hash type="sha-1">\#(Self.sha1)</hash>"#)
                + #"<file name="h"><url priority="1">https://e/h</url><url priority="999999">https://e/h2</url></file>"#)
        let metalink = try Metalink.parse(fixed)
        #expect(metalink.files.map(\.name) == ["a/b", "f", "g", "h"])
    }
}
