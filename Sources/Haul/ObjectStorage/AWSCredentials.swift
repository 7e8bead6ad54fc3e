/// An access key for S3 (or any service signed with AWS Signature Version 4): a key ID,
/// its secret, and a session token for temporary credentials.
///
/// The secret and the token never appear in ``description``, ``debugDescription`` or what
/// `dump` shows: only the key ID does, so credentials can be logged or put in an error
/// message without leaking them.
///
/// ```swift
/// let credentials = AWSCredentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: secret)
/// print(credentials)  // AWSCredentials(accessKeyID: AKIDEXAMPLE, secretAccessKey: <redacted>)
/// ```
struct AWSCredentials: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
    CustomReflectable
{
    /// The access key ID (`AKIA…`, `ASIA…` for temporary credentials): not a secret.
    let accessKeyID: String
    /// The secret access key, which signs requests; never sent, never shown.
    let secretAccessKey: String
    /// The session token of temporary credentials (`x-amz-security-token`), if any.
    let sessionToken: String?

    /// Creates credentials; an empty session token counts as none.
    init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken?.isEmpty == true ? nil : sessionToken
    }

    /// The key ID only: the secret and the token are redacted.
    var description: String {
        let token = sessionToken == nil ? "" : ", sessionToken: <redacted>"
        return "AWSCredentials(accessKeyID: \(accessKeyID), secretAccessKey: <redacted>\(token))"
    }

    /// The same as ``description``.
    var debugDescription: String { description }

    /// The key ID only, and whether there is a token (what `dump` and the debugger show).
    var customMirror: Mirror {
        Mirror(self, children: ["accessKeyID": accessKeyID, "hasSessionToken": sessionToken != nil])
    }
}
