import AsyncHTTPClient
import Foundation
import HaulTestSupport
import HummingbirdWSClient
import Logging
import NIOCore
import Testing

/// aria2's JSON-RPC interface of a real `haul serve`: a front-end's session over WebSocket,
/// and the same calls sent to a real `aria2c`, whose answers must have the same shapes.
@Suite("aria2 JSON-RPC interop", .timeLimit(.minutes(3)))
struct Aria2InteropTests {
    /// A running `haul serve`, its address and token.
    struct Served {
        let process: HaulProcess
        let address: String
        let token: String

        static func start(journal: String, directory: String, arguments: [String] = []) async throws -> Served {
            let process = try HaulProcess(["serve", "--listen", "127.0.0.1:0", "--journal", journal, "-d", directory] + arguments)
            let line = try #require(await process.line { $0.contains("listening on http://") })
            let address = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }).dropFirst(7)
            let token =
                try ProcessInfo.processInfo.environment["HAUL_TOKEN"]
                ?? (String(contentsOfFile: journal + "-serve.token", encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)
            return Served(process: process, address: String(address), token: token)
        }

        func stop() async -> Int32 {
            process.send(SIGTERM)
            return await process.wait().status
        }
    }

    /// POSTs `body` to `address`'s `/jsonrpc`: the HTTP status and the JSON answer.
    static func post(_ address: String, _ body: String, origin: String? = nil) async throws -> (status: Int, json: Any) {
        var request = HTTPClientRequest(url: "http://\(address)/jsonrpc")
        request.method = .POST
        request.body = .bytes(ByteBuffer(string: body))
        if let origin { request.headers.add(name: "Origin", value: origin) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 4 << 20)
        return (Int(response.status.code), try JSONSerialization.jsonObject(with: Data(buffer: bytes), options: [.fragmentsAllowed]))
    }

    static func call(_ address: String, _ secret: String, _ method: String, _ params: String = "") async throws -> Any {
        let body = #"{"jsonrpc":"2.0","id":"t","method":"\#(method)","params":["token:\#(secret)"\#(params.isEmpty ? "" : ",")\#(params)]}"#
        return try await post(address, body).json
    }

    static func result(_ answer: Any) -> Any? { (answer as? [String: Any])?["result"] }

    /// The shape of a JSON value: object keys with their values' shapes, an array's first
    /// element's shape, and the JSON type of anything else.
    static func shape(_ value: Any?) -> String {
        switch value {
        case let object as [String: Any]:
            return "{" + object.keys.sorted().map { "\($0):\(shape(object[$0]))" }.joined(separator: ",") + "}"
        case let array as [Any]: return "[" + (array.first.map { shape($0) } ?? "") + "]"
        case is String: return "string"
        case is NSNumber: return "number"
        case nil, is NSNull: return "null"
        default: return "?"
        }
    }

    // MARK: - A front-end's session

    @Test func aFrontEndSessionOverWebSocket() async throws {
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let bytes = f.serve("ws.bin", count: 200_000)
            // swift-websocket's client sends `Origin: ws://HOST`: listed, as a user would list a
            // front-end's origin.
            let service = try await Served.start(
                journal: journal, directory: directory, arguments: ["--rpc-allow-origin", "ws://127.0.0.1"])
            do {
            let url = f.server.url("/files/ws.bin?gate=ws").absoluteString
            let token = service.token
            let server = f.server

            try await WebSocketClient.connect(url: "ws://\(service.address)/jsonrpc", logger: Logger(label: "test")) {
                inbound, outbound, _ in
                var messages = inbound.messages(maxSize: 4 << 20).makeAsyncIterator()
                var notifications: [(method: String, gid: String)] = []
                var next = 0
                /// Sends a call and reads up to its answer, keeping the notifications before it.
                func call(_ method: String, _ params: String = "") async throws -> [String: Any] {
                    next += 1
                    let id = next
                    let tail = params.isEmpty ? "" : "," + params
                    try await outbound.write(
                        .text(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":["token:\#(token)"\#(tail)]}"#))
                    while let message = try await messages.next() {
                        guard case .text(let text) = message,
                            let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                        else { continue }
                        if let name = json["method"] as? String {
                            let gid = ((json["params"] as? [[String: Any]])?.first?["gid"] as? String) ?? ""
                            notifications.append((name, gid))
                        } else if json["id"] as? Int == id {
                            return json
                        }
                    }
                    throw Aria2InteropFailure("the connection closed")
                }
                /// Reads until `method` has been notified for `gid`.
                func notified(_ method: String, _ gid: String) async throws {
                    while !notifications.contains(where: { $0 == (method, gid) }) {
                        guard case .text(let text)? = try await messages.next(),
                            let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                            let name = json["method"] as? String
                        else { continue }
                        notifications.append((name, ((json["params"] as? [[String: Any]])?.first?["gid"] as? String) ?? ""))
                    }
                }
                func poll() async throws -> [String: Any] {
                    // AriaNg's poll: the three lists and the global numbers in one multicall
                    let calls = ["aria2.tellActive", "aria2.getGlobalStat"].map {
                        #"{"methodName":"\#($0)","params":["token:\#(token)"]}"#
                    } + ["aria2.tellWaiting", "aria2.tellStopped"].map {
                        #"{"methodName":"\#($0)","params":["token:\#(token)",0,1000,["gid","status","totalLength","completedLength"]]}"#
                    }
                    next += 1
                    let id = next
                    try await outbound.write(
                        .text(#"{"jsonrpc":"2.0","id":\#(id),"method":"system.multicall","params":[[\#(calls.joined(separator: ","))]]}"#))
                    while let message = try await messages.next() {
                        guard case .text(let text) = message,
                            let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                        else { continue }
                        if let name = json["method"] as? String {
                            notifications.append((name, ((json["params"] as? [[String: Any]])?.first?["gid"] as? String) ?? ""))
                        } else if json["id"] as? Int == id {
                            return json
                        }
                    }
                    throw Aria2InteropFailure("the connection closed")
                }

                // Given a download added and held at the server's gate
                let added = try await call("aria2.addUri", #"["\#(url)"],{"out":"ws.bin"}"#)
                let gid = try #require(added["result"] as? String)
                #expect(gid.count == 16)
                await server.waitForGateWaiters("ws", count: 1)
                try await notified("aria2.onDownloadStart", gid)
                var polled = try #require(try await poll()["result"] as? [Any])
                let active = try #require((polled[0] as? [Any])?.first as? [[String: Any]])
                #expect(active.map { $0["gid"] as? String } == [gid])
                #expect(((polled[1] as? [Any])?.first as? [String: Any])?["numActive"] as? String == "1")

                // When it is paused, it is notified and listed as waiting (paused)
                #expect(try await call("aria2.pause", #""\#(gid)""#)["result"] as? String == gid)
                try await notified("aria2.onDownloadPause", gid)
                polled = try #require(try await poll()["result"] as? [Any])
                let waiting = try #require((polled[2] as? [Any])?.first as? [[String: Any]])
                #expect(waiting.map { $0["status"] as? String } == ["paused"])

                // Resumed, it starts again; released, it completes
                #expect(try await call("aria2.unpause", #""\#(gid)""#)["result"] as? String == gid)
                await server.waitForGateWaiters("ws", count: 1)
                server.release("ws")
                try await notified("aria2.onDownloadComplete", gid)
                let status = try #require(try await call("aria2.tellStatus", #""\#(gid)""#)["result"] as? [String: Any])
                #expect(status["status"] as? String == "complete")
                #expect(status["completedLength"] as? String == "200000")

                // A second download added paused is silent until it is unpaused and starts;
                // removed while active, it is notified as stopped
                let other = f.server.url("/files/ws.bin?gate=never").absoluteString
                let second = try #require(try await call("aria2.addUri", #"["\#(other)"],{"pause":"true","out":"b.bin"}"#)["result"] as? String)
                #expect(try await call("aria2.unpause", #""\#(second)""#)["result"] as? String == second)
                try await notified("aria2.onDownloadStart", second)
                #expect(try await call("aria2.remove", #""\#(second)""#)["result"] as? String == second)
                try await notified("aria2.onDownloadStop", second)
                #expect(notifications.filter { $0.gid == second }.map(\.method) == ["aria2.onDownloadStart", "aria2.onDownloadStop"])
                polled = try #require(try await poll()["result"] as? [Any])
                let stopped = try #require((polled[3] as? [Any])?.first as? [[String: Any]])
                #expect(Set(stopped.compactMap { $0["status"] as? String }) == ["complete", "removed"])

                // A call with a wrong token is refused over WebSocket too
                try await outbound.write(.text(#"{"jsonrpc":"2.0","id":"x","method":"aria2.getVersion","params":["token:nope"]}"#))
                while case .text(let text)? = try await messages.next() {
                    let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
                    guard json["id"] as? String == "x" else { continue }
                    #expect((json["error"] as? [String: Any])?["message"] as? String == "Unauthorized")
                    break
                }
                try await outbound.close(.normalClosure, reason: nil)
            }
            #expect(sha256(f.contents("ws.bin")) == sha256(bytes))
            } catch {
                _ = await service.stop()
                throw error
            }
            #expect(await service.stop() == 0)
        }
    }

    // MARK: - Against aria2c

    /// A free loopback port (bound, read and released).
    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(descriptor, raw, length) == 0, getsockname(descriptor, raw, &length) == 0 else {
                    throw Aria2InteropFailure("cannot bind")
                }
            }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test func haulAnswersAsAria2cDoes() async throws {
        let aria2c = "/usr/bin/aria2c"
        guard FileManager.default.isExecutableFile(atPath: aria2c) else {
            print("skipped: the differential test needs aria2c (Debian's aria2 package; .ci/run installs it)")
            return
        }
        try await CLIFixture.with { f, journal in
            let directory = f.directory.path
            let aria2Directory = f.directory.appendingPathComponent("aria2").path
            try FileManager.default.createDirectory(atPath: aria2Directory, withIntermediateDirectories: true)
            f.serve("d.bin", count: 100_000)
            // swift-websocket's client sends `Origin: ws://HOST`: listed.
            let service = try await Served.start(
                journal: journal, directory: directory, arguments: ["--rpc-allow-origin", "ws://127.0.0.1"])
            do {
            let secret = "aria2-secret-0123456789"
            let port = try Self.freePort()
            // The secret goes in a configuration file, not in argv.
            let configuration = f.directory.appendingPathComponent("aria2.conf").path
            try "rpc-secret=\(secret)\n".write(toFile: configuration, atomically: true, encoding: .utf8)
            // aria2c logs to stdout when its RPC port listens: no polling for it.
            let aria2 = try HaulProcess(
                [
                    "--enable-rpc", "--rpc-listen-port=\(port)", "--conf-path=\(configuration)", "--dir=\(aria2Directory)",
                    "--max-tries=1", "--retry-wait=0", "--log=-", "--log-level=notice",
                ], executable: URL(fileURLWithPath: aria2c))
            defer {
                // aria2c's SIGTERM waits for its connections (one is held at a gate): kill it.
                aria2.send(SIGKILL)
            }
            let listening = await aria2.line { $0.contains("RPC: listening on TCP port") }
            try #require(listening != nil, "aria2c did not start")
            let a = "127.0.0.1:\(port)"
            let h = service.address

            // Both servers' notifications, over a WebSocket each, from before the first call
            let notesA = NotificationLog()
            let notesH = NotificationLog()
            try await withThrowingTaskGroup(of: Void.self) { listeners in
            listeners.addTask { try await Self.listen(to: "ws://\(a)/jsonrpc", into: notesA) }
            listeners.addTask { try await Self.listen(to: "ws://\(h)/jsonrpc", into: notesH) }
            await notesA.waitUntilListening()
            await notesH.waitUntilListening()

            func both(_ method: String, _ params: String = "") async throws -> (aria2: Any, haul: Any) {
                (try await Self.call(a, secret, method, params), try await Self.call(h, service.token, method, params))
            }
            func sameShape(_ method: String, _ params: String = "", sourceLocation: SourceLocation = #_sourceLocation)
                async throws -> (aria2: Any, haul: Any)
            {
                let answers = try await both(method, params)
                #expect(Self.shape(answers.haul) == Self.shape(answers.aria2), "\(method)", sourceLocation: sourceLocation)
                return answers
            }

            // addUri of a download held at the gate: both are active on it
            let gated = f.server.url("/files/d.bin?gate=d").absoluteString
            let added = try await sameShape("aria2.addUri", #"["\#(gated)"],{"out":"d.bin"}"#)
            let gid = (aria2: Self.result(added.aria2) as! String, haul: Self.result(added.haul) as! String)
            await f.server.waitForGateWaiters("d", count: 2)
            await notesA.wait(for: "aria2.onDownloadStart", gid.aria2)
            await notesH.wait(for: "aria2.onDownloadStart", gid.haul)
            let statusA = try await Self.call(a, secret, "aria2.tellStatus", #""\#(gid.aria2)""#)
            let statusH = try await Self.call(h, service.token, "aria2.tellStatus", #""\#(gid.haul)""#)
            #expect(Self.shape(statusH) == Self.shape(statusA))
            #expect((Self.result(statusH) as? [String: Any])?["status"] as? String == "active")
            #expect((Self.result(statusA) as? [String: Any])?["status"] as? String == "active")
            _ = try await sameShape("aria2.tellActive")
            _ = try await sameShape("aria2.getGlobalStat")

            // Two more added paused: tellWaiting, changePosition
            var paused: [(aria2: String, haul: String)] = []
            for name in ["p1", "p2"] {
                let url = f.server.url("/files/d.bin?gate=never&n=\(name)").absoluteString
                let answers = try await sameShape(
                    "aria2.addUri", #"["\#(url)"],{"pause":"true","out":"\#(name)","split":"3"}"#)
                paused.append((Self.result(answers.aria2) as! String, Self.result(answers.haul) as! String))
            }
            // A download's own split is its own connections, kept with it
            let ownH = Self.result(try await Self.call(h, service.token, "aria2.getOption", #""\#(paused[0].haul)""#))
            #expect((ownH as? [String: Any])?["split"] as? String == "3")
            let waiting = try await sameShape("aria2.tellWaiting", #"0,10"#)
            #expect((Self.result(waiting.haul) as? [Any])?.count == 2)
            _ = try await sameShape("aria2.tellWaiting", #"-1,1,["gid","status"]"#)
            let movedA = try await Self.call(a, secret, "aria2.changePosition", #""\#(paused[1].aria2)",0,"POS_SET""#)
            let movedH = try await Self.call(h, service.token, "aria2.changePosition", #""\#(paused[1].haul)",0,"POS_SET""#)
            #expect(Self.shape(movedH) == Self.shape(movedA))
            #expect(Self.result(movedH) as? Int == 0)
            let orderH = (Self.result(try await Self.call(h, service.token, "aria2.tellWaiting", #"0,10,["gid"]"#)) as? [[String: Any]])?
                .map { $0["gid"] as? String }
            #expect(orderH == [paused[1].haul, paused[0].haul])

            // changeUri on a waiting download: a second URI added, the first removed
            let other = f.server.url("/files/d.bin?gate=never&n=other").absoluteString
            for (address, token, gid) in [(a, secret, paused[1].aria2), (h, service.token, paused[1].haul)] {
                let raw = try await Self.call(address, token, "aria2.changeUri", #""\#(gid)",1,[],["\#(other)"]"#)
                let changed = Self.result(raw)
                #expect((changed as? [Int]) == [0, 1], "\(address) \(raw)")
                let uris = Self.result(try await Self.call(address, token, "aria2.getUris", #""\#(gid)""#)) as? [[String: Any]]
                #expect(uris?.count == 2, "\(address)")
                let first = try #require(uris?.first?["uri"] as? String)
                let removed = Self.result(try await Self.call(address, token, "aria2.changeUri", #""\#(gid)",1,["\#(first)"],[]"#))
                #expect((removed as? [Int]) == [1, 0], "\(address)")
                let left = Self.result(try await Self.call(address, token, "aria2.getUris", #""\#(gid)""#)) as? [[String: Any]]
                #expect(left?.compactMap { $0["uri"] as? String } == [other], "\(address)")
            }

            // pause and unpause of the active one answer its GID in both
            let pausedA = try await Self.call(a, secret, "aria2.pause", #""\#(gid.aria2)""#)
            let pausedH = try await Self.call(h, service.token, "aria2.pause", #""\#(gid.haul)""#)
            #expect(Self.shape(pausedH) == Self.shape(pausedA))
            #expect(Self.result(pausedH) as? String == gid.haul)
            await notesA.wait(for: "aria2.onDownloadPause", gid.aria2)
            await notesH.wait(for: "aria2.onDownloadPause", gid.haul)

            // Options
            _ = try await sameShape("aria2.changeGlobalOption", #"{"max-concurrent-downloads":"3"}"#)
            _ = try await sameShape("aria2.changeGlobalOption", #"{"max-concurrent-downloads":"lots"}"#)
            // split: 8 connections for each large download from now on, above the default
            // per-host cap (as haul get -x 8)
            _ = try await sameShape("aria2.changeGlobalOption", #"{"split":"8"}"#)
            let globalH = Self.result(try await Self.call(h, service.token, "aria2.getGlobalOption")) as? [String: Any]
            #expect(globalH?["max-concurrent-downloads"] as? String == "3")
            #expect(globalH?["split"] as? String == "8")
            let optionA = try await Self.call(a, secret, "aria2.getOption", #""\#(gid.aria2)""#)
            let optionH = try await Self.call(h, service.token, "aria2.getOption", #""\#(gid.haul)""#)
            #expect(Set((Self.result(optionH) as? [String: Any] ?? [:]).keys).isSubset(of: Set((Self.result(optionA) as? [String: Any] ?? [:]).keys).union(["split", "user-agent"])))

            // remove: the GID back in both
            let removedA = try await Self.call(a, secret, "aria2.remove", #""\#(paused[0].aria2)""#)
            let removedH = try await Self.call(h, service.token, "aria2.remove", #""\#(paused[0].haul)""#)
            #expect(Self.shape(removedH) == Self.shape(removedA))

            // A download that fails (404): stopped with errorCode 3 in both
            let missing = f.server.url("/files/none").absoluteString
            let failed = try await sameShape("aria2.addUri", #"["\#(missing)"]"#)
            let failedGID = (aria2: Self.result(failed.aria2) as! String, haul: Self.result(failed.haul) as! String)
            await notesA.wait(for: "aria2.onDownloadError", failedGID.aria2)
            await notesH.wait(for: "aria2.onDownloadError", failedGID.haul)
            for (address, token, gid) in [(a, secret, failedGID.aria2), (h, service.token, failedGID.haul)] {
                let stopped = Self.result(try await Self.call(address, token, "aria2.tellStatus", #""\#(gid)",["status","errorCode"]"#)) as? [String: Any]
                #expect(stopped?["status"] as? String == "error", "\(address)")
                #expect(stopped?["errorCode"] as? String == "3", "\(address)")
            }
            // Two addresses of one file, the first missing: both complete it from the second
            let mirrored = try await sameShape(
                "aria2.addUri", #"["\#(f.server.url("/files/absent").absoluteString)","\#(f.server.url("/files/d.bin").absoluteString)"],{"out":"m.bin"}"#)
            let mirroredGID = (aria2: Self.result(mirrored.aria2) as! String, haul: Self.result(mirrored.haul) as! String)
            await notesA.wait(for: "aria2.onDownloadComplete", mirroredGID.aria2)
            await notesH.wait(for: "aria2.onDownloadComplete", mirroredGID.haul)
            let urisH = Self.result(try await Self.call(h, service.token, "aria2.getUris", #""\#(mirroredGID.haul)""#)) as? [[String: Any]]
            #expect(urisH?.count == 2)
            #expect(FileManager.default.contents(atPath: aria2Directory + "/m.bin")?.count == 100_000)
            #expect(FileManager.default.contents(atPath: directory + "/m.bin")?.count == 100_000)

            // A Metalink document added to both: the file in its folder, verified
            let document = Meta4.document([
                .init(
                    name: "ml/m.bin", bytes: FaultServer.randomBytes(count: 100_000, seed: 1),
                    urls: [f.server.url("/files/d.bin?n=meta").absoluteString], pieceLength: 16_384)
            ])
            let addedMetalink = try await sameShape("aria2.addMetalink", #""\#(Data(document.utf8).base64EncodedString())""#)
            let metalinkGIDs = (
                aria2: try #require((Self.result(addedMetalink.aria2) as? [String])?.first),
                haul: try #require((Self.result(addedMetalink.haul) as? [String])?.first)
            )
            await notesA.wait(for: "aria2.onDownloadComplete", metalinkGIDs.aria2)
            await notesH.wait(for: "aria2.onDownloadComplete", metalinkGIDs.haul)
            let served = sha256(FaultServer.randomBytes(count: 100_000, seed: 1))
            #expect(sha256(FileManager.default.contents(atPath: aria2Directory + "/ml/m.bin")) == served)
            #expect(sha256(FileManager.default.contents(atPath: directory + "/ml/m.bin")) == served)

            // The same notifications for each download, in the same order; for those added
            // paused and removed while they waited, none. (The failed download's error
            // came after the removal, so a stray notification of it would be here by now.)
            for pair in [gid, failedGID, mirroredGID] + paused {
                let sequenceA = await notesA.methods(for: pair.aria2)
                let sequenceH = await notesH.methods(for: pair.haul)
                #expect(sequenceH == sequenceA)
            }
            _ = try await sameShape("aria2.tellStopped", #"0,10,["gid","status","errorCode","errorMessage","files"]"#)

            // system.multicall, a bad token, an unknown method, malformed JSON
            for body in [
                #"{"jsonrpc":"2.0","id":1,"method":"system.multicall","params":[[{"methodName":"aria2.getGlobalStat","params":["token:SECRET"]},{"methodName":"aria2.nope"}]]}"#,
                #"{"jsonrpc":"2.0","id":1,"method":"aria2.getVersion","params":["token:wrong"]}"#,
                #"{"jsonrpc":"2.0","id":1,"method":"aria2.nope","params":["token:SECRET"]}"#,
                #"{"jsonrpc":"2.0","id":1,"method":"#,
                #"{"jsonrpc":"2.0","method":"aria2.getVersion"}"#,
                #"[{"jsonrpc":"2.0","id":1,"method":"system.listNotifications"},{"jsonrpc":"2.0","id":2,"method":"aria2.tellStatus","params":["token:SECRET"]}]"#,
                #"{"jsonrpc":"2.0","id":1,"method":"aria2.addTorrent","params":["token:SECRET","AAAA"]}"#,
            ] {
                let answerA = try await Self.post(a, body.replacingOccurrences(of: "SECRET", with: secret))
                let answerH = try await Self.post(h, body.replacingOccurrences(of: "SECRET", with: service.token))
                #expect(answerH.status == answerA.status, "\(body)")
                #expect(Self.shape(answerH.json) == Self.shape(answerA.json), "\(body)")
                let codeA = ((answerA.json as? [String: Any])?["error"] as? [String: Any])?["code"] as? Int
                let codeH = ((answerH.json as? [String: Any])?["error"] as? [String: Any])?["code"] as? Int
                #expect(codeH == codeA, "\(body)")
            }
            let unknown = try await Self.post(h, #"{"jsonrpc":"2.0","id":1,"method":"aria2.nope","params":[]}"#)
            #expect(((unknown.json as? [String: Any])?["error"] as? [String: Any])?["message"] as? String == "No such method: aria2.nope")

            // Another site's page may not call Haul (aria2 would answer it)
            let foreign = try await Self.post(h, #"{"jsonrpc":"2.0","id":1,"method":"system.listMethods"}"#, origin: "http://evil.example")
            #expect(foreign.status == 403)
            f.server.release("d")
            await notesA.close()
            await notesH.close()
            try await listeners.waitForAll()
            }
            } catch {
                _ = await service.stop()
                throw error
            }
            #expect(await service.stop() == 0)
        }
    }

    /// Listens to `url`'s notifications until the log is closed.
    static func listen(to url: String, into log: NotificationLog) async throws {
        try await WebSocketClient.connect(url: url, logger: Logger(label: "test")) { inbound, outbound, _ in
            await log.opened { try? await outbound.close(.normalClosure, reason: nil) }
            // A call answered proves the server registered this connection for notifications.
            try await outbound.write(.text(#"{"jsonrpc":"2.0","id":"listening","method":"system.listNotifications"}"#))
            for try await message in inbound.messages(maxSize: 1 << 20) {
                guard case .text(let text) = message,
                    let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                else { continue }
                if let method = json["method"] as? String {
                    let gid = ((json["params"] as? [[String: Any]])?.first?["gid"] as? String) ?? ""
                    await log.add(method, gid)
                } else if json["id"] as? String == "listening" {
                    await log.listening()
                }
            }
        }
    }
}

/// The notifications one WebSocket received, and waiters for them.
actor NotificationLog {
    private var seen: [(method: String, gid: String)] = []
    private var waiters: [(method: String, gid: String, continuation: CheckedContinuation<Void, Never>)] = []
    private var isListening = false
    private var listeningWaiters: [CheckedContinuation<Void, Never>] = []
    private var closer: (@Sendable () async -> Void)?

    func opened(closer: @escaping @Sendable () async -> Void) { self.closer = closer }

    func listening() {
        isListening = true
        for waiter in listeningWaiters { waiter.resume() }
        listeningWaiters = []
    }

    func waitUntilListening() async {
        guard !isListening else { return }
        await withCheckedContinuation { listeningWaiters.append($0) }
    }

    func add(_ method: String, _ gid: String) {
        seen.append((method, gid))
        let ready = waiters.filter { $0.method == method && $0.gid == gid }
        waiters.removeAll { $0.method == method && $0.gid == gid }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Returns once `method` has been notified for `gid`.
    func wait(for method: String, _ gid: String) async {
        guard !seen.contains(where: { $0.method == method && $0.gid == gid }) else { return }
        await withCheckedContinuation { waiters.append((method, gid, $0)) }
    }

    /// The notifications of `gid`, in order.
    func methods(for gid: String) -> [String] { seen.filter { $0.gid == gid }.map(\.method) }

    /// Closes the WebSocket, which ends its listener.
    func close() async { await closer?() }
}

struct Aria2InteropFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
