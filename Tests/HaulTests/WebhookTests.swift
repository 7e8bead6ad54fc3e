import Crypto
import Foundation
import Haul
import HaulTestSupport
import Testing

/// `haul serve --webhook URL --webhook-secret-file FILE`: a signed JSON `POST` for each
/// download end, retried until the receiver takes it, never lost to a restart or a kill.
@Suite("Webhooks", .timeLimit(.minutes(4)))
struct WebhookTests {
    typealias Service = HeavyProcessTests.ServiceProcessTests.Service

    /// A secret file readable by its owner only.
    static func secretFile(in directory: URL, _ secret: String) throws -> String {
        let path = directory.appendingPathComponent("webhook.secret").path
        try Data((secret + "\n").utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        return path
    }

    /// Whether `delivery` carries the HMAC-SHA256 of its body under `secret`.
    static func isSigned(_ delivery: WebhookReceiver.Delivery, with secret: String) -> Bool {
        let code = HMAC<SHA256>.authenticationCode(for: delivery.body, using: SymmetricKey(data: Data(secret.utf8)))
        return delivery.signature == "sha256=" + code.map { String(format: "%02x", $0) }.joined()
    }

    static func object(_ delivery: WebhookReceiver.Delivery) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: delivery.body) as? [String: Any])
    }

    @Test func eachEndIsSignedAndRetriedUntilTheReceiverTakesIt() async throws {
        guard #available(macOS 14, iOS 17, tvOS 17, *) else { return }
        try await CLIFixture.with { f, journal in
            let secret = "s3cret-\(UUID().uuidString)"
            let secretPath = try Self.secretFile(in: f.directory, secret)
            let receiver = try await WebhookReceiver.start(refusing: 2)
            let directory = f.directory.appendingPathComponent("files").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let service = try await Service.start(
                journal: journal, directory: directory,
                arguments: ["--webhook", receiver.url, "--webhook-secret-file", secretPath])
            f.serve("w", count: 12_345)
            let url = f.server.url("/files/w").absoluteString
            #expect(try await Haul.run(["get", "--journal", journal, "-d", directory, url]).status == 0)

            // Refused twice (503), taken the third time: the same event each time, signed.
            let three = await receiver.deliveries(atLeast: 3)
            #expect(three.map(\.attempt) == ["1", "2", "3"])
            #expect(three.map(\.accepted) == [false, false, true])
            #expect(Set(three.map(\.eventID)).count == 1)
            for delivery in three { #expect(Self.isSigned(delivery, with: secret)) }
            let body = try Self.object(three[2])
            #expect(body["id"] as? String == three[2].eventID)
            #expect(body["type"] as? String == "download.completed")
            let download = try #require(body["download"] as? [String: Any])
            #expect(download["id"] as? String == url)
            #expect(download["url"] as? String == url)
            #expect(download["path"] as? String == directory + "/w")
            #expect(download["bytes"] as? Int == 12_345)

            // A failure sends its own, with the error's code.
            let missing = f.server.url("/files/none").absoluteString
            #expect(try await Haul.run(["get", "--journal", journal, "-d", directory, missing]).status == 1)
            let four = await receiver.deliveries(atLeast: 4)
            let failed = try Self.object(four[3])
            #expect(failed["type"] as? String == "download.failed")
            #expect((failed["download"] as? [String: Any])?["error"] as? [String: String] != nil)
            #expect(((failed["download"] as? [String: Any])?["error"] as? [String: String])?["code"] == "httpStatus")
            #expect(four[3].eventID != four[2].eventID)
            #expect(Self.isSigned(four[3], with: secret))

            // Once both were taken, nothing is owed.
            _ = await service.process.errorLine { $0.contains("webhook delivered") && $0.contains("/files/none") }
            #expect(await service.stop() == 0)
            #expect(try Journal(path: journal).webhooksOwed() == 0)
            #expect(!service.process.errorText.contains(secret))
            await receiver.stop()
        }
    }

    @Test func aWebhookOwedWhenTheServiceIsKilledIsDeliveredByTheNextStart() async throws {
        guard #available(macOS 14, iOS 17, tvOS 17, *) else { return }
        try await CLIFixture.with { f, journal in
            let secret = "k1ll-\(UUID().uuidString)"
            let secretPath = try Self.secretFile(in: f.directory, secret)
            let receiver = try await WebhookReceiver.start(refusing: .max)
            let arguments = ["--webhook", receiver.url, "--webhook-secret-file", secretPath]
            let first = try await Service.start(journal: journal, directory: f.directory.path, arguments: arguments)
            f.serve("k", count: 3_000)
            let url = f.server.url("/files/k").absoluteString
            #expect(try await Haul.run(["get", "--journal", journal, "-d", f.directory.path, url]).status == 0)
            // Between the end and its delivery: the receiver has refused it once (or more:
            // a loaded machine may let the first service retry before the kill lands).
            let refused = await receiver.deliveries(atLeast: 1)
            first.process.send(SIGKILL)
            _ = await first.process.wait()
            #expect(try Journal(path: journal).webhooksOwed() == 1)

            // From now on the receiver takes them: whatever comes next is accepted, and it
            // is the one to look at.
            receiver.refuse(0)
            let beforeRestart = await receiver.deliveries(atLeast: 1).count
            let second = try await Service.start(journal: journal, directory: f.directory.path, arguments: arguments)
            let all = await receiver.deliveries(atLeast: beforeRestart + 1)
            let delivered = all[beforeRestart]
            #expect(delivered.accepted)
            #expect(delivered.eventID == refused[0].eventID, "the same event, which the receiver may drop as a repeat")
            #expect(Self.isSigned(delivered, with: secret))
            #expect(try Self.object(delivered)["type"] as? String == "download.completed")
            _ = await second.process.errorLine { $0.contains("webhook delivered") }
            #expect(await second.stop() == 0)
            #expect(try Journal(path: journal).webhooksOwed() == 0)
            await receiver.stop()
        }
    }

    @Test func aPersonsPauseSendsOneWhenAskedAndTheServicesStopDoesNot() async throws {
        guard #available(macOS 14, iOS 17, tvOS 17, *) else { return }
        try await CLIFixture.with { f, journal in
            let secretPath = try Self.secretFile(in: f.directory, "p4use")
            let receiver = try await WebhookReceiver.start()
            let service = try await Service.start(
                journal: journal, directory: f.directory.path,
                arguments: [
                    "--webhook", receiver.url, "--webhook-secret-file", secretPath, "--webhook-events", "paused",
                ])
            f.serve("p", count: 50_000)
            f.serve("q", count: 50_000)
            let paused = f.server.url("/files/p?gate=p").absoluteString
            let stopped = f.server.url("/files/q?gate=p").absoluteString
            #expect(
                try await Haul.run(["get", "--detach", "--journal", journal, "-d", f.directory.path, paused, stopped]).status
                    == 0)
            await f.server.waitForGateWaiters("p", count: 2)
            #expect(try await Haul.run(["pause", "--journal", journal, paused]).status == 0)
            let one = await receiver.deliveries(atLeast: 1)
            #expect(try Self.object(one[0])["type"] as? String == "download.paused")
            #expect((try Self.object(one[0])["download"] as? [String: Any])?["id"] as? String == paused)
            _ = await service.process.errorLine { $0.contains("webhook delivered") }
            // The service's own stop pauses the other download: no webhook for that.
            #expect(await service.stop() == 0)
            f.server.release("p")
            #expect(try Journal(path: journal).webhooksOwed() == 0)
            #expect(await receiver.deliveries(atLeast: 1).count == 1)
            await receiver.stop()
        }
    }

    @Test func badWebhookOptionsAreRefused() async throws {
        try await CLIFixture.with { f, journal in
            let open = f.directory.appendingPathComponent("open.secret").path
            try Data("x".utf8).write(to: URL(fileURLWithPath: open))
            try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: open)
            let secret = try Self.secretFile(in: f.directory, "ok")
            let cases: [([String], String)] = [
                (["--webhook", "http://127.0.0.1:1/h"], "needs --webhook-secret-file"),
                (["--webhook", "ftp://example.com/h", "--webhook-secret-file", secret], "http or https URL"),
                (["--webhook", "http://127.0.0.1:1/h", "--webhook-secret-file", open], "can be read by others"),
                (["--webhook", "http://127.0.0.1:1/h", "--webhook-secret-file", secret, "--webhook-events", "started"], "completed, failed and paused"),
                (["--webhook-secret-file", secret], "needs --webhook"),
            ]
            for (arguments, message) in cases {
                let run = try await Haul.run(["serve", "--listen", "127.0.0.1:0", "--journal", journal] + arguments)
                #expect(run.status != 0)
                #expect(run.stderr.contains(message), "\(arguments): \(run.stderr)")
            }
        }
    }
}
