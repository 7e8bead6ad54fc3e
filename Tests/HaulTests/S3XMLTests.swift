import Foundation
import Testing

@testable import Haul

/// S3's XML responses and the CompleteMultipartUpload body.
///
/// The samples follow the examples of AWS's S3 API reference (CreateMultipartUpload,
/// ListParts, ListMultipartUploads, CompleteMultipartUpload, Error responses), with
/// ETags written as S3 sends them (`&quot;`).
@Suite("S3 XML")
struct S3XMLTests {
    static let namespace = #"xmlns="http://s3.amazonaws.com/doc/2006-03-01/""#

    /// `body` inside `<root>`, with S3's namespace or without any.
    static func document(_ root: String, namespaced: Bool, _ body: String) -> Data {
        Data(
            """
            <?xml version="1.0" encoding="UTF-8"?>
            <\(root)\(namespaced ? " " + namespace : "")>
            \(body)
            </\(root)>
            """.utf8)
    }

    /// The value of a reply, or a recorded issue.
    static func value<Value>(_ reply: S3XML.Reply<Value>) throws -> Value {
        guard case .value(let value) = reply else {
            Issue.record("expected a value, got \(reply)")
            throw DownloadError(.protocolViolation, "no value")
        }
        return value
    }

    // MARK: - Results

    @Test(arguments: [true, false])
    func initiateMultipartUpload(namespaced: Bool) throws {
        let body = Self.document(
            "InitiateMultipartUploadResult", namespaced: namespaced,
            """
              <Bucket>example-bucket</Bucket>
              <Key>example-object</Key>
              <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
            """)

        let upload = try Self.value(try S3XML.decode(S3InitiatedUpload.self, from: body))

        #expect(upload.bucket == "example-bucket")
        #expect(upload.key == "example-object")
        #expect(upload.uploadID == "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA")
    }

    @Test(arguments: [true, false])
    func listParts(namespaced: Bool) throws {
        // Given: AWS's ListParts example (a truncated page of two parts), one with a checksum
        let body = Self.document(
            "ListPartsResult", namespaced: namespaced,
            """
              <Bucket>example-bucket</Bucket>
              <Key>example-object</Key>
              <UploadId>XXBsb2FkIElEIGZvciBlbHZpbmcncyVcdS1tb3ZpZS5tMnRzEEEwbG9hZA</UploadId>
              <Initiator>
                  <ID>arn:aws:iam::111122223333:user/some-user-11116a31-17b5-4fb7-9df5-b288870f11xx</ID>
                  <DisplayName>umat-user-11116a31-17b5-4fb7-9df5-b288870f11xx</DisplayName>
              </Initiator>
              <Owner>
                <ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>
                <DisplayName>someName</DisplayName>
              </Owner>
              <StorageClass>STANDARD</StorageClass>
              <PartNumberMarker>1</PartNumberMarker>
              <NextPartNumberMarker>3</NextPartNumberMarker>
              <MaxParts>2</MaxParts>
              <IsTruncated>true</IsTruncated>
              <Part>
                <PartNumber>2</PartNumber>
                <LastModified>2010-11-10T20:48:34.000Z</LastModified>
                <ETag>&quot;7778aef83f66abc1fa1e8477f296d394&quot;</ETag>
                <Size>10485760</Size>
              </Part>
              <Part>
                <PartNumber>3</PartNumber>
                <LastModified>2010-11-10T20:48:33.000Z</LastModified>
                <ETag>"aaaa18db4cc2f85cedef654fccc4a4x8"</ETag>
                <ChecksumSHA256>47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=</ChecksumSHA256>
                <Size>5242881</Size>
              </Part>
            """)

        // When
        let listing = try Self.value(try S3XML.decode(S3PartListing.self, from: body))

        // Then
        #expect(
            listing.parts == [
                S3UploadedPart(
                    number: 2, etag: "\"7778aef83f66abc1fa1e8477f296d394\"", size: 10_485_760, checksumSHA256: nil),
                S3UploadedPart(
                    number: 3, etag: "\"aaaa18db4cc2f85cedef654fccc4a4x8\"", size: 5_242_881,
                    checksumSHA256: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="),
            ])
        #expect(listing.isTruncated)
        #expect(listing.nextPartNumberMarker == 3)
    }

    @Test func aLastPageOfPartsAndAnEmptyOne() throws {
        let last = Self.document(
            "ListPartsResult", namespaced: true,
            "<IsTruncated>false</IsTruncated><Part><PartNumber>1</PartNumber><ETag>\"e\"</ETag><Size>1</Size></Part>")
        let listing = try Self.value(try S3XML.decode(S3PartListing.self, from: last))
        #expect(!listing.isTruncated)
        #expect(listing.parts.map(\.number) == [1])

        let empty = Self.document("ListPartsResult", namespaced: false, "<IsTruncated>false</IsTruncated>")
        #expect(try Self.value(try S3XML.decode(S3PartListing.self, from: empty)).parts.isEmpty)
    }

    @Test(arguments: [true, false])
    func listMultipartUploads(namespaced: Bool) throws {
        // Given: AWS's ListMultipartUploads example (shortened), with a key that has spaces
        let body = Self.document(
            "ListMultipartUploadsResult", namespaced: namespaced,
            """
              <Bucket>bucket</Bucket>
              <KeyMarker></KeyMarker>
              <UploadIdMarker></UploadIdMarker>
              <NextKeyMarker>my-movie.m2ts</NextKeyMarker>
              <NextUploadIdMarker>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ</NextUploadIdMarker>
              <MaxUploads>3</MaxUploads>
              <IsTruncated>true</IsTruncated>
              <Upload>
                <Key>my-divisor</Key>
                <UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw</UploadId>
                <Initiator>
                  <ID>arn:aws:iam::111122223333:user/user1-11111a31-17b5-4fb7-9df5-b111111f13de</ID>
                  <DisplayName>user1-11111a31-17b5-4fb7-9df5-b111111f13de</DisplayName>
                </Initiator>
                <Owner>
                  <ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>
                  <DisplayName>OwnerDisplayName</DisplayName>
                </Owner>
                <StorageClass>STANDARD</StorageClass>
                <Initiated>2010-11-10T20:48:33.000Z</Initiated>
              </Upload>
              <Upload>
                <Key> my movie &amp; more.m2ts </Key>
                <UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
                <StorageClass>STANDARD</StorageClass>
                <Initiated>2010-11-26T19:24:17Z</Initiated>
              </Upload>
            """)

        // When
        let listing = try Self.value(try S3XML.decode(S3UploadListing.self, from: body))

        // Then: keys keep their spaces; both date forms are read
        #expect(listing.uploads.map(\.key) == ["my-divisor", " my movie & more.m2ts "])
        #expect(
            listing.uploads.map(\.uploadID) == [
                "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw",
                "VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA",
            ])
        #expect(
            listing.uploads.map(\.initiated) == [
                Date(timeIntervalSince1970: 1_289_422_113), Date(timeIntervalSince1970: 1_290_799_457),
            ])
        #expect(listing.isTruncated)
        #expect(listing.nextKeyMarker == "my-movie.m2ts")
        #expect(listing.nextUploadIDMarker == "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ")
    }

    @Test(arguments: [true, false])
    func completeMultipartUpload(namespaced: Bool) throws {
        let body = Self.document(
            "CompleteMultipartUploadResult", namespaced: namespaced,
            """
              <Location>http://Example-Bucket.s3.us-east-1.amazonaws.com/Example-Object</Location>
              <Bucket>Example-Bucket</Bucket>
              <Key>Example-Object</Key>
              <ETag>"3858f62230ac3c915f300c664312c11f-9"</ETag>
            """)

        let completed = try Self.value(try S3XML.decode(S3CompletedUpload.self, from: body))

        #expect(completed.location == "http://Example-Bucket.s3.us-east-1.amazonaws.com/Example-Object")
        #expect(completed.key == "Example-Object")
        #expect(completed.etag == "\"3858f62230ac3c915f300c664312c11f-9\"")
    }

    // MARK: - Errors

    @Test func anErrorBodyWhereAResultWasExpected() throws {
        // Given: CompleteMultipartUpload's 200 OK, white space sent while S3 worked, then an
        // error (AWS's example)
        let body = Data(
            """
            <?xml version="1.0" encoding="UTF-8"?>


            <Error>
              <Code>InternalError</Code>
              <Message>We encountered an internal error. Please try again.</Message>
              <RequestId>656c76696e6727732072657175657374</RequestId>
              <HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>
            </Error>
            """.utf8)

        // When
        let reply = try S3XML.decode(S3CompletedUpload.self, from: body)

        // Then
        guard case .error(let error) = reply else {
            Issue.record("expected an error, got \(reply)")
            return
        }
        #expect(error.code == "InternalError")
        #expect(error.message == "We encountered an internal error. Please try again.")
        #expect(error.requestID == "656c76696e6727732072657175657374")
        #expect(error.isRetryable)
        #expect(
            error.description
                == "InternalError: We encountered an internal error. Please try again. "
                + "(request 656c76696e6727732072657175657374)")
    }

    @Test func errorBodiesOfSeveralKinds() throws {
        let noSuchUpload = Self.document(
            "Error", namespaced: true,
            """
            <Code>NoSuchUpload</Code>
            <Message>The specified upload does not exist.</Message>
            <UploadId>abc</UploadId>
            <Resource>/bucket/key</Resource>
            """)
        guard case .error(let error) = try S3XML.decode(S3PartListing.self, from: noSuchUpload) else {
            Issue.record("expected an error")
            return
        }
        #expect(error.code == "NoSuchUpload")
        #expect(error.resource == "/bucket/key")
        #expect(!error.isRetryable)

        let signature = Self.document(
            "Error", namespaced: false,
            """
            <Code>SignatureDoesNotMatch</Code>
            <Message>The request signature we calculated does not match the signature you provided.</Message>
            <StringToSign>AWS4-HMAC-SHA256
            20150830T123600Z</StringToSign>
            <CanonicalRequest>GET
            /</CanonicalRequest>
            """)
        guard case .error(let mismatch) = try S3XML.decode(S3InitiatedUpload.self, from: signature) else {
            Issue.record("expected an error")
            return
        }
        #expect(mismatch.canonicalRequest == "GET\n/")
        #expect(mismatch.stringToSign == "AWS4-HMAC-SHA256\n20150830T123600Z")
    }

    // MARK: - Refusals

    /// A body and a part of the message it must fail with.
    struct Refusal: Sendable, CustomTestStringConvertible {
        var name: String
        var xml: String
        var reason: String
        var testDescription: String { name }
    }

    @Test(arguments: [
        Refusal(
            name: "a DTD",
            xml: #"<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "boom">]>"#
                + "<InitiateMultipartUploadResult><UploadId>&e;</UploadId></InitiateMultipartUploadResult>",
            reason: "document type declarations"),
        Refusal(
            name: "another root", xml: "<ListBucketResult></ListBucketResult>",
            reason: "<ListBucketResult>, not <InitiateMultipartUploadResult> or <Error>"),
        Refusal(
            name: "another namespace",
            xml: #"<InitiateMultipartUploadResult xmlns="urn:other">"#
                + "<UploadId>x</UploadId></InitiateMultipartUploadResult>",
            reason: "namespace \"urn:other\""),
        Refusal(
            name: "no UploadId",
            xml: "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>",
            reason: "has no <UploadId>"),
        Refusal(name: "cut off", xml: "<InitiateMultipartUploadResult><UploadId>x</UploadId>", reason: "malformed XML"),
        Refusal(name: "empty", xml: "", reason: "no <InitiateMultipartUploadResult> element"),
        Refusal(name: "not XML", xml: "<html>502 Bad Gateway", reason: "the root element is <html>"),
        Refusal(
            name: "an error without a code", xml: "<Error><Message>m</Message></Error>",
            reason: "<Error> has no <Code>"),
    ])
    func refusals(_ refusal: Refusal) {
        do {
            let reply = try S3XML.decode(S3InitiatedUpload.self, from: Data(refusal.xml.utf8))
            Issue.record("accepted: \(reply)")
        } catch {
            #expect(error.code == .protocolViolation)
            #expect(error.message.hasPrefix("invalid S3 response: "))
            #expect(error.message.contains(refusal.reason), "\(error.message)")
        }
    }

    @Test func badPartsAreRefused() {
        for (part, reason) in [
            ("<PartNumber>0</PartNumber><ETag>e</ETag><Size>1</Size>", "not between 1 and 10000"),
            ("<PartNumber>10001</PartNumber><ETag>e</ETag><Size>1</Size>", "not between 1 and 10000"),
            ("<PartNumber>-1</PartNumber><ETag>e</ETag><Size>1</Size>", "not a non-negative integer"),
            ("<PartNumber>1</PartNumber><Size>1</Size>", "has no <ETag>"),
            ("<PartNumber>1</PartNumber><ETag>e</ETag><Size>1.5</Size>", "Size"),
        ] {
            let body = Self.document("ListPartsResult", namespaced: true, "<Part>\(part)</Part>")
            #expect(throws: DownloadError.self, "\(reason)") { try S3XML.decode(S3PartListing.self, from: body) }
        }
        let truncated = Self.document("ListPartsResult", namespaced: true, "<IsTruncated>true</IsTruncated>")
        #expect(throws: DownloadError.self) { try S3XML.decode(S3PartListing.self, from: truncated) }
        let maybe = Self.document("ListPartsResult", namespaced: true, "<IsTruncated>maybe</IsTruncated>")
        #expect(throws: DownloadError.self) { try S3XML.decode(S3PartListing.self, from: maybe) }
    }

    @Test func elementsOfOtherNamespacesAreSkipped() throws {
        let body = Data(
            """
            <InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/" xmlns:x="urn:x">
              <x:UploadId>not this</x:UploadId>
              <UploadId>this</UploadId>
            </InitiateMultipartUploadResult>
            """.utf8)
        #expect(try Self.value(try S3XML.decode(S3InitiatedUpload.self, from: body)).uploadID == "this")
    }

    // MARK: - The CompleteMultipartUpload body

    @Test func completeBodyListsPartsInOrderEscaped() throws {
        // Given: parts out of order, one with a checksum
        let parts = [
            S3CompletedPart(number: 3, etag: "\"c\""),
            S3CompletedPart(
                number: 1, etag: "\"a&<b>'\"", checksumSHA256: "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="),
            S3CompletedPart(number: 2, etag: "b"),
        ]

        // When
        let body = try S3XML.completeMultipartUploadBody(parts)

        // Then: ascending, escaped
        let text = String(decoding: body, as: UTF8.self)
        #expect(
            text == """
                <?xml version="1.0" encoding="UTF-8"?>
                <CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">\
                <Part><PartNumber>1</PartNumber><ETag>&quot;a&amp;&lt;b&gt;&apos;&quot;</ETag>\
                <ChecksumSHA256>47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=</ChecksumSHA256></Part>\
                <Part><PartNumber>2</PartNumber><ETag>b</ETag></Part>\
                <Part><PartNumber>3</PartNumber><ETag>&quot;c&quot;</ETag></Part>\
                </CompleteMultipartUpload>
                """)

        // And: it reads back to the same parts
        let root = try S3XML.parse(body, roots: ["CompleteMultipartUpload"])
        let read = root.children("Part").map { part in
            S3CompletedPart(
                number: Int(part.child("PartNumber")?.text ?? "") ?? 0, etag: part.child("ETag")?.text ?? "",
                checksumSHA256: part.child("ChecksumSHA256")?.text)
        }
        #expect(read == parts.sorted { $0.number < $1.number })
    }

    @Test func completeBodyRefusals() {
        let cases: [[S3CompletedPart]] = [
            [],
            [S3CompletedPart(number: 0, etag: "e")],
            [S3CompletedPart(number: 10_001, etag: "e")],
            [S3CompletedPart(number: 2, etag: "e"), S3CompletedPart(number: 2, etag: "f")],
            [S3CompletedPart(number: 1, etag: "e\u{1}")],
        ]
        for parts in cases {
            #expect(throws: DownloadError.self, "\(parts)") { try S3XML.completeMultipartUploadBody(parts) }
        }
    }
}
