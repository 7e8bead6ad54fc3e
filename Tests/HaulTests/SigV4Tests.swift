import Crypto
import Foundation
import Testing

@testable import Haul

/// AWS Signature Version 4, checked against published vectors.
///
/// Where the vectors come from:
/// - ``suite``: ten cases of AWS's SigV4 test suite as awslabs/aws-c-auth ships it
///   (`tests/aws-signing-test-suite/v4/NAME/`: `request.txt`, `context.json`,
///   `header-canonical-request.txt`, `header-string-to-sign.txt`, `header-signature.txt`).
///   Its context: service `service`, region `us-east-1`, AKIDEXAMPLE /
///   wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, 2015-08-30T12:36:00Z; `sign_body` false
///   (no `x-amz-content-sha256`, the empty body's hash) except in
///   `post-x-www-form-urlencoded`. The "unnormalized" cases are the ones that hold for S3.
/// - The S3 cases: computed with botocore 1.43.11's `S3SigV4Auth` (see each test), the date
///   patched to the one given.
@Suite("AWS Signature Version 4")
struct SigV4Tests {
    /// The suite's credentials.
    static let credentials = AWSCredentials(
        accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    /// 2015-08-30T12:36:00Z, the suite's date.
    static let suiteDate = Date(timeIntervalSince1970: 1_440_938_160)

    /// One case of AWS's test suite: the request and what signing it must give.
    struct Vector: Sendable, CustomTestStringConvertible {
        var name: String
        var method: String
        var url: String
        var headers: [(String, String)]
        /// The body, when the case signs it (`sign_body`); else the empty body's hash is
        /// signed and no `x-amz-content-sha256` is sent.
        var body: String?
        var sessionToken: String?
        var canonicalRequest: String
        var stringToSign: String
        var signature: String
        var testDescription: String { name }
    }

    static let suite: [Vector] = [
        Vector(
            name: "get-vanilla", method: "GET",
            url: "https://example.amazonaws.com/",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63
                """,
            signature: "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        Vector(
            name: "get-vanilla-query-order-key-case", method: "GET",
            url: "https://example.amazonaws.com/?Param2=value2&Param1=value1",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /
                Param1=value1&Param2=value2
                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0
                """,
            signature: "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
        Vector(
            name: "get-vanilla-query-order-encoded", method: "GET",
            url: "https://example.amazonaws.com/?Param-3=Value3&Param=Value2&%E1%88%B4=Value1",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /
                %E1%88%B4=Value1&Param=Value2&Param-3=Value3
                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                868294f5c38bd141c4972a373a76654f1418a8e4fc18b2e7903ae45e8ae0ec71
                """,
            signature: "371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac"),
        Vector(
            name: "get-utf8", method: "GET",
            url: "https://example.amazonaws.com/%E1%88%B4",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /%E1%88%B4

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102
                """,
            signature: "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
        Vector(
            name: "get-space-unnormalized", method: "GET",
            url: "https://example.amazonaws.com/example%20space/",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /example%20space/

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86
                """,
            signature: "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741"),
        Vector(
            name: "get-slashes-unnormalized", method: "GET",
            url: "https://example.amazonaws.com//example//",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                //example//

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z

                host;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                528ec3105ee1f34ab014bb0a1a45da0ed2742a4fea3555149e5b4d5d201eb240
                """,
            signature: "87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5"),
        Vector(
            name: "get-header-value-trim", method: "GET",
            url: "https://example.amazonaws.com/",
            headers: [("Host", "example.amazonaws.com"), ("My-Header1", " value1"), ("My-Header2", " \"a   b   c\"")],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /

                host:example.amazonaws.com
                my-header1:value1
                my-header2:"a b c"
                x-amz-date:20150830T123600Z

                host;my-header1;my-header2;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7
                """,
            signature: "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
        Vector(
            name: "get-header-key-duplicate", method: "GET",
            url: "https://example.amazonaws.com/",
            headers: [
                ("Host", "example.amazonaws.com"), ("My-Header1", "value2"), ("My-Header1", "value2"),
                ("My-Header1", "value1"),
            ],
            body: nil, sessionToken: nil,
            canonicalRequest: """
                GET
                /

                host:example.amazonaws.com
                my-header1:value2,value2,value1
                x-amz-date:20150830T123600Z

                host;my-header1;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c
                """,
            signature: "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
        Vector(
            name: "get-vanilla-with-session-token", method: "GET",
            url: "https://example.amazonaws.com/",
            headers: [("Host", "example.amazonaws.com")],
            body: nil, sessionToken: "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267",
            canonicalRequest: """
                GET
                /

                host:example.amazonaws.com
                x-amz-date:20150830T123600Z
                x-amz-security-token:6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267

                host;x-amz-date;x-amz-security-token
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b
                """,
            signature: "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"),
        Vector(
            name: "post-x-www-form-urlencoded", method: "POST",
            url: "https://example.amazonaws.com/",
            headers: [
                ("Content-Type", "application/x-www-form-urlencoded"), ("Host", "example.amazonaws.com"),
                ("Content-Length", "13"),
            ],
            body: "Param1=value1", sessionToken: nil,
            canonicalRequest: """
                POST
                /

                content-length:13
                content-type:application/x-www-form-urlencoded
                host:example.amazonaws.com
                x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e
                x-amz-date:20150830T123600Z

                content-length;content-type;host;x-amz-content-sha256;x-amz-date
                9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e
                """,
            stringToSign: """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/service/aws4_request
                b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb
                """,
            signature: "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"),
    ]

    @Test(arguments: suite)
    func awsTestSuite(_ vector: Vector) throws {
        // Given: the suite's signer for service "service"
        let credentials = AWSCredentials(
            accessKeyID: Self.credentials.accessKeyID, secretAccessKey: Self.credentials.secretAccessKey,
            sessionToken: vector.sessionToken)
        let signer = SigV4Signer(
            credentials: credentials, region: "us-east-1", service: "service", sendsContentHash: vector.body != nil)
        let payload = vector.body.map { SigV4Signer.PayloadHash.sha256(of: Data($0.utf8)) } ?? .emptyBody

        // When
        let signed = try signer.sign(
            method: vector.method, url: try #require(URL(string: vector.url)), headers: vector.headers,
            payloadHash: payload, date: Self.suiteDate)

        // Then
        #expect(signed.canonicalRequest == vector.canonicalRequest)
        #expect(signed.stringToSign == vector.stringToSign)
        #expect(signed.signature == vector.signature)
        let signedHeaders = try #require(vector.canonicalRequest.split(separator: "\n").dropLast().last)
        #expect(
            signed.authorization
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                + "SignedHeaders=\(signedHeaders), Signature=\(vector.signature)")
    }

    @Test func signingKeyDerivation() {
        // Given: AWS's documented example of deriving a signing key (IAM, 2012-02-15);
        // the value was recomputed with Python's hmac module
        let signer = SigV4Signer(credentials: Self.credentials, region: "us-east-1", service: "iam")

        // When
        let key = signer.signingKey(day: "20120215").withUnsafeBytes { Hex.lowercase($0) }

        // Then
        #expect(key == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d")
    }

    // MARK: - S3

    @Test func s3KeyWithSpacesAndUnicodeUnsignedPayloadAndSessionToken() throws {
        // Given: a part upload to SeaweedFS's default port, path-style, of a key with empty
        // components, spaces, a plus, parentheses and non-ASCII characters. The expected
        // values were computed with botocore 1.43.11:
        //     url = "http://127.0.0.1:8333/my-bucket/" + percent_encode(key, safe="/~")
        //           + "?partNumber=2&uploadId=abc%2Fdef%3D%3D"
        //     request = AWSRequest("PUT", url, headers={"Content-Length": "5242880",
        //                                               "Content-Type": "application/octet-stream"})
        //     request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
        //     S3SigV4Auth(Credentials(AKIDEXAMPLE, secret, "session/token+value=="), "s3",
        //                 "us-east-1").add_auth(request)   # datetime patched to 2015-08-30T12:36:00Z
        let key = "photos//2024/a b+c (1)/ünï ☃.txt"
        let location = try S3Location(bucket: "my-bucket", key: key)
        let url = try location.objectURL(
            endpoint: URL(string: "http://127.0.0.1:8333"), region: "us-east-1",
            query: [("partNumber", "2"), ("uploadId", "abc/def==")])
        #expect(
            url.absoluteString
                == "http://127.0.0.1:8333/my-bucket/photos//2024/a%20b%2Bc%20%281%29/%C3%BCn%C3%AF%20%E2%98%83.txt"
                + "?partNumber=2&uploadId=abc%2Fdef%3D%3D")
        let credentials = AWSCredentials(
            accessKeyID: "AKIDEXAMPLE", secretAccessKey: Self.credentials.secretAccessKey,
            sessionToken: "session/token+value==")
        let signer = SigV4Signer(credentials: credentials, region: "us-east-1")

        // When
        let signed = try signer.sign(
            method: "PUT", url: url,
            headers: [("Content-Length", "5242880"), ("Content-Type", "application/octet-stream")],
            payloadHash: .unsigned, date: Self.suiteDate)

        // Then: the path is neither normalised (//) nor encoded twice (%20, not %2520)
        #expect(
            signed.canonicalRequest == """
                PUT
                /my-bucket/photos//2024/a%20b%2Bc%20%281%29/%C3%BCn%C3%AF%20%E2%98%83.txt
                partNumber=2&uploadId=abc%2Fdef%3D%3D
                content-length:5242880
                content-type:application/octet-stream
                host:127.0.0.1:8333
                x-amz-content-sha256:UNSIGNED-PAYLOAD
                x-amz-date:20150830T123600Z
                x-amz-security-token:session/token+value==

                content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token
                UNSIGNED-PAYLOAD
                """)
        #expect(
            signed.stringToSign == """
                AWS4-HMAC-SHA256
                20150830T123600Z
                20150830/us-east-1/s3/aws4_request
                ca4ea9ae9a0dd9de4de1c780d0d30cdd5a9d6e8324403dddae4afd29b7c31f80
                """)
        #expect(
            signed.headers.map(\.name) == [
                "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "Authorization",
            ])
        #expect(
            signed.headers.map(\.value).dropLast() == ["20150830T123600Z", "UNSIGNED-PAYLOAD", "session/token+value=="])
        #expect(
            signed.authorization
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/s3/aws4_request, "
                + "SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date;"
                + "x-amz-security-token, "
                + "Signature=79b8ebf9ae85c22f35815aa5f3f5642b4725e58ea1510b9ea53844d68c4cb9a2")
    }

    @Test func s3InitiateOnAWSVirtualHostedWithDefaultPort() throws {
        // Given: POST ?uploads to a virtual-hosted bucket with an explicit :443, the empty
        // body hashed. Expected values from botocore 1.43.11's S3SigV4Auth (region
        // eu-central-1, payload signing enabled, no session token), as in the test above.
        let signer = SigV4Signer(credentials: Self.credentials, region: "eu-central-1")
        let url = try #require(
            URL(string: "https://examplebucket.s3.eu-central-1.amazonaws.com:443/dir/file.bin?uploads"))

        // When
        let signed = try signer.sign(
            method: "post", url: url, headers: [], payloadHash: .emptyBody, date: Self.suiteDate)

        // Then: no port in host (443 is https's), "uploads=" for the bare parameter
        #expect(
            signed.canonicalRequest == """
                POST
                /dir/file.bin
                uploads=
                host:examplebucket.s3.eu-central-1.amazonaws.com
                x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                x-amz-date:20150830T123600Z

                host;x-amz-content-sha256;x-amz-date
                e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
                """)
        #expect(signed.signature == "00170aa83345e5098764cebbf18344dbb5e362fbd3b906167e4dc46801e13973")
    }

    @Test func s3DocumentationGetObjectExample() throws {
        // Given: the GET Object example of AWS's S3 documentation ("Signature calculations
        // for the Authorization header"): examplebucket, /test.txt, Range bytes=0-9,
        // 2013-05-24; its signature reproduced with botocore 1.43.11's S3SigV4Auth
        let credentials = AWSCredentials(
            accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
        let signer = SigV4Signer(credentials: credentials, region: "us-east-1")

        // When
        let signed = try signer.sign(
            method: "GET", url: try #require(URL(string: "https://examplebucket.s3.amazonaws.com/test.txt")),
            headers: [("Range", "bytes=0-9")], payloadHash: .emptyBody,
            date: Date(timeIntervalSince1970: 1_369_353_600))

        // Then
        #expect(
            signed.stringToSign == """
                AWS4-HMAC-SHA256
                20130524T000000Z
                20130524/us-east-1/s3/aws4_request
                7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972
                """)
        #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    // MARK: - Pieces

    @Test func callersOwnSigningHeadersAreReplacedNotSignedTwice() throws {
        // Given: a caller that already set x-amz-date and Authorization (a retried request)
        let signer = SigV4Signer(credentials: Self.credentials, region: "us-east-1")
        let url = try #require(URL(string: "https://examplebucket.s3.amazonaws.com/test.txt"))
        let plain = try signer.sign(method: "GET", url: url, headers: [], payloadHash: .emptyBody, date: Self.suiteDate)

        // When
        let again = try signer.sign(
            method: "GET", url: url, headers: plain.headers.map { ($0.name, $0.value) }, payloadHash: .emptyBody,
            date: Self.suiteDate)

        // Then
        #expect(again.canonicalRequest == plain.canonicalRequest)
        #expect(again.signature == plain.signature)
    }

    /// A URL and the Host header it signs.
    struct HostCase: Sendable, CustomTestStringConvertible {
        var url: String
        var host: String
        var testDescription: String { url }
    }

    @Test(arguments: [
        HostCase(url: "http://127.0.0.1:8333/b/k", host: "127.0.0.1:8333"),
        HostCase(url: "http://127.0.0.1:80/b/k", host: "127.0.0.1"),
        HostCase(url: "https://s3.example.com:80/b/k", host: "s3.example.com:80"),
        HostCase(url: "http://s3.example.com:443/b/k", host: "s3.example.com:443"),
        HostCase(url: "https://b.s3.us-east-1.amazonaws.com/k", host: "b.s3.us-east-1.amazonaws.com"),
        HostCase(url: "http://[::1]:8333/b/k", host: "[::1]:8333"),
    ])
    func hostHeaderHasThePortOnlyWhenItIsNotTheDefault(_ hostCase: HostCase) throws {
        let url = try #require(URL(string: hostCase.url))
        let components = try #require(URLComponents(url: url, resolvingAgainstBaseURL: false))
        #expect(SigV4Signer.hostHeader(components) == hostCase.host)
        let signed = try SigV4Signer(credentials: Self.credentials, region: "us-east-1")
            .sign(method: "GET", url: url, headers: [], payloadHash: .emptyBody, date: Self.suiteDate)
        #expect(signed.canonicalRequest.contains("\nhost:\(hostCase.host)\n"))
    }

    @Test func encodingKeepsOnlyUnreservedBytesAndOptionallySlash() {
        let text = "A-Za-z0-9._~ /+=&?%#ü"
        #expect(SigV4Signer.encode(text.utf8, keepingSlash: true) == "A-Za-z0-9._~%20/%2B%3D%26%3F%25%23%C3%BC")
        #expect(SigV4Signer.encode(text.utf8, keepingSlash: false) == "A-Za-z0-9._~%20%2F%2B%3D%26%3F%25%23%C3%BC")
    }

    @Test func pathsAreReencodedWithoutNormalisation() {
        // Lowercase hex becomes uppercase; unreserved bytes sent encoded are decoded; a stray
        // % is encoded; dots and empty segments stay.
        #expect(
            SigV4Signer.canonicalURI(percentEncodedPath: "/b/%c3%bc%7E/./../a//%zz%4") == "/b/%C3%BC~/./../a//%25zz%254"
        )
        #expect(SigV4Signer.canonicalURI(percentEncodedPath: "") == "/")
    }

    @Test func queryIsSortedByEncodedNameThenValueWithPlusLiteral() {
        #expect(
            SigV4Signer.canonicalQuery(percentEncodedQuery: "b=2&a=z&a=y&uploads&c=&d=a+b&e=%2f")
                == "a=y&a=z&b=2&c=&d=a%2Bb&e=%2F&uploads=")
        #expect(SigV4Signer.canonicalQuery(percentEncodedQuery: nil) == "")
    }

    @Test func payloadHashes() {
        #expect(SigV4Signer.PayloadHash.unsigned.value == "UNSIGNED-PAYLOAD")
        #expect(
            SigV4Signer.PayloadHash.emptyBody.value
                == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let upper = SigV4Signer.PayloadHash(hex: String(repeating: "AB", count: 32))
        #expect(upper?.value == String(repeating: "ab", count: 32))
        #expect(SigV4Signer.PayloadHash(hex: String(repeating: "a", count: 63)) == nil)
        #expect(SigV4Signer.PayloadHash(hex: String(repeating: "g", count: 64)) == nil)
    }

    @Test func timestampIsUTCBasicFormat() throws {
        #expect(try SigV4Signer.timestamp(Self.suiteDate.addingTimeInterval(0.999)) == "20150830T123600Z")
        #expect(try SigV4Signer.timestamp(Date(timeIntervalSince1970: 951_868_799)) == "20000229T235959Z")
    }

    @Test func aURLWithoutAHostIsRefused() throws {
        let signer = SigV4Signer(credentials: Self.credentials, region: "us-east-1")
        let url = try #require(URL(string: "/bucket/key"))
        #expect(throws: DownloadError.self) {
            try signer.sign(method: "GET", url: url, headers: [], payloadHash: .emptyBody, date: Self.suiteDate)
        }
    }
}
