import Foundation

/// `InitiateMultipartUploadResult`: the answer to `POST /key?uploads`.
struct S3InitiatedUpload: S3XMLDecodable, Hashable {
    static let rootName = "InitiateMultipartUploadResult"

    /// The bucket, as S3 echoes it (empty if it does not).
    let bucket: String
    /// The key, as S3 echoes it (empty if it does not).
    let key: String
    /// The upload's ID, which every later request of the upload names.
    let uploadID: String

    /// Reads the result; an `UploadId` is required.
    init(element: S3XML.Element) throws(DownloadError) {
        bucket = element.child("Bucket")?.text ?? ""
        key = element.child("Key")?.text ?? ""
        uploadID = try S3XML.required("UploadId", in: element).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A part S3 holds for an upload, from `ListPartsResult`.
struct S3UploadedPart: Sendable, Hashable {
    /// The part's number, from 1.
    let number: Int
    /// The part's ETag as S3 gives it (with its quotes), to send back on completion.
    let etag: String
    /// The part's size in bytes.
    let size: Int64
    /// The part's SHA-256 (base64) if it was uploaded with one.
    let checksumSHA256: String?
}

/// `ListPartsResult`: one page of the parts of an upload (`GET /key?uploadId=…`).
struct S3PartListing: S3XMLDecodable, Hashable {
    static let rootName = "ListPartsResult"

    /// The parts on this page, in the order S3 gives them (ascending part number).
    let parts: [S3UploadedPart]
    /// Whether more parts follow: ask again with `part-number-marker` set to
    /// ``nextPartNumberMarker``.
    let isTruncated: Bool
    /// Where the next page starts, when ``isTruncated``.
    let nextPartNumberMarker: Int?

    /// Reads the page; each part needs a number from 1 to 10,000, an ETag and a size.
    init(element: S3XML.Element) throws(DownloadError) {
        var parts: [S3UploadedPart] = []
        for (index, part) in element.children("Part").enumerated() {
            let what = "part \(index + 1) of <ListPartsResult>"
            let number = try S3XML.integer(try S3XML.required("PartNumber", in: part), "\(what): PartNumber")
            guard (1...MultipartPlan.maximumPartCount).contains(number) else {
                throw S3XML.invalid("\(what): PartNumber \(number) is not between 1 and 10000")
            }
            let checksum = part.child("ChecksumSHA256")?.text.trimmingCharacters(in: .whitespacesAndNewlines)
            parts.append(
                S3UploadedPart(
                    number: Int(number),
                    etag: try S3XML.required("ETag", in: part).trimmingCharacters(in: .whitespacesAndNewlines),
                    size: try S3XML.integer(try S3XML.required("Size", in: part), "\(what): Size"),
                    checksumSHA256: checksum?.isEmpty == false ? checksum : nil))
        }
        self.parts = parts
        isTruncated = try S3XML.boolean(element.child("IsTruncated")?.text, "IsTruncated")
        nextPartNumberMarker = try element.child("NextPartNumberMarker").flatMap { marker throws(DownloadError) in
            marker.text.isEmpty ? nil : Int(try S3XML.integer(marker.text, "NextPartNumberMarker"))
        }
        if isTruncated, nextPartNumberMarker == nil {
            throw S3XML.invalid("a truncated <ListPartsResult> has no <NextPartNumberMarker>")
        }
    }
}

/// An upload in progress, from `ListMultipartUploadsResult`.
struct S3PendingUpload: Sendable, Hashable {
    /// The object key the upload is for.
    let key: String
    /// The upload's ID.
    let uploadID: String
    /// When the upload was initiated, if S3 says so in a form that can be read.
    let initiated: Date?
}

/// `ListMultipartUploadsResult`: one page of the uploads in progress in a bucket
/// (`GET /?uploads`).
///
/// Keys are read as they are: ask without `encoding-type=url`.
struct S3UploadListing: S3XMLDecodable, Hashable {
    static let rootName = "ListMultipartUploadsResult"

    /// The uploads on this page, by key then initiation time.
    let uploads: [S3PendingUpload]
    /// Whether more uploads follow: ask again with `key-marker` and `upload-id-marker` set to
    /// ``nextKeyMarker`` and ``nextUploadIDMarker``.
    let isTruncated: Bool
    /// Where the next page starts, when ``isTruncated``.
    let nextKeyMarker: String?
    /// Where the next page starts within ``nextKeyMarker``'s uploads, when ``isTruncated``.
    let nextUploadIDMarker: String?

    /// Reads the page; each upload needs a key and an upload ID.
    init(element: S3XML.Element) throws(DownloadError) {
        var uploads: [S3PendingUpload] = []
        for upload in element.children("Upload") {
            let initiated = upload.child("Initiated").map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }
            let uploadID = try S3XML.required("UploadId", in: upload)
            uploads.append(
                S3PendingUpload(
                    key: try S3XML.required("Key", in: upload),
                    uploadID: uploadID.trimmingCharacters(in: .whitespacesAndNewlines),
                    initiated: initiated.flatMap(Manifest.parseDate)))
        }
        self.uploads = uploads
        isTruncated = try S3XML.boolean(element.child("IsTruncated")?.text, "IsTruncated")
        let key = element.child("NextKeyMarker")?.text
        let uploadID = element.child("NextUploadIdMarker")?.text
        nextKeyMarker = key?.isEmpty == false ? key : nil
        nextUploadIDMarker = uploadID?.isEmpty == false ? uploadID : nil
        if isTruncated, nextKeyMarker == nil {
            throw S3XML.invalid("a truncated <ListMultipartUploadsResult> has no <NextKeyMarker>")
        }
    }
}

/// `CompleteMultipartUploadResult`: the object an upload became.
struct S3CompletedUpload: S3XMLDecodable, Hashable {
    static let rootName = "CompleteMultipartUploadResult"

    /// The object's URL, as S3 gives it (not always usable: SeaweedFS and proxies vary).
    let location: String?
    /// The bucket, as S3 echoes it (empty if it does not).
    let bucket: String
    /// The key, as S3 echoes it (empty if it does not).
    let key: String
    /// The object's ETag: for AWS, the MD5 of the parts' MD5s, `-`, and the part count.
    let etag: String

    /// Reads the result; an `ETag` is required.
    init(element: S3XML.Element) throws(DownloadError) {
        let location = element.child("Location")?.text
        self.location = location?.isEmpty == false ? location : nil
        bucket = element.child("Bucket")?.text ?? ""
        key = element.child("Key")?.text ?? ""
        etag = try S3XML.required("ETag", in: element).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// A part to name in `CompleteMultipartUpload`.
struct S3CompletedPart: Sendable, Hashable {
    /// The part's number, from 1 to 10,000.
    let number: Int
    /// The ETag `UploadPart` answered, as it was (quotes included).
    let etag: String
    /// The part's SHA-256 in base64, when it was uploaded with `x-amz-checksum-sha256`.
    let checksumSHA256: String?

    /// Creates a part to complete.
    init(number: Int, etag: String, checksumSHA256: String? = nil) {
        self.number = number
        self.etag = etag
        self.checksumSHA256 = checksumSHA256
    }
}

/// S3's `<Error>` body: a code to act on (`NoSuchUpload`, `SlowDown`, …) and a message.
///
/// `CompleteMultipartUpload` can answer `200 OK` and then, after its keep-alive white space,
/// an `<Error>`: read its body with ``S3XML/decode(_:from:)``, never by the status alone.
struct S3ErrorResponse: S3XMLDecodable, Error, Hashable, CustomStringConvertible {
    static let rootName = "Error"

    /// S3's error code, such as `NoSuchBucket`, `InvalidPart` or `SignatureDoesNotMatch`.
    let code: String
    /// S3's message for a person.
    let message: String
    /// The bucket or object concerned, if S3 names it.
    let resource: String?
    /// The request's ID (`x-amz-request-id`), to quote to the provider.
    let requestID: String?
    /// The canonical request S3 computed, with `SignatureDoesNotMatch` (AWS sends it).
    let canonicalRequest: String?
    /// The string to sign S3 computed, with `SignatureDoesNotMatch` (AWS sends it).
    let stringToSign: String?

    /// Codes worth retrying after a pause: S3 was busy or failed inside.
    static let retryableCodes: Set<String> = [
        "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout",
    ]

    /// Reads the body; a `Code` is required.
    init(element: S3XML.Element) throws(DownloadError) {
        func optional(_ name: String) -> String? {
            guard let text = element.child(name)?.text, !text.isEmpty else { return nil }
            return text
        }
        code = try S3XML.required("Code", in: element).trimmingCharacters(in: .whitespacesAndNewlines)
        message = optional("Message") ?? ""
        resource = optional("Resource")
        requestID = optional("RequestId")
        canonicalRequest = optional("CanonicalRequest")
        stringToSign = optional("StringToSign")
    }

    /// Whether the request may succeed if sent again later (``retryableCodes``).
    var isRetryable: Bool { Self.retryableCodes.contains(code) }

    /// `CODE: MESSAGE (request ID)`.
    var description: String {
        "\(code)" + (message.isEmpty ? "" : ": \(message)") + (requestID.map { " (request \($0))" } ?? "")
    }
}
