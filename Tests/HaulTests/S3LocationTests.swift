import Foundation
import Testing

@testable import Haul

@Suite("S3 locations")
struct S3LocationTests {
    static let seaweed = URL(string: "http://127.0.0.1:8333")

    // MARK: - Parsing

    @Test func objectsAndPrefixes() throws {
        let object = try S3Location(parsing: "s3://downloads/isos/debian.iso")
        #expect(object.bucket == "downloads")
        #expect(object.key == "isos/debian.iso")
        #expect(!object.isPrefix)

        let prefix = try S3Location(parsing: "S3://downloads/isos/")
        #expect(prefix.key == "isos/")
        #expect(prefix.isPrefix)

        for text in ["s3://downloads", "s3://downloads/"] {
            let root = try S3Location(parsing: text)
            #expect(root.key == "")
            #expect(root.isPrefix)
            #expect(root.description == "s3://downloads/")
        }
    }

    @Test func theKeyIsTakenLiterally() throws {
        // Like the AWS CLI: no percent-decoding, and ? and # belong to the key
        let location = try S3Location(parsing: "s3://b-1/a%20b?x=1#frag/ü ☃")
        #expect(location.key == "a%20b?x=1#frag/ü ☃")
    }

    /// A text and a part of the message it must fail with.
    struct Refusal: Sendable, CustomTestStringConvertible {
        var text: String
        var reason: String
        var testDescription: String { String(reflecting: text) }
    }

    @Test(arguments: [
        Refusal(text: "https://bucket/key", reason: "is not an S3 location"),
        Refusal(text: "s3://", reason: "is not an S3 location"),
        Refusal(text: "s3://ab/key", reason: "3 to 63 characters"),
        Refusal(text: "s3://\(String(repeating: "a", count: 64))/key", reason: "3 to 63 characters"),
        Refusal(text: "s3://My-Bucket/key", reason: "only lowercase letters"),
        Refusal(text: "s3://my_bucket/key", reason: "only lowercase letters"),
        Refusal(text: "s3://-bucket/key", reason: "starts and ends"),
        Refusal(text: "s3://bucket./key", reason: "starts and ends"),
        Refusal(text: "s3://my..bucket/key", reason: "two dots"),
        Refusal(text: "s3://192.168.5.4/key", reason: "IP address"),
        Refusal(text: "s3://bucket//key", reason: "does not start with /"),
        Refusal(text: "s3://bucket/a/../b", reason: ". or .. component"),
        Refusal(text: "s3://bucket/..", reason: ". or .. component"),
        Refusal(text: "s3://bucket/a/./b", reason: ". or .. component"),
        Refusal(text: "s3://bucket/a\u{0}b", reason: "control characters"),
        Refusal(text: "s3://bucket/a\nb", reason: "control characters"),
        Refusal(text: "s3://bucket/\(String(repeating: "é", count: 513))", reason: "at most 1024 bytes"),
    ])
    func refusals(_ refusal: Refusal) {
        do {
            let location = try S3Location(parsing: refusal.text)
            Issue.record("accepted as \(location)")
        } catch {
            #expect(error.code == .invalidRequest)
            #expect(error.message.contains(refusal.reason), "\(error.message)")
        }
    }

    @Test func limitsThatAreAllowed() throws {
        // 63-character bucket, dots and hyphens, 1024-byte key, .. inside a name, empty components
        let bucket = "a.b-c" + String(repeating: "d", count: 58)
        let key = String(repeating: "é", count: 511) + "ab"
        let location = try S3Location(bucket: bucket, key: key)
        #expect(location.key.utf8.count == 1024)
        #expect(try S3Location(parsing: "s3://abc/a..b/.hidden/x..//y").key == "a..b/.hidden/x..//y")
        #expect(try S3Location(parsing: "s3://1.2.3/k").bucket == "1.2.3")
    }

    @Test func appendingANameToAPrefix() throws {
        let prefix = try S3Location(parsing: "s3://downloads/isos/")
        #expect(try prefix.appending("debian 12.iso").description == "s3://downloads/isos/debian 12.iso")
        #expect(try S3Location(parsing: "s3://downloads").appending("a/b").key == "a/b")

        // An object location keeps its key
        let object = try S3Location(parsing: "s3://downloads/fixed-name")
        #expect(try object.appending("ignored.iso") == object)

        // The result is validated
        #expect(throws: DownloadError.self) { try prefix.appending("../escape") }
        #expect(throws: DownloadError.self) { try prefix.appending("") }
        #expect(throws: DownloadError.self) { try prefix.appending("dir/") }
    }

    // MARK: - URLs

    @Test func pathStyleAgainstACustomEndpoint() throws {
        let location = try S3Location(parsing: "s3://downloads/dir/a b+(1)/ü~.iso")
        let url = try location.objectURL(endpoint: Self.seaweed, region: "us-east-1")
        #expect(url.absoluteString == "http://127.0.0.1:8333/downloads/dir/a%20b%2B%281%29/%C3%BC~.iso")
        let bucket = try location.bucketURL(endpoint: Self.seaweed, region: "us-east-1", query: [("uploads", nil)])
        #expect(bucket.absoluteString == "http://127.0.0.1:8333/downloads?uploads")
    }

    @Test func anEndpointsPathIsKeptInFront() throws {
        let location = try S3Location(parsing: "s3://downloads/k")
        let url = try location.objectURL(endpoint: URL(string: "https://gateway.example/s3/"), region: "x")
        #expect(url.absoluteString == "https://gateway.example/s3/downloads/k")
        let v6 = try location.objectURL(endpoint: URL(string: "http://[::1]:8333"), region: "x")
        #expect(v6.absoluteString == "http://[::1]:8333/downloads/k")
    }

    @Test func queryNamesAndValuesAreEncodedAsSigned() throws {
        let location = try S3Location(parsing: "s3://downloads/k")
        let url = try location.objectURL(
            endpoint: Self.seaweed, region: "us-east-1",
            query: [("partNumber", "3"), ("uploadId", "2~a/b+c=="), ("empty", "")])
        #expect(
            url.absoluteString == "http://127.0.0.1:8333/downloads/k?partNumber=3&uploadId=2~a%2Fb%2Bc%3D%3D&empty=")
    }

    @Test func virtualHostedOnAWS() throws {
        let location = try S3Location(parsing: "s3://downloads/dir/file name.iso")
        #expect(
            try location.objectURL(endpoint: nil, region: "eu-west-1").absoluteString
                == "https://downloads.s3.eu-west-1.amazonaws.com/dir/file%20name.iso")
        #expect(
            try location.bucketURL(endpoint: nil, region: "eu-west-1", query: [("uploads", nil)]).absoluteString
                == "https://downloads.s3.eu-west-1.amazonaws.com/?uploads")
        #expect(
            try location.objectURL(endpoint: nil, region: "cn-north-1").absoluteString
                == "https://downloads.s3.cn-north-1.amazonaws.com.cn/dir/file%20name.iso")
    }

    @Test func bucketsWithDotsFallBackToPathStyleOnAWS() throws {
        let location = try S3Location(parsing: "s3://my.downloads/k")
        #expect(
            try location.objectURL(endpoint: nil, region: "us-east-1").absoluteString
                == "https://s3.us-east-1.amazonaws.com/my.downloads/k")
        #expect(
            try location.bucketURL(endpoint: nil, region: "us-east-1").absoluteString
                == "https://s3.us-east-1.amazonaws.com/my.downloads")
    }

    @Test func aRegionThatCannotBeAHostNameIsRefused() throws {
        let location = try S3Location(parsing: "s3://downloads/k")
        for region in ["", "us-east-1.evil.example/", "EU-WEST-1", "us east"] {
            #expect(throws: DownloadError.self, "\(region)") {
                try location.objectURL(endpoint: nil, region: region)
            }
        }
    }

    @Test func theURLsPathIsTheCanonicalURIItSigns() throws {
        // Whatever the key, the path sent and the path signed are the same string.
        for key in ["a b", "ü/☃", "x+y=z&w", "a//b/", "~!*'();:@&=+$,?#[]", "%41"] {
            let url = try S3Location(bucket: "bkt", key: key).objectURL(endpoint: Self.seaweed, region: "us-east-1")
            let components = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
            #expect(
                SigV4Signer.canonicalURI(percentEncodedPath: components.percentEncodedPath)
                    == components.percentEncodedPath)
            #expect(SigV4Signer.decode(components.percentEncodedPath) == Array("/bkt/\(key)".utf8))
        }
    }
}
