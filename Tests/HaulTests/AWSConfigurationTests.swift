import Foundation
import Testing

@testable import Haul

@Suite("AWS credentials, region and endpoint")
struct AWSConfigurationTests {
    static let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

    /// Resolves with the files' texts given directly.
    static func resolve(
        _ environment: [String: String] = [:], credentials: String? = nil, config: String? = nil
    ) throws(DownloadError) -> AWSConfiguration {
        try AWSConfiguration.resolve(
            environment: environment,
            files: AWSConfiguration.Files(
                credentials: credentials, config: config, credentialsPath: "/home/u/.aws/credentials",
                configPath: "/home/u/.aws/config"))
    }

    /// The message of the error `body` throws, or `nil` if it throws none.
    static func message(_ body: () throws(DownloadError) -> AWSConfiguration) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            #expect(error.code == .invalidConfiguration)
            return error.message
        }
    }

    // MARK: - Credentials

    @Test func environmentCredentialsComeFirst() throws {
        // Given: credentials in the environment and in both files
        let environment = [
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": Self.secret, "AWS_SESSION_TOKEN": "token",
        ]
        let credentials = "[default]\naws_access_key_id = AKIDFILE\naws_secret_access_key = file-secret\n"

        // When
        let configuration = try Self.resolve(environment, credentials: credentials, config: credentials)

        // Then
        #expect(
            configuration.credentials
                == AWSCredentials(accessKeyID: "AKIDENV", secretAccessKey: Self.secret, sessionToken: "token"))
        #expect(configuration.credentialSource == "environment")
        #expect(configuration.profile == "default")
        #expect(configuration.region == "us-east-1")
        #expect(configuration.endpoint == nil)
    }

    @Test func theCredentialsFileComesBeforeTheConfigFile() throws {
        // Given
        let credentials = """
            [default]
            aws_access_key_id = AKIDCREDS
            aws_secret_access_key = creds-secret
            aws_session_token = creds-token
            """
        let config = """
            [default]
            aws_access_key_id = AKIDCONFIG
            aws_secret_access_key = config-secret
            region = eu-west-3
            """

        // When
        let configuration = try Self.resolve(credentials: credentials, config: config)

        // Then: the keys from the credentials file, the region from the config file
        #expect(configuration.credentials.accessKeyID == "AKIDCREDS")
        #expect(configuration.credentials.secretAccessKey == "creds-secret")
        #expect(configuration.credentials.sessionToken == "creds-token")
        #expect(configuration.credentialSource == "/home/u/.aws/credentials [default]")
        #expect(configuration.region == "eu-west-3")
    }

    @Test func aNamedProfileReadsNameInCredentialsAndProfileNameInConfig() throws {
        // Given: AWS_PROFILE=dev; [dev] in the config file is not the dev profile
        let credentials = """
            [default]
            aws_access_key_id = AKIDDEFAULT
            aws_secret_access_key = default-secret
            [dev]
            aws_access_key_id = AKIDDEV
            aws_secret_access_key = dev-secret
            """
        let config = """
            [dev]
            region = ap-south-1
            [profile dev]
            region = eu-north-1
            """

        // When
        let configuration = try Self.resolve(["AWS_PROFILE": "dev"], credentials: credentials, config: config)

        // Then
        #expect(configuration.profile == "dev")
        #expect(configuration.credentials.accessKeyID == "AKIDDEV")
        #expect(configuration.region == "eu-north-1")
    }

    @Test func credentialsMayComeFromTheConfigFileAlone() throws {
        // Given: [profile dev] in config, and a credentials file without dev
        let config = """
            [profile   dev]
            aws_access_key_id=AKIDCONFIG
            aws_secret_access_key=config-secret
            """

        // When
        let configuration = try Self.resolve(
            ["AWS_PROFILE": "dev"], credentials: "[other]\naws_access_key_id = X\n", config: config)

        // Then
        #expect(configuration.credentials.accessKeyID == "AKIDCONFIG")
        #expect(configuration.credentials.sessionToken == nil)
        #expect(configuration.credentialSource == "/home/u/.aws/config [profile dev]")
    }

    @Test func theDefaultProfileIsDefaultOrProfileDefaultInConfig() throws {
        let plain = try Self.resolve(config: "[default]\naws_access_key_id = A\naws_secret_access_key = s\n")
        #expect(plain.credentials.accessKeyID == "A")
        let prefixed = try Self.resolve(config: "[profile default]\naws_access_key_id = B\naws_secret_access_key = s\n")
        #expect(prefixed.credentials.accessKeyID == "B")
    }

    @Test func aMissingNamedProfileIsNamedEvenWithEnvironmentCredentials() {
        // Given: AWS_PROFILE names a profile that neither file has
        let environment = ["AWS_PROFILE": "prod", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "s"]

        // When
        let message = Self.message { () throws(DownloadError) in
            try Self.resolve(environment, credentials: "[default]\n", config: "[profile dev]\n")
        }

        // Then
        #expect(message?.contains("\"prod\"") == true)
        #expect(message?.contains("AWS_PROFILE") == true)
        #expect(message?.contains("[profile prod]") == true)
    }

    @Test func noCredentialsSaysWhatToSet() {
        // Given: no variables, and a default profile without keys
        let message = Self.message { () throws(DownloadError) in
            try Self.resolve(credentials: nil, config: "[default]\nregion = us-west-2\n")
        }

        // Then
        #expect(message != nil)
        for needed in [
            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "/home/u/.aws/credentials", "/home/u/.aws/config",
            "aws_access_key_id", "AWS_PROFILE",
        ] {
            #expect(message?.contains(needed) == true, "missing \(needed)")
        }
    }

    @Test func halfAKeyIsAnErrorNamingTheMissingHalf() {
        let fromEnvironment = Self.message { () throws(DownloadError) in
            try Self.resolve(["AWS_ACCESS_KEY_ID": "A"])
        }
        #expect(fromEnvironment?.contains("AWS_SECRET_ACCESS_KEY is not") == true)

        let fromFile = Self.message { () throws(DownloadError) in
            try Self.resolve(credentials: "[default]\naws_access_key_id = A\n")
        }
        #expect(
            fromFile?.contains("/home/u/.aws/credentials [default] has aws_access_key_id but no aws_secret_access_key")
                == true)
    }

    @Test func emptyVariablesCountAsUnset() throws {
        let configuration = try Self.resolve(
            ["AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "", "AWS_REGION": ""],
            credentials: "[default]\naws_access_key_id = A\naws_secret_access_key = s\n")
        #expect(configuration.credentials.accessKeyID == "A")
        #expect(configuration.profile == "default")
        #expect(configuration.region == "us-east-1")
    }

    @Test func unsupportedCredentialSourcesAreNamed() {
        let message = Self.message { () throws(DownloadError) in
            try Self.resolve(
                ["AWS_PROFILE": "admin"],
                config: "[profile admin]\nrole_arn = arn:aws:iam::123456789012:role/admin\nsource_profile = default\n")
        }
        #expect(message?.contains("role_arn") == true)
        #expect(message?.contains("does not support") == true)
    }

    // MARK: - Region

    /// Region settings and the region they give.
    struct RegionCase: Sendable, CustomTestStringConvertible {
        var environment: [String: String]
        var config: String?
        var region: String
        var testDescription: String { region }
    }

    static let keys = ["AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "s"]

    @Test(arguments: [
        RegionCase(
            environment: keys.merging(["AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-2"]) { $1 },
            config: "[default]\nregion = eu-west-3\n", region: "eu-west-1"),
        RegionCase(
            environment: keys.merging(["AWS_DEFAULT_REGION": "eu-west-2"]) { $1 },
            config: "[default]\nregion = eu-west-3\n", region: "eu-west-2"),
        RegionCase(environment: keys, config: "[default]\nregion = eu-west-3\n", region: "eu-west-3"),
        RegionCase(environment: keys, config: nil, region: "us-east-1"),
    ])
    func regionOrder(_ regionCase: RegionCase) throws {
        #expect(try Self.resolve(regionCase.environment, config: regionCase.config).region == regionCase.region)
    }

    @Test func theCredentialsFilesValuesOverrideTheConfigFiles() throws {
        // botocore merges the credentials file's profile over the config file's.
        let configuration = try Self.resolve(
            credentials: "[default]\naws_access_key_id = A\naws_secret_access_key = s\nregion = sa-east-1\n",
            config: "[default]\nregion = eu-west-3\n")
        #expect(configuration.region == "sa-east-1")
    }

    // MARK: - Endpoint

    /// Endpoint settings and the endpoint they give.
    struct EndpointCase: Sendable, CustomTestStringConvertible {
        var name: String
        var environment: [String: String]
        var endpoint: String?
        var testDescription: String { name }
    }

    static let endpointConfig = """
        [default]
        endpoint_url = http://profile.example:1
        services = local
        s3 =
          endpoint_url = http://nested.example:2
          addressing_style = path

        [services local]
        s3 =
          endpoint_url = http://services.example:3
        """

    @Test(arguments: [
        EndpointCase(
            name: "AWS_ENDPOINT_URL_S3",
            environment: ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333", "AWS_ENDPOINT_URL": "http://global:9"],
            endpoint: "http://127.0.0.1:8333"),
        EndpointCase(
            name: "AWS_ENDPOINT_URL", environment: ["AWS_ENDPOINT_URL": "https://global.example"],
            endpoint: "https://global.example"),
        EndpointCase(name: "services section", environment: [:], endpoint: "http://services.example:3"),
        EndpointCase(
            name: "ignored", environment: ["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"], endpoint: nil),
        EndpointCase(
            name: "ignored but the environment's",
            environment: [
                "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "TRUE", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333",
            ], endpoint: "http://127.0.0.1:8333"),
    ])
    func endpointOrder(_ endpointCase: EndpointCase) throws {
        let configuration = try Self.resolve(
            Self.keys.merging(endpointCase.environment) { $1 }, config: Self.endpointConfig)
        #expect(configuration.endpoint?.absoluteString == endpointCase.endpoint)
    }

    @Test func theProfilesNestedS3EndpointComesBeforeItsOwn() throws {
        let withNested = try Self.resolve(
            Self.keys,
            config: "[default]\nendpoint_url = http://profile.example:1\ns3 =\n  endpoint_url = http://nested:2\n")
        #expect(withNested.endpoint?.absoluteString == "http://nested:2")
        let plain = try Self.resolve(Self.keys, config: "[default]\nendpoint_url = http://profile.example:1\n")
        #expect(plain.endpoint?.absoluteString == "http://profile.example:1")
    }

    @Test func anEndpointThatIsNotAnHTTPURLNamesItsSetting() {
        for (environment, config, setting) in [
            (["AWS_ENDPOINT_URL_S3": "127.0.0.1:8333"], nil, "AWS_ENDPOINT_URL_S3"),
            (["AWS_ENDPOINT_URL": "ftp://h/"], nil, "AWS_ENDPOINT_URL"),
            ([:], "[default]\nendpoint_url = http://h/?q=1\n", "endpoint_url in /home/u/.aws/config"),
        ] as [([String: String], String?, String)] {
            let message = Self.message { () throws(DownloadError) in
                try Self.resolve(Self.keys.merging(environment) { $1 }, config: config)
            }
            #expect(message?.contains(setting) == true, "\(setting): \(message ?? "no error")")
        }
    }

    // MARK: - The files' syntax

    @Test func commentsWhiteSpaceAndLineEndings() throws {
        // Given: comments of both kinds, inline comments after white space, a # inside a
        // value, tabs, CRLF line ends, and "key: value"
        let text = [
            "# full-line comment", "; another", "  [ default ]  ; after the header",
            "\taws_access_key_id\t=\tAKID#1   # inline", "aws_secret_access_key = se;cret ; inline",
            "region: eu-west-1", "", "   # indented comment",
        ].joined(separator: "\r\n")

        // When
        let file = try AWSProfileFile(parsing: text, path: "f")

        // Then
        let section = try #require(file.credentialsProfile("default"))
        #expect(
            section.values == [
                "aws_access_key_id": "AKID#1", "aws_secret_access_key": "se;cret", "region": "eu-west-1",
            ])
    }

    @Test func keysAreCaseSensitive() {
        let message = Self.message { () throws(DownloadError) in
            try Self.resolve(credentials: "[default]\nAWS_ACCESS_KEY_ID = A\nAWS_SECRET_ACCESS_KEY = s\n")
        }
        #expect(message?.hasPrefix("no AWS credentials") == true)
    }

    @Test func aSectionSeenTwiceIsMergedTheLaterWinning() throws {
        let file = try AWSProfileFile(parsing: "[a]\nx = 1\ny = 1\n[b]\n[a]\ny = 2\n", path: "f")
        #expect(file.credentialsProfile("a")?.values == ["x": "1", "y": "2"])
    }

    @Test func nestedPropertiesAndContinuations() throws {
        let file = try AWSProfileFile(
            parsing:
                "[p]\ns3 =\n  endpoint_url = http://x\n  # comment\n  max_concurrent_requests = 4\nnote = a\n  b\n",
            path: "f")
        let section = try #require(file.credentialsProfile("p"))
        #expect(section.nested["s3"] == ["endpoint_url": "http://x", "max_concurrent_requests": "4"])
        #expect(section.values["note"] == "a\nb")
    }

    @Test func malformedLinesNameFileAndLineButNotTheirText() {
        for (text, line) in [
            ("[default]\naws_secret_access_key = ok\nthis-line-is-secret\n", 3),
            ("aws_secret_access_key = this-line-is-secret\n", 1),
            ("[default\nthis-line-is-secret = 1\n", 1),
        ] {
            do {
                _ = try AWSProfileFile(parsing: text, path: "/home/u/.aws/credentials")
                Issue.record("no error for \(line)")
            } catch {
                #expect(error.message.hasPrefix("/home/u/.aws/credentials line \(line): "))
                #expect(!error.message.contains("this-line-is-secret"))
            }
        }
    }

    // MARK: - Secrets stay secret

    @Test func theSecretAndTokenNeverAppearInDescriptions() throws {
        // Given
        let configuration = try Self.resolve([
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": Self.secret,
            "AWS_SESSION_TOKEN": "TOKEN-SECRET-VALUE",
        ])
        let credentials = configuration.credentials

        // When
        var dumped = ""
        dump(credentials, to: &dumped)
        var dumpedConfiguration = ""
        dump(configuration, to: &dumpedConfiguration)
        let texts = [
            credentials.description, credentials.debugDescription, String(describing: credentials),
            String(reflecting: credentials), "\(credentials)", dumped, configuration.description,
            String(reflecting: configuration), dumpedConfiguration, "\([credentials])",
        ]

        // Then
        for text in texts {
            #expect(!text.contains(Self.secret), "\(text)")
            #expect(!text.contains("TOKEN-SECRET-VALUE"), "\(text)")
        }
        #expect(credentials.description.contains("AKIDEXAMPLE"))
        #expect(credentials.description.contains("<redacted>"))
    }

    // MARK: - Reading the files

    @Test func filePathsFollowTheVariablesAndExpandTilde() {
        let defaults = AWSConfiguration.Files.paths(environment: ["HOME": "/home/u"])
        #expect(defaults.credentials == "/home/u/.aws/credentials")
        #expect(defaults.config == "/home/u/.aws/config")
        let set = AWSConfiguration.Files.paths(environment: [
            "HOME": "/home/u", "AWS_SHARED_CREDENTIALS_FILE": "~/creds", "AWS_CONFIG_FILE": "/etc/aws/config",
        ])
        #expect(set.credentials == "/home/u/creds")
        #expect(set.config == "/etc/aws/config")
    }

    @Test func absentFilesAreNilAndPresentOnesAreRead() throws {
        // Given: a credentials file, and no config file
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("haul-aws-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let credentialsPath = directory.appendingPathComponent("credentials").path
        try "[default]\naws_access_key_id = A\naws_secret_access_key = s\n".write(
            toFile: credentialsPath, atomically: true, encoding: .utf8)
        let environment = [
            "AWS_SHARED_CREDENTIALS_FILE": credentialsPath,
            "AWS_CONFIG_FILE": directory.appendingPathComponent("config").path,
        ]

        // When
        let files = try AWSConfiguration.Files.read(environment: environment)

        // Then
        #expect(files.credentials?.contains("aws_access_key_id = A") == true)
        #expect(files.config == nil)
        #expect(try AWSConfiguration.resolve(environment: environment, files: files).credentials.accessKeyID == "A")

        // And: a directory where the file should be cannot be read
        #expect(throws: DownloadError.self) {
            try AWSConfiguration.Files.read(environment: ["AWS_CONFIG_FILE": directory.path, "HOME": directory.path])
        }
    }
}
