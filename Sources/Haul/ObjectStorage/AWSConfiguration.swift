import Foundation

/// Who signs S3 requests and where they go: credentials, region and endpoint, resolved from
/// the environment and the shared AWS files the way the AWS CLI resolves them.
///
/// ``resolve(environment:files:)`` is a pure function of an environment and the files'
/// texts; ``Files/read(environment:)`` reads the files.
///
/// ```swift
/// let environment = ProcessInfo.processInfo.environment
/// let configuration = try AWSConfiguration.resolve(
///     environment: environment, files: try .read(environment: environment))
/// ```
///
/// **Credentials**, the first found:
/// 1. `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`);
/// 2. `aws_access_key_id` and `aws_secret_access_key` (with `aws_session_token`) of the
///    profile's `[NAME]` in the credentials file;
/// 3. the same keys in the profile's `[profile NAME]` of the config file (`[default]` for
///    the default profile).
///
/// The profile is `AWS_PROFILE`, else `default`. A profile named by `AWS_PROFILE` must exist
/// in one of the files, even when the environment gives the credentials (as in the CLI).
/// Roles, SSO, `credential_process`, web identity, container and instance credentials are
/// not supported: a profile that relies on them says so.
///
/// **Region**: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`, else `us-east-1`.
///
/// **Endpoint**: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, then from the config file: the
/// `s3` sub-section of the profile's `[services NAME]` section, the profile's own `s3`
/// sub-section (`s3 =` then `  endpoint_url = …`), the profile's `endpoint_url`. None of the
/// configured ones with `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` or the profile's
/// `ignore_configured_endpoint_urls = true`. Without one, ``endpoint`` is `nil`: AWS itself
/// (`https://s3.REGION.amazonaws.com`, virtual-hosted; see ``S3Location``).
///
/// Values of the config file's profile are overridden by the credentials file's profile of
/// the same name (botocore merges them this way). Empty environment variables count as
/// unset.
struct AWSConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// The credentials that sign requests.
    let credentials: AWSCredentials
    /// The region, such as `us-east-1`.
    let region: String
    /// A custom endpoint (`http://127.0.0.1:8333`), or `nil` for AWS itself.
    let endpoint: URL?
    /// The profile the files were read for.
    let profile: String
    /// Where the credentials came from: `environment`, or the file and section.
    let credentialSource: String

    /// The region when nothing names one, as the AWS CLI uses for S3.
    static let defaultRegion = "us-east-1"

    /// The profile, region and endpoint, with the credentials redacted.
    var description: String {
        "AWSConfiguration(profile: \(profile), region: \(region), endpoint: \(endpoint?.absoluteString ?? "AWS"), "
            + "credentials: \(credentials) from \(credentialSource))"
    }

    /// The texts of the shared credentials and config files, and where they were looked for.
    struct Files: Sendable, Hashable {
        /// The credentials file's text, or `nil` if there is none.
        var credentials: String?
        /// The config file's text, or `nil` if there is none.
        var config: String?
        /// Where the credentials file was looked for (named in messages).
        var credentialsPath: String
        /// Where the config file was looked for (named in messages).
        var configPath: String

        /// Texts given directly, as tests do.
        init(
            credentials: String? = nil, config: String? = nil, credentialsPath: String = "~/.aws/credentials",
            configPath: String = "~/.aws/config"
        ) {
            self.credentials = credentials
            self.config = config
            self.credentialsPath = credentialsPath
            self.configPath = configPath
        }

        /// `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE`, else `~/.aws/credentials` and
        /// `~/.aws/config`, with a leading `~/` expanded from `HOME`.
        static func paths(environment: [String: String]) -> (credentials: String, config: String) {
            let home = nonEmpty(environment["HOME"]) ?? NSHomeDirectory()
            func expanded(_ path: String) -> String {
                if path == "~" { return home }
                guard path.hasPrefix("~/") else { return path }
                return PathText.appending(String(path.dropFirst(2)), to: home)
            }
            return (
                expanded(nonEmpty(environment["AWS_SHARED_CREDENTIALS_FILE"]) ?? "~/.aws/credentials"),
                expanded(nonEmpty(environment["AWS_CONFIG_FILE"]) ?? "~/.aws/config")
            )
        }

        /// Reads both files from ``paths(environment:)``; a file that does not exist is `nil`.
        ///
        /// - Throws: ``DownloadError/Code/invalidConfiguration`` for a file that exists but
        ///   cannot be read, or is not UTF-8.
        static func read(environment: [String: String]) throws(DownloadError) -> Files {
            let (credentialsPath, configPath) = paths(environment: environment)
            return Files(
                credentials: try text(at: credentialsPath), config: try text(at: configPath),
                credentialsPath: credentialsPath, configPath: configPath)
        }

        /// The text of the file at `path`, or `nil` if there is no file there.
        static func text(at path: String) throws(DownloadError) -> String? {
            guard FileManager.default.fileExists(atPath: path) else { return nil }
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            } catch {
                throw DownloadError(
                    .invalidConfiguration, "cannot read the AWS file \(path): \(error.localizedDescription)")
            }
            guard let text = String(data: data, encoding: .utf8) else {
                throw DownloadError(.invalidConfiguration, "the AWS file \(path) is not UTF-8 text")
            }
            return text
        }
    }

    /// Resolves credentials, region and endpoint from `environment` and `files`.
    ///
    /// - Throws: ``DownloadError/Code/invalidConfiguration`` when `AWS_PROFILE` names a
    ///   profile neither file has (the message names it), when a file cannot be parsed
    ///   (file and line), when an access key ID comes without its secret (which variable or
    ///   profile), when no credentials are found (what to set), when the profile relies on a
    ///   credential source Haul does not support, or when an endpoint is not an `http` or
    ///   `https` URL (which setting).
    static func resolve(environment: [String: String], files: Files) throws(DownloadError) -> AWSConfiguration {
        let named = nonEmpty(environment["AWS_PROFILE"])
        let profile = named ?? "default"
        let credentialsFile = try files.credentials.map { text throws(DownloadError) in
            try AWSProfileFile(parsing: text, path: files.credentialsPath)
        }
        let configFile = try files.config.map { text throws(DownloadError) in
            try AWSProfileFile(parsing: text, path: files.configPath)
        }
        let fromCredentials = credentialsFile?.credentialsProfile(profile)
        let fromConfig = configFile?.configProfile(profile)
        if named != nil, fromCredentials == nil, fromConfig == nil {
            throw DownloadError(
                .invalidConfiguration,
                "the AWS profile \"\(profile)\" (AWS_PROFILE) is in neither \(files.credentialsPath) "
                    + "([\(profile)]) nor \(files.configPath) ([\(configSectionName(profile))])")
        }
        // The config file's profile, overridden by the credentials file's.
        var merged = fromConfig?.values ?? [:]
        merged.merge(fromCredentials?.values ?? [:]) { _, credentials in credentials }

        let (credentials, source) = try resolveCredentials(
            environment: environment, profile: profile, fromCredentials: fromCredentials, fromConfig: fromConfig,
            merged: merged, files: files)
        let region =
            nonEmpty(environment["AWS_REGION"]) ?? nonEmpty(environment["AWS_DEFAULT_REGION"])
            ?? nonEmpty(merged["region"]) ?? defaultRegion
        let endpoint = try resolveEndpoint(
            environment: environment, profile: fromConfig, merged: merged, configFile: configFile, files: files)
        return AWSConfiguration(
            credentials: credentials, region: region, endpoint: endpoint, profile: profile,
            credentialSource: source)
    }

    /// The credentials from the environment, else the credentials file, else the config file.
    private static func resolveCredentials(
        environment: [String: String], profile: String, fromCredentials: AWSProfileFile.Section?,
        fromConfig: AWSProfileFile.Section?, merged: [String: String], files: Files
    ) throws(DownloadError) -> (AWSCredentials, String) {
        if let keyID = nonEmpty(environment["AWS_ACCESS_KEY_ID"]) {
            guard let secret = nonEmpty(environment["AWS_SECRET_ACCESS_KEY"]) else {
                throw DownloadError(
                    .invalidConfiguration, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both")
            }
            let token = nonEmpty(environment["AWS_SESSION_TOKEN"]) ?? nonEmpty(environment["AWS_SECURITY_TOKEN"])
            return (AWSCredentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: token), "environment")
        }
        let places = [
            (fromCredentials, "\(files.credentialsPath) [\(profile)]"),
            (fromConfig, "\(files.configPath) [\(configSectionName(profile))]"),
        ]
        for case (let section?, let place) in places {
            guard let keyID = nonEmpty(section.values["aws_access_key_id"]) else { continue }
            guard let secret = nonEmpty(section.values["aws_secret_access_key"]) else {
                throw DownloadError(
                    .invalidConfiguration,
                    "\(place) has aws_access_key_id but no aws_secret_access_key: add it")
            }
            let token = nonEmpty(section.values["aws_session_token"]) ?? nonEmpty(section.values["aws_security_token"])
            return (AWSCredentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: token), place)
        }
        let unsupported = ["role_arn", "sso_session", "sso_start_url", "credential_process", "web_identity_token_file"]
        if let key = unsupported.first(where: { merged[$0] != nil }) {
            throw DownloadError(
                .invalidConfiguration,
                "the AWS profile \"\(profile)\" gets its credentials through \(key), which Haul does not support: "
                    + "give it aws_access_key_id and aws_secret_access_key, or set AWS_ACCESS_KEY_ID and "
                    + "AWS_SECRET_ACCESS_KEY")
        }
        throw DownloadError(
            .invalidConfiguration,
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
                + "temporary credentials), or put aws_access_key_id and aws_secret_access_key in [\(profile)] of "
                + "\(files.credentialsPath) (AWS_SHARED_CREDENTIALS_FILE) or [\(configSectionName(profile))] of "
                + "\(files.configPath) (AWS_CONFIG_FILE); AWS_PROFILE chooses the profile")
    }

    /// The endpoint, from the environment or the config file, or `nil` for AWS itself.
    private static func resolveEndpoint(
        environment: [String: String], profile: AWSProfileFile.Section?, merged: [String: String],
        configFile: AWSProfileFile?, files: Files
    ) throws(DownloadError) -> URL? {
        for variable in ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"] {
            if let text = nonEmpty(environment[variable]) { return try endpointURL(text, setting: variable) }
        }
        let ignored =
            nonEmpty(environment["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"])?.lowercased() == "true"
            || merged["ignore_configured_endpoint_urls"]?.lowercased() == "true"
        guard !ignored else { return nil }
        if let services = nonEmpty(merged["services"]),
            let text = nonEmpty(configFile?.section(kind: "services", name: services)?.nested["s3"]?["endpoint_url"])
        {
            return try endpointURL(text, setting: "endpoint_url of s3 in [services \(services)] of \(files.configPath)")
        }
        if let text = nonEmpty(profile?.nested["s3"]?["endpoint_url"]) {
            return try endpointURL(text, setting: "endpoint_url of s3 in \(files.configPath)")
        }
        if let text = nonEmpty(merged["endpoint_url"]) {
            return try endpointURL(text, setting: "endpoint_url in \(files.configPath)")
        }
        return nil
    }

    /// `text` as an endpoint: an `http` or `https` URL with a host, and no query or fragment.
    static func endpointURL(_ text: String, setting: String) throws(DownloadError) -> URL {
        guard let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            components.host?.isEmpty == false, components.query == nil, components.fragment == nil,
            let url = components.url
        else {
            throw DownloadError(
                .invalidConfiguration,
                "the S3 endpoint \(String(reflecting: text)) (\(setting)) is not an http or https URL such as "
                    + "http://127.0.0.1:8333")
        }
        return url
    }

    /// The config file's section name for `profile`: `profile NAME`, or `default`.
    static func configSectionName(_ profile: String) -> String {
        profile == "default" ? "default" : "profile \(profile)"
    }

    /// `text` unless it is `nil` or empty.
    static func nonEmpty(_ text: String?) -> String? {
        guard let text, !text.isEmpty else { return nil }
        return text
    }
}
