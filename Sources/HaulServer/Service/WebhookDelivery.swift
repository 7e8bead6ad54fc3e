import AsyncHTTPClient
import Crypto
import Foundation
package import Haul
package import Logging
import NIOConcurrencyHelpers
package import NIOCore
package import NIOPosix

/// `haul serve --webhook URL`: sends each download end the journal's outbox holds (see
/// ``Journal/Outbox``) to its receiver, as a signed JSON `POST`, until the receiver takes it
/// (a 2xx answer), trying again with backoff after errors and other answers.
///
/// The body names its event (`id`, a UUID), so a receiver can drop a repeat: a delivery
/// whose answer is lost, or one under way when the service is killed, is sent again.
/// `X-Haul-Signature-256: sha256=HEX` is the HMAC-SHA256 of the body under the secret
/// (`--webhook-secret-file`), as GitHub signs its webhooks.
///
/// Journal reads and writes run on the I/O pool; requests on the service's event loops.
package final class WebhookDelivery: Sendable {
    /// The wait after a failed delivery: doubling from ``baseDelay`` up to ``maximumDelay``.
    package static let baseDelay: Duration = .seconds(1)
    package static let maximumDelay: Duration = .seconds(300)
    /// How long a receiver has to answer.
    static let timeout: TimeAmount = .seconds(15)

    private let journal: Journal
    /// The signing secret's bytes (a `SymmetricKey` is made for each signature: it is not `Sendable`).
    private let secret: [UInt8]
    private let threadPool: NIOThreadPool
    private let client: HTTPClient
    private let logger: Logger
    private let signal = NIOLockedValueBox<(pending: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    package init(
        journal: Journal, secret: [UInt8], threadPool: NIOThreadPool, eventLoopGroup: any EventLoopGroup, logger: Logger
    ) {
        self.journal = journal
        self.secret = secret
        self.threadPool = threadPool
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = .init(connect: .seconds(10), read: Self.timeout)
        self.client = HTTPClient(eventLoopGroupProvider: .shared(eventLoopGroup), configuration: configuration)
        self.logger = logger
    }

    /// Something may have been added to the outbox: look again now.
    package func wake() {
        let waiter = signal.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            if state.waiter == nil { state.pending = true }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Delivers until cancelled, then shuts its HTTP client down.
    package func run() async {
        while !Task.isCancelled {
            let due: [Journal.OutboxEntry]
            do {
                due = try await threadPool.runIfActive { [journal] in try journal.dueWebhooks(at: Date()) }
            } catch {
                logger.warning("cannot read the webhook outbox", metadata: ["error": "\(error)"])
                await wait(until: .now + Self.baseDelay)
                continue
            }
            await withTaskGroup(of: Void.self) { group in
                for entry in due { group.addTask { await self.deliver(entry) } }
            }
            if due.count >= 64 { continue }
            let next = try? await threadPool.runIfActive { [journal] in try journal.nextWebhookDue() }
            let deadline = next.flatMap { $0 }.map { ContinuousClock.now + .milliseconds(Int64(max(0, $0.timeIntervalSinceNow) * 1000) + 1) }
            await wait(until: deadline)
        }
        try? await client.shutdown()
    }

    /// Waits for ``wake()``, `deadline` or cancellation, whichever comes first.
    private func wait(until deadline: ContinuousClock.Instant?) async {
        let timer = deadline.map { deadline in
            Task { [weak self] in
                try? await Task.sleep(until: deadline)
                self?.wake()
            }
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = signal.withLockedValue { state -> Bool in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            wake()
        }
        timer?.cancel()
    }

    /// What a receiver gets.
    struct Body: Encodable {
        struct Download: Encodable {
            var id: String
            var url: String
            var state: String
            var path: String?
            var bytes: Int64?
            var error: Failure?
        }

        struct Failure: Encodable {
            var code: String
            var message: String
        }

        /// The event's ID: the same in every attempt.
        var id: String
        /// `download.completed`, `download.failed` or `download.paused`.
        var type: String
        /// When the download ended.
        var time: Date
        var download: Download
    }

    /// The body of `entry`, as sent.
    static func body(of entry: Journal.OutboxEntry) throws -> Data {
        let failure = entry.kind == "completed" ? nil : Body.Failure(code: entry.errorCode ?? "", message: entry.error ?? "")
        let body = Body(
            id: entry.eventID, type: "download.\(entry.kind)", time: entry.createdAt,
            download: Body.Download(
                id: entry.jobID, url: entry.url, state: entry.kind, path: entry.path, bytes: entry.bytes,
                error: entry.kind == "paused" && entry.errorCode == nil ? nil : failure))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return try encoder.encode(body)
    }

    /// `sha256=HEX`: the HMAC-SHA256 of `body` under `secret`.
    static func signature(of body: Data, secret: [UInt8]) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: secret))
        return "sha256=" + code.map { String(format: "%02x", $0) }.joined()
    }

    /// Sends `entry` once; on success removes it from the outbox, else schedules it again.
    private func deliver(_ entry: Journal.OutboxEntry) async {
        let metadata: Logger.Metadata = [
            "id": .string(entry.jobID), "event": .string(entry.eventID), "webhook": .string(entry.target),
            "attempt": "\(entry.attempts + 1)",
        ]
        var failure: String?
        do {
            let body = try Self.body(of: entry)
            var request = HTTPClientRequest(url: entry.target)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "User-Agent", value: "haul-webhook")
            request.headers.add(name: "X-Haul-Event", value: "download.\(entry.kind)")
            request.headers.add(name: "X-Haul-Event-ID", value: entry.eventID)
            request.headers.add(name: "X-Haul-Delivery-Attempt", value: "\(entry.attempts + 1)")
            request.headers.add(name: "X-Haul-Signature-256", value: Self.signature(of: body, secret: secret))
            request.body = .bytes(ByteBuffer(data: body))
            let response = try await client.execute(request, timeout: Self.timeout)
            _ = try? await response.body.collect(upTo: 1 << 16)
            if !(200..<300).contains(Int(response.status.code)) { failure = "HTTP \(response.status.code)" }
        } catch {
            failure = "\(error)"
        }
        do {
            if let failure {
                let delay = Self.delay(afterAttempts: entry.attempts + 1)
                let next = Date().addingTimeInterval(Double(delay.components.seconds))
                try await threadPool.runIfActive { [journal] in try journal.webhookFailed(entry.id, error: failure, next: next) }
                var details = metadata
                details["error"] = .string(failure)
                details["retry"] = "\(delay)"
                logger.warning("webhook not delivered", metadata: details)
            } else {
                try await threadPool.runIfActive { [journal] in try journal.webhookDelivered(entry.id) }
                logger.info("webhook delivered", metadata: metadata)
            }
        } catch {
            logger.warning("cannot update the webhook outbox", metadata: ["error": "\(error)"])
        }
    }

    /// The wait before the next attempt after `attempts` failed ones: 1 s, 2 s, 4 s, … 5 min.
    static func delay(afterAttempts attempts: Int) -> Duration {
        let exponent = min(max(attempts - 1, 0), 20)
        return min(baseDelay * (1 << exponent), maximumDelay)
    }
}
