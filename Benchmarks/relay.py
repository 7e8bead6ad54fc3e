#!/usr/bin/env python3
"""Benchmarks/relay.py: a TCP relay on 127.0.0.1 that puts a far link in front of a server.

Each accepted client is connected to 127.0.0.1:UPSTREAM and both directions are forwarded,
each chunk held for DELAY = RTT / 2 before it is written on, so that a request and its
answer take one RTT more than on loopback. Chunks are timestamped when read and written at
read time + DELAY, in order, while later ones are still being read: the delay does not
serialize throughput (a bulk download through it runs at the relay's speed, only later).
What waits in one direction is capped (--max-buffer, 64 MiB): above it the relay stops
reading from that side (TCP backpressure), and resumes below half; nothing is dropped.

What it models and what not:
- Every request-to-answer turn costs one RTT, HTTP/2 and TLS included (their handshakes,
  HTTP/2's WINDOW_UPDATE frames: a receive window smaller than rate x RTT limits a stream,
  as on a real link).
- Opening a connection costs one RTT too: the first bytes a client sends on a new
  connection leave the relay no sooner than one RTT after it connected (the client's
  connect() itself returns at once: the kernel completes the handshake with the relay).
- Not modelled: TCP's own window and slow start over the far link. Each TCP connection
  (client-relay, relay-server) is on loopback, so a single connection's throughput is not
  limited to window / RTT. There is no bandwidth cap and no loss.

With --reset-rate P (flaky link), the server's bytes to each client are taken in
consecutive --chunk sized pieces (64 KiB by default, counted from the connection's
first byte, whatever sizes the reads had); before each piece is forwarded, with
probability P, it is not: both sockets are reset instead (SO_LINGER 0 and close, so
both peers see an RST) once everything before that piece has been delivered. The random
numbers come from a generator per connection seeded with (--seed, the connection's number
in accept order), so a restarted relay makes the same choices for the same connections.

Usage:
  relay.py --upstream PORT [--listen PORT] [--rtt-ms N] [--reset-rate P] [--seed S]
           [--chunk BYTES] [--max-buffer BYTES] [--read-size BYTES]

It prints the port it listens on (one line, on stdout: --listen 0 picks a free one) once
it accepts connections, and runs until SIGTERM or SIGINT, when it prints a line of counts
(connections, resets, bytes each way) on stderr and exits 0. Python 3.8+, standard
library only.
"""

import argparse
import asyncio
import collections
import random
import signal
import socket
import struct
import sys

EOF = object()  # marker: the sending side half-closed; write_eof after what came before
RST = object()  # marker: the sending side died (reset or error); reset the other side
FLAKY = object()  # marker: a --reset-rate reset; reset both sides

STATS = {"connections": 0, "resets": 0, "c2s": 0, "s2c": 0, "upstream_failures": 0}


def reset_transport(transport):
    """Close TRANSPORT with an RST: SO_LINGER on, 0 s, then close without flushing."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


class Pipe:
    """One direction: what SRC sends, held for DELAY, written to DST in order."""

    def __init__(self, conn, name, delay, not_before, max_buffer):
        self.conn = conn
        self.name = name  # "c2s" or "s2c"
        self.delay = delay
        self.not_before = not_before  # no chunk leaves before this loop time
        self.max_buffer = max_buffer
        self.src = None
        self.dst = None  # None until connected (upstream)
        self.queue = collections.deque()  # (deadline, bytes | marker)
        self.queued = 0
        self.timer = None
        self.reading_paused = False
        self.dst_full = False  # DST's transport asked us to stop writing
        self.done = False  # EOF or reset passed on: nothing more goes this way

    # -- from the source side
    def feed(self, data):
        STATS[self.name] += len(data)
        if self.done:
            return
        loop = self.conn.loop
        if not self.queue and self.delay == 0 and self.dst is not None and loop.time() >= self.not_before:
            # Fast path (no delay, nothing waiting): straight through.
            self.dst.write(data)
            self.check_backpressure()
            return
        self.push(data, len(data))

    def push(self, item, size):
        loop = self.conn.loop
        deadline = max(loop.time(), self.not_before) + self.delay
        self.queue.append((deadline, item))
        self.queued += size
        self.check_backpressure()
        if self.timer is None:
            self.schedule()

    def schedule(self):
        if not self.queue or self.dst is None:
            return
        deadline = self.queue[0][0]
        loop = self.conn.loop
        if deadline <= loop.time():
            self.timer = loop.call_soon(self.flush)
        else:
            self.timer = loop.call_at(deadline, self.flush)

    # -- to the destination side
    def flush(self):
        self.timer = None
        if self.dst is None:
            return
        now = self.conn.loop.time()
        queue = self.queue
        while queue and queue[0][0] <= now:
            _, item = queue.popleft()
            if item is EOF:
                self.done = True
                if not self.dst.is_closing() and self.dst.can_write_eof():
                    self.dst.write_eof()
                self.conn.direction_finished()
            elif item is RST:
                self.done = True
                reset_transport(self.dst)
                self.conn.close_both()
            elif item is FLAKY:
                self.done = True
                STATS["resets"] += 1
                self.conn.reset_both()
            else:
                self.queued -= len(item)
                if not self.dst.is_closing():
                    self.dst.write(item)
        self.check_backpressure()
        self.schedule()

    def check_backpressure(self):
        if self.src is None or self.src.is_closing():
            return
        waiting = self.queued
        if self.dst is not None:
            waiting += self.dst.get_write_buffer_size()
        if not self.reading_paused and (waiting >= self.max_buffer or self.dst_full):
            self.reading_paused = True
            self.src.pause_reading()
        elif self.reading_paused and waiting < self.max_buffer // 2 and not self.dst_full:
            self.reading_paused = False
            self.src.resume_reading()

    def dst_pause(self):
        self.dst_full = True
        self.check_backpressure()

    def dst_resume(self):
        self.dst_full = False
        self.check_backpressure()


class Side(asyncio.Protocol):
    """One socket of a connection (the client's or the upstream's)."""

    def __init__(self, conn, incoming, outgoing):
        self.conn = conn
        self.incoming = incoming  # the Pipe this side feeds
        self.outgoing = outgoing  # the Pipe that writes to this side
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        # Writes above 1 MiB buffered in the transport pause the other side's reads.
        transport.set_write_buffer_limits(high=1 << 20)
        if hasattr(transport, "max_size"):
            # asyncio's selector transports read at most 256 KiB at a time; bigger reads
            # cost fewer trips through the loop (about 10% faster for a bulk download).
            transport.max_size = self.conn.args.read_size

    def data_received(self, data):
        self.incoming.feed(data)

    def eof_received(self):
        if not self.incoming.done:
            self.incoming.push(EOF, 0)
        return True  # keep the other direction open (half-close)

    def connection_lost(self, exc):
        if exc is not None and not self.incoming.done:
            # Reset or error: the other side is reset after what is on the way to it.
            self.incoming.push(RST, 0)
        self.conn.side_lost()

    def pause_writing(self):
        self.outgoing.dst_pause()

    def resume_writing(self):
        self.outgoing.dst_resume()


class FlakySide(Side):
    """The upstream side with --reset-rate: resets before some CHUNK-sized pieces."""

    def __init__(self, conn, incoming, outgoing, rate, chunk, rng):
        super().__init__(conn, incoming, outgoing)
        self.rate = rate
        self.chunk = chunk
        self.rng = rng
        self.left = 0  # bytes left in the current piece; 0: the next byte starts one
        self.dead = False

    def data_received(self, data):
        if self.dead or self.incoming.done:
            return
        n = len(data)
        pos = 0
        while pos < n:
            if self.left == 0:
                if self.rng.random() < self.rate:
                    if pos:
                        self.incoming.feed(data[:pos])
                    STATS["s2c"] += n - pos  # read from the server all the same
                    self.incoming.push(FLAKY, 0)
                    self.dead = True
                    self.transport.pause_reading()
                    return
                self.left = self.chunk
            take = min(self.left, n - pos)
            self.left -= take
            pos += take
        self.incoming.feed(data)


class Connection:
    def __init__(self, loop, args, number):
        self.loop = loop
        self.args = args
        delay = args.rtt_ms / 2000.0
        now = loop.time()
        # The client's first bytes leave no sooner than one RTT after it connected: the
        # handshake that the kernel did at once with the relay.
        self.c2s = Pipe(self, "c2s", delay, now + 2 * delay, args.max_buffer)
        self.s2c = Pipe(self, "s2c", delay, 0.0, args.max_buffer)
        self.client = Side(self, self.c2s, self.s2c)
        if args.reset_rate > 0:
            rng = random.Random(args.seed * 1000003 + number)
            self.upstream = FlakyUpstreamSide(self, self.s2c, self.c2s, args.reset_rate, args.chunk, rng)
        else:
            self.upstream = UpstreamSide(self, self.s2c, self.c2s)
        self.finished = 0
        self.closed = False

    def client_made(self, transport):
        self.c2s.src = transport
        self.s2c.dst = transport
        self.loop.create_task(self.connect())

    async def connect(self):
        try:
            transport, _ = await self.loop.create_connection(
                lambda: self.upstream, "127.0.0.1", self.args.upstream)
        except OSError:
            STATS["upstream_failures"] += 1
            reset_transport(self.c2s.src)
            return
        if self.closed:
            transport.abort()

    def upstream_made(self, transport):
        self.s2c.src = transport
        self.c2s.dst = transport
        if self.c2s.timer is None:
            self.c2s.schedule()  # what the client sent meanwhile

    def direction_finished(self):
        self.finished += 1
        if self.finished == 2:
            self.close_both()

    def close_both(self):
        self.closed = True
        for t in (self.c2s.src, self.s2c.src):
            if t is not None and not t.is_closing():
                t.close()  # after what is buffered

    def reset_both(self):
        self.closed = True
        reset_transport(self.c2s.src)
        reset_transport(self.s2c.src)

    def side_lost(self):
        pass


class ClientSide(Side):
    def connection_made(self, transport):
        super().connection_made(transport)
        self.conn.client_made(transport)


class UpstreamMixin:
    def connection_made(self, transport):
        super().connection_made(transport)
        self.conn.upstream_made(transport)


class UpstreamSide(UpstreamMixin, Side):
    pass


class FlakyUpstreamSide(UpstreamMixin, FlakySide):
    pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--upstream", type=int, required=True, help="the server's port on 127.0.0.1")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="round trip added (each way: half)")
    parser.add_argument("--reset-rate", type=float, default=0.0,
                        help="probability of a reset before each --chunk of the server's bytes")
    parser.add_argument("--seed", type=int, default=1, help="seed of the reset choices")
    parser.add_argument("--chunk", type=int, default=64 * 1024, help="piece size for --reset-rate")
    parser.add_argument("--read-size", type=int, default=1 << 20, help="bytes asked for per read")
    parser.add_argument("--max-buffer", type=int, default=64 << 20,
                        help="bytes waiting per direction before reads pause")
    args = parser.parse_args()
    if args.rtt_ms < 0 or not 0 <= args.reset_rate <= 1 or args.chunk < 1 or args.max_buffer < 1 or args.read_size < 1:
        parser.error("out of range")

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    counter = [0]

    def factory():
        counter[0] += 1
        STATS["connections"] += 1
        conn = Connection(loop, args, counter[0])
        return ClientSide(conn, conn.c2s, conn.s2c)

    server = loop.run_until_complete(
        loop.create_server(factory, "127.0.0.1", args.listen, backlog=4096, reuse_address=True))
    port = server.sockets[0].getsockname()[1]
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(port, flush=True)
    loop.run_until_complete(stop.wait())
    server.close()
    print("relay %d: %d connections, %d resets, %d upstream failures, %d bytes to the server, "
          "%d bytes from it" % (port, STATS["connections"], STATS["resets"], STATS["upstream_failures"],
                                STATS["c2s"], STATS["s2c"]), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
