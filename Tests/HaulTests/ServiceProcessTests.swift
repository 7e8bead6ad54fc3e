import Foundation
import Haul
import HaulTestSupport
import Testing

@testable import Haul
@testable import HaulPostgres

/// `haul serve` as a process: the CLI as its client, a `kill -9` in the middle of
/// downloads, and the dashboard in a real headless Chromium.
/// The suites whose processes load the machine the most (a headless browser) or measure
/// what a kill wastes: serialized with each other, so that neither skews the other.
@Suite(.serialized)
enum HeavyProcessTests {}

extension HeavyProcessTests {
@Suite("Service process", .timeLimit(.minutes(3)))
struct ServiceProcessTests {
    /// A running `haul serve` and the address it listens on.
    struct Service {
        let process: HaulProcess
        let address: String

        /// Starts `haul serve` on a free loopback port for `journal`, saving into `directory`.
        static func start(journal: String, directory: String, arguments: [String] = []) async throws -> Service {
            let process = try HaulProcess(
                ["serve", "--listen", "127.0.0.1:0", "--journal", journal, "-d", directory] + arguments)
            let line = try #require(await process.line { $0.contains("listening on http://") })
            let address = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }).dropFirst(7)
            return Service(process: process, address: String(address))
        }

        /// SIGTERM, and the status it exits with.
        func stop() async -> Int32 {
            process.send(SIGTERM)
            return await process.wait().status
        }
    }

    /// `haul get URL.zsync --seed OLD` while a service runs for the journal: the service
    /// builds the target from the seed and fetches only the block that changed.
    @Test func aDeltaDownloadGoesThroughARunningService() async throws {
        try await CLIFixture.with { f, journal in
            // Given a new version whose first block changed, its control file, and the old
            // version inside the service's root
            let directory = f.directory.path
            let old = FaultServer.randomBytes(count: 400_000, seed: 95)
            var new = old
            new.replaceSubrange(0..<1000, with: FaultServer.randomBytes(count: 1000, seed: 96))
            f.server.setFile("t.bin", new)
            let control = new.withUnsafeBytes {
                ZsyncControl.describing(
                    $0, blockSize: 2048, sequenceMatches: 2, rsumBytes: 3, checksumBytes: 5, filename: "t.bin",
                    modificationTime: nil, urls: ["t.bin"], sha256: true)
            }
            f.server.setFile("t.bin.zsync", Array(control.encoded()))
            let seed = f.directory.appendingPathComponent("old.bin")
            try Data(old).write(to: seed)
            let service = try await Service.start(journal: journal, directory: directory)

            // When haul gets the control file's URL
            let get = try await Haul.run([
                "get", "--journal", journal, "-d", directory, "--seed", seed.path,
                f.server.url("/files/t.bin.zsync").absoluteString,
            ])

            // Then the service built the target, fetching its first block and nothing more
            #expect(get.status == 0, "\(get.stderr)")
            #expect(sha256(f.contents("t.bin")) == sha256(new))
            #expect(f.server.bytesServed(path: "/files/t.bin") == 2048)
            // And a seed outside its roots is refused, naming the field
            let outside = try await Haul.run([
                "get", "--journal", journal, "-d", directory, "--seed", "/etc/hostname",
                f.server.url("/files/t.bin.zsync").absoluteString,
            ])
            #expect(outside.status != 0)
            #expect(outside.stderr.contains("seeds"), "\(outside.stderr)")
            #expect(await service.stop() == 0)
        }
    }

    /// `haul get URL.m3u8 --hls-variant worst -o NAME` while a service runs for the
    /// journal: the service downloads the stream as a job, and `haul get` follows it to
    /// its end; `--hls-variant list` is refused there (it shows variants here).
    @Test func aStreamGoesThroughARunningService() async throws {
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let bytes = HLSJobTests.serveStream(f.server, count: 5)
            let service = try await Service.start(journal: journal, directory: directory)
            let url = f.server.url("/files/show.m3u8").absoluteString

            let get = try await Haul.run(["get", "--journal", journal, "-d", directory, url, "--hls-variant", "worst", "-o", "film"])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(f.contents("film.ts") == bytes)
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(jobs.count == 1 && jobs.first?["state"] as? String == "completed", "\(jobs)")
            let list = try await Haul.run(["get", "--journal", journal, "-d", directory, url, "--hls-variant", "list"])
            #expect(list.status == 2 && list.stderr.contains("--hls-variant list"), "\(list.stderr)")
            #expect(await service.stop() == 0)
        }
    }

    @Test func theCLIGoesThroughARunningServiceAndShowsItsJobs() async throws {
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let bytes = f.serve("c", count: 300_000)
            let service = try await Service.start(journal: journal, directory: directory)

            // haul get queues with the service, shows progress and exits 0 with the file
            let url = f.server.url("/files/c").absoluteString
            let get = try await Haul.run(["get", "--journal", journal, "-d", directory, url])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(get.stdout.contains("saved \(directory)/c"))
            #expect(sha256(f.contents("c")) == sha256(bytes))
            // The same again is one conditional request, and says so
            let again = try await Haul.run(["get", "--journal", journal, "-d", directory, url])
            #expect(again.status == 0, "\(again.stderr)")
            #expect(again.stdout.contains("unchanged \(directory)/c (293.0 KiB)"), "\(again.stdout)")
            #expect(f.server.bytesServed(path: "/files/c") == 300_000)

            // haul list shows the service's jobs
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(jobs.map { $0["id"] as? String } == [url])
            #expect(jobs.first?["state"] as? String == "completed")

            // --detach only queues; a failure exits 1 and says why
            f.serve("d", count: 1_000)
            let detached = try await Haul.run(
                ["get", "--detach", "--journal", journal, "-d", directory, f.server.url("/files/d").absoluteString])
            #expect(detached.status == 0)
            #expect(detached.stdout.contains("queued"))
            let missing = try await Haul.run(
                ["get", "--journal", journal, "-d", directory, f.server.url("/files/nothing").absoluteString])
            #expect(missing.status == 1)
            #expect(missing.stderr.contains("404"))
            // A directory outside the service's roots is refused
            let outside = try await Haul.run(["get", "--journal", journal, "-d", "/tmp", url])
            #expect(outside.status == 1)
            #expect(outside.stderr.contains("outside the download roots"))

            // haul pause and haul resume through the service: a paused download goes on and
            // is followed to its end
            let eBytes = f.serve("e", count: 50_000)
            let gated = f.server.url("/files/e?gate=e").absoluteString
            #expect(try await Haul.run(["get", "--detach", "--journal", journal, "-d", directory, gated]).status == 0)
            await f.server.waitForGateWaiters("e", count: 1)
            let pause = try await Haul.run(["pause", "--journal", journal, gated])
            #expect(pause.status == 0, "\(pause.stderr)")
            #expect(pause.stdout.contains("paused 1 download"))
            #expect(try await Haul.jobs(journal, all: true).first { $0["id"] as? String == gated }?["state"] as? String == "paused")
            f.server.release("e")
            let resume = try await Haul.run(["resume", "--journal", journal])
            #expect(resume.status == 0, "\(resume.stderr)")
            #expect(resume.stdout.contains("saved \(directory)/e"))
            #expect(sha256(f.contents("e")) == sha256(eBytes))
            let nothing = try await Haul.run(["resume", "--journal", journal])
            #expect(nothing.status == 0)
            #expect(nothing.stdout.contains("nothing to resume"))

            #expect(await service.stop() == 0)
            // With the service gone, the CLI uses the journal again
            #expect(try await Haul.jobs(journal, all: true).count == 4)
        }
    }

    /// `haul clean` works on the journal itself, even while a service runs for it (only the
    /// journal backend cleans): it forgets the download the service finished.
    @Test func cleanWorksOnTheJournalWhileAServiceRuns() async throws {
        try await CLIFixture.with { f, journal in
            // Given a service that finished one download
            let directory = f.directory.path
            f.serve("f", count: 1_000)
            let service = try await Service.start(journal: journal, directory: directory)
            let get = try await Haul.run(["get", "--journal", journal, "-d", directory, f.server.url("/files/f").absoluteString])
            #expect(get.status == 0, "\(get.stderr)")

            // When haul clean runs beside it
            let clean = try await Haul.run(["clean", "--journal", journal])

            // Then the journal forgets the finished download, and the file stays
            #expect(clean.status == 0, "\(clean.stderr)")
            #expect(clean.stdout == "removed 1 finished job and 0 orphaned partial files\n")
            #expect(FileManager.default.fileExists(atPath: "\(directory)/f"))
            #expect(await service.stop() == 0)
            #expect(try await Haul.jobs(journal, all: true).isEmpty)
        }
    }

    /// `--log-format json`: every line on stderr is one JSON object with a time, a level, a
    /// label and a message; each download's end is there with its ID; no credential is.
    @Test func jsonLogsHoldEveryDownloadsEndAndNoCredential() async throws {
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let bytes = f.serve("c", count: 20_000)
            let service = try await Service.start(
                journal: journal, directory: directory, arguments: ["--log-format", "json", "--log-level", "info"])
            let (password, signature) = ("pw-\(UUID().uuidString)", "sig\(UUID().uuidString.prefix(8))")
            var secret = URLComponents(url: f.server.url("/files/c"), resolvingAgainstBaseURL: false)!
            secret.user = "alice"
            secret.password = password
            secret.queryItems = [URLQueryItem(name: "X-Amz-Signature", value: signature)]
            let get = try await Haul.run(["get", "--journal", journal, "-d", directory, secret.url!.absoluteString])
            #expect(get.status == 0, "\(get.stderr)")
            #expect(sha256(f.contents("c")) == sha256(bytes))
            let missing = f.server.url("/files/nothing?token=\(signature)").absoluteString
            #expect(try await Haul.run(["get", "--journal", journal, "-d", directory, missing]).status == 1)
            service.process.send(SIGTERM)
            let run = await service.process.wait()
            #expect(run.status == 0)
            let lines = run.stderr.split(separator: "\n")
            var objects: [[String: Any]] = []
            for line in lines {
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object != nil, "not a JSON object: \(line)")
                guard let object else { continue }
                for field in ["time", "level", "label", "message"] {
                    #expect(object[field] is String, "no \(field) in \(line)")
                }
                objects.append(object)
            }
            let completed = objects.first { $0["message"] as? String == "download completed" }
            #expect((completed?["id"] as? String)?.contains("/files/c") == true, "\(run.stderr)")
            #expect(completed?["level"] as? String == "info")
            let failed = objects.first { $0["message"] as? String == "download failed" }
            #expect((failed?["id"] as? String)?.contains("/files/nothing") == true, "\(run.stderr)")
            #expect(failed?["level"] as? String == "notice")
            #expect(!run.stderr.contains(password))
            #expect(!run.stderr.contains(signature))
        }
    }

    @Test func killDashNineLosesNothingAndTheNextStartFinishesEveryDownload() async throws {
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            // Three files whose first response stalls after 64 KiB
            let names = ["k1", "k2", "k3"]
            var contents: [String: [UInt8]] = [:]
            for (index, name) in names.enumerated() {
                contents[name] = f.serve(name, count: 400_000, seed: UInt64(index + 1))
            }
            let urls = names.map { f.server.url("/files/\($0)?stall_after=65536&stall_times=1").absoluteString }
            let first = try await Service.start(journal: journal, directory: directory)
            let queued = try await Haul.run(["get", "--detach", "--journal", journal, "-d", directory] + urls)
            #expect(queued.status == 0, "\(queued.stderr)")
            for name in names { await f.server.waitForRequests(count: 1, path: "/files/\(name)") }

            // When the service is killed in the middle of the three
            first.process.send(SIGKILL)
            #expect(await first.process.wait().status != 0)
            for name in names { #expect(!FileManager.default.fileExists(atPath: "\(directory)/\(name)")) }

            // Then the next start resumes them, and each completes with the right bytes
            let second = try await Service.start(journal: journal, directory: directory)
            let get = try await Haul.run(["get", "--journal", journal, "-d", directory] + urls)
            #expect(get.status == 0, "\(get.stderr)")
            for name in names { #expect(sha256(f.contents(name)) == sha256(contents[name]!)) }
            #expect(await second.stop() == 0)
        }
    }

    @Test func aListLargerThanOneRequestBodyIsQueuedInParts() async throws {
        try await CLIFixture.with { f, journal in
            // Given 8,000 URLs of 150 bytes: 1.5 MiB of JSON, over the service's 1 MiB body limit
            let directory = f.directory.path
            let padding = String(repeating: "p", count: 100)
            let urls = (0..<8_000).map { f.server.url("/files/n\($0)?gate=never&pad=\(padding)").absoluteString }
            let list = f.directory.appendingPathComponent("list.txt")
            try (urls.joined(separator: "\n") + "\n").write(to: list, atomically: true, encoding: .utf8)
            let service = try await Service.start(journal: journal, directory: directory)

            // When haul get queues them with the service
            let queued = try await Haul.run(["get", "--detach", "--journal", journal, "-d", directory, "-i", list.path])

            // Then every one is queued, once
            #expect(queued.status == 0, "\(queued.stderr)")
            #expect(queued.stdout.split(separator: "\n").count == urls.count)
            let jobs = try await Haul.jobs(journal, all: true)
            #expect(Set(jobs.compactMap { $0["id"] as? String }) == Set(urls))
            #expect(await service.stop() == 0)
        }
    }

    @Test func theDashboardInARealBrowser() async throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Browser/dashboard_test.py").path
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") else {
            print("skipped: the dashboard's browser test needs python3 (with python3-selenium, chromium, chromium-driver)")
            return
        }
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let bytes = f.serve("browser.bin", count: 3_000_000, seed: 7)
            let stream = HLSJobTests.serveStream(f.server, name: "browser-show", count: 4)
            // With PostgreSQL here, the service shows a shared queue holding a waiting job and a worker.
            var cluster: [String] = []
            var serveArguments: [String] = []
            if PostgresCluster.isAvailable {
                let address = try await PostgresCluster.makeDatabase()
                let queue = PostgresQueue(address: address)
                try await queue.withRunning {
                    try await queue.migrate()
                    try await queue.enqueue([try QueueRequest(url: URL(string: "http://cluster.example/job.bin")!, id: "browser-job")])
                    try await queue.client.query("INSERT INTO haul_workers (host, pid) VALUES ('browser-worker', 4242)")
                }
                serveArguments = ["--queue", address.description]
                cluster = ["--cluster-job", "browser-job", "--cluster-worker", "browser-worker"]
            } else {
                print("the dashboard's Cluster tab is not tried: PostgreSQL 15 is not installed")
            }
            let service = try await Service.start(journal: journal, directory: directory, arguments: serveArguments)
            let token = try String(contentsOfFile: journal + "-serve.token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            // The first response stalls halfway: the bar moves, then waits for the pause.
            let url = f.server.url("/files/browser.bin?stall_after=1500000&stall_times=1").absoluteString

            var environment = ProcessInfo.processInfo.environment
            environment["HAUL_TOKEN"] = token  // the token travels in the environment, never in argv
            // Its output is read on threads of their own (HaulProcess), not by a blocking
            // read here: the browser runs for tens of seconds, and a test that blocks one of
            // the concurrency pool's threads that long (two on a 2-core machine) stalls the
            // other tests into their time limits.
            let python = try HaulProcess(
                [
                    script, "--base", "http://\(service.address)", "--url", url, "--file", "\(directory)/browser.bin",
                    "--sha256", sha256(bytes) ?? "", "--name", "browser.bin",
                    "--stream-url", f.server.url("/files/browser-show.m3u8").absoluteString,
                    "--stream-file", "\(directory)/browser-show.ts", "--stream-sha256", sha256(stream) ?? "",
                ] + cluster + (ProcessInfo.processInfo.environment["HAUL_SCREENSHOT"].map { ["--screenshot", $0] } ?? []),
                environment: environment, executable: URL(fileURLWithPath: "/usr/bin/python3"))
            let run = await python.wait()
            let text = run.stdout + run.stderr
            let status = run.status
            #expect(await service.stop() == 0)
            if status == 77 {
                print("skipped: \(text.split(separator: "\n").first { $0.hasPrefix("SKIP") } ?? "the browser cannot run here")")
                return
            }
            #expect(status == 0, "\(text)")
            #expect(text.contains("PASS"))
            #expect(text.contains("step 8: set and lift the speed limit"), "\(text)")
            if !cluster.isEmpty { #expect(text.contains("step 9: the Cluster tab"), "\(text)") }
            #expect(text.contains("step 10: add an HLS playlist as a stream"), "\(text)")
        }
    }
}
}
