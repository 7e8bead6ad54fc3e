import AsyncHTTPClient
import NIOCore
import NIOHTTP1

extension JobCore {
    /// Charges a response's head to the download's speed limits, as its body is: the
    /// bytes a limit holds to are those on the wire. (A paced download makes 16 requests a
    /// second, and a head of about 300 bytes on each 6,400-byte body at 100 KB/s would
    /// otherwise run 4.5% over the limit.) Returns `handled`, held back until the head's
    /// bytes may go when a limit applies.
    func charge(
        _ head: HTTPResponseHead, for task: any ResponseTask, after handled: EventLoopFuture<Void>
    ) -> EventLoopFuture<Void> {
        heard(head)
        guard isThrottled, let limited = throttle(Self.encodedSize(of: head), on: task.eventLoop)
        else { return handled }
        return handled.and(limited).map { _ in }
    }

    /// The size of `head` as HTTP/1.1 sends it: the status line, each header line and the
    /// blank line that ends them.
    static func encodedSize(of head: HTTPResponseHead) -> Int {
        // "HTTP/1.1 200 OK\r\n"
        var size = 13 + head.status.reasonPhrase.utf8.count + 2
        for (name, value) in head.headers { size += name.utf8.count + 2 + value.utf8.count + 2 }
        return size + 2
    }
}
