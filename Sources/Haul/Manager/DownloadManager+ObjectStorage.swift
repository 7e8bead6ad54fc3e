public import Foundation

extension DownloadManager {
    /// An S3-compatible object store that downloads with an
    /// ``DownloadDestination/object(bucket:key:staging:)`` destination go into: its endpoint,
    /// region and credentials, and how objects are uploaded.
    ///
    /// ```swift
    /// var configuration = DownloadManager.Configuration()
    /// configuration.objectStorage = try .fromEnvironment()  // AWS_ACCESS_KEY_ID, AWS_PROFILE, …
    /// ```
    ///
    /// The secret key and session token never appear in ``description``.
    public struct ObjectStorage: Sendable, CustomStringConvertible {
        /// The store's URL for path-style requests (`http://127.0.0.1:8333` for SeaweedFS,
        /// MinIO and the like); `nil` for AWS itself, reached at the region's virtual-hosted
        /// address (`https://BUCKET.s3.REGION.amazonaws.com`).
        public var endpoint: URL?
        /// The region requests are signed for, such as `us-east-1`.
        public var region: String
        /// The access key ID.
        public var accessKeyID: String
        /// The secret access key.
        public var secretAccessKey: String
        /// The session token of temporary credentials, if any.
        public var sessionToken: String?
        /// The size of a multipart upload's parts, grown as needed to stay within S3's
        /// 10,000 parts: 5 MiB to 5 GiB. Default: 8 MiB.
        public var partSize: Int64 = 8 << 20
        /// Objects of at most this size are uploaded in one `PUT`. Default: 8 MiB.
        public var singlePutThreshold: Int64 = 8 << 20
        /// Parts of one object uploaded at once. Default: 4.
        public var uploadConcurrency: Int = 4

        /// A store reached with these credentials.
        public init(
            accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, region: String = "us-east-1",
            endpoint: URL? = nil
        ) {
            self.accessKeyID = accessKeyID
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
            self.region = region
            self.endpoint = endpoint
        }

        /// The store as the AWS command-line tools find it: `AWS_ACCESS_KEY_ID`,
        /// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, else the profile `AWS_PROFILE`
        /// (default `default`) of `~/.aws/credentials` and `~/.aws/config`
        /// (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`); the region from `AWS_REGION`,
        /// `AWS_DEFAULT_REGION` or the profile; the endpoint from `AWS_ENDPOINT_URL_S3`,
        /// `AWS_ENDPOINT_URL` or the profile's `endpoint_url`.
        ///
        /// - Throws: ``DownloadError/Code/invalidConfiguration`` saying what is missing or
        ///   unreadable (never a secret).
        public static func fromEnvironment(
            _ environment: [String: String] = ProcessInfo.processInfo.environment
        ) throws(DownloadError) -> ObjectStorage {
            let resolved = try AWSConfiguration.resolve(
                environment: environment, files: try AWSConfiguration.Files.read(environment: environment))
            return ObjectStorage(
                accessKeyID: resolved.credentials.accessKeyID, secretAccessKey: resolved.credentials.secretAccessKey,
                sessionToken: resolved.credentials.sessionToken, region: resolved.region, endpoint: resolved.endpoint)
        }

        public var description: String {
            "ObjectStorage(endpoint: \(endpoint?.absoluteString ?? "AWS"), region: \(region), "
                + "accessKeyID: \(accessKeyID), secretAccessKey: <redacted>"
                + (sessionToken == nil ? "" : ", sessionToken: <redacted>") + ")"
        }

        /// The configuration the signer and the client use.
        var aws: AWSConfiguration {
            AWSConfiguration(
                credentials: AWSCredentials(
                    accessKeyID: accessKeyID, secretAccessKey: secretAccessKey, sessionToken: sessionToken),
                region: region, endpoint: endpoint, profile: "", credentialSource: "the manager's configuration")
        }
    }
}

extension DownloadManager {
    /// Refuses an object destination when no store is configured, before anything is
    /// downloaded.
    nonisolated func checkObjectStorage(_ validated: ValidatedRequest) throws(DownloadError) {
        guard let object = validated.paths?.object, objectStore == nil else { return }
        throw DownloadError(
            .invalidConfiguration,
            "\(object): no object store is configured: set DownloadManager.Configuration.objectStorage "
                + "(haul reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE and ~/.aws/credentials)")
    }
}
