#!/usr/bin/env python3
"""Groups a `perf record -g` profile of Haul by subsystem.

    perf record -F 2000 -g -o perf.data haul get -i LIST ...
    perf script -i perf.data -F ip,sym --no-demangle | swift demangle --simplified \
        | Benchmarks/profile-groups.py [FILES]

Each sample goes to the subsystem of the innermost frame that names one (walking from the
leaf towards the thread's entry, skipping the Swift runtime, malloc and the kernel), so the
runtime work a subsystem causes (retains, allocations, system calls) counts as its own.
FILES, when given, also prints CPU per file in microseconds (at the sampling frequency
given by FREQ, default 2000 Hz).
"""
import os
import re
import sys

# Order matters only within one frame: the first pattern that matches it names it.
GROUPS = [
    ("CLI (haul get: feeding, tally, console)", r"\b(DownloadSession|Intake|JournalBackend|GetBatch|EntryScan|Tally|ProgressRenderer|Console)\b"),
    ("journal (SQLite, GRDB, the writer)", r"\b(Journal|JournalWriter|JournalStore|JobRecord|GRDB|sqlite3\w*|Database|StatementArguments)\b"),
    ("events (broadcast, snapshots)", r"\b(EventBroadcaster|EventBatches|TakeAllInbox|DownloadManager\.Event)\b"),
    ("scheduler and lifecycle", r"\b(SchedulerMachine|JobLifecycle|DownloadQueue|DownloadManager\.(schedule|perform|enqueue|add|take|admit|startTransfer|transferEnded|finish))\b"),
    ("validation and paths", r"\b(ValidatedRequest|PartialPaths|URLComponents|RFC3986Parser|PathText)\b"),
    ("transfer (operation, delegate, machine)", r"\b(TransferOperation|TransferDelegate|TransferMachine|ResumePlan|RedirectFollower|RetrySchedule|JobCore|TransferMeter)\b"),
    ("file writing (partials, rename, directory sync)", r"\b(PartialFile|DirectorySync|NIOThreadPool)\b"),
    ("other Haul (manager, rate limits, handles)", r"\b(DownloadManager|RateLimiter|RateSchedule|DownloadHandle|HostReachability)\b"),
    ("HTTP client (AsyncHTTPClient)", r"\b(HTTPClient|RequestBag|HTTP1ClientChannelHandler|HTTP1Connection|HTTPConnectionPool|HTTP1ConnectionStateMachine|Transaction)\b"),
    ("NIO (event loops, HTTP parsing, sockets)", r"\b(SelectableEventLoop|ByteToMessageHandler|HTTPDecoder|BetterHTTPParser|c_nio_llhttp\w*|BaseSocketChannel|BaseStreamSocketChannel|ChannelPipeline|ChannelHandlerContext|Socket|EventLoopFuture|EventLoopPromise|NIOLoopBound|HTTPRequestEncoder|ByteBuffer)\b"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in GROUPS]
UNMATCHED_THREADED = "Swift concurrency, runtime and kernel, no subsystem on the stack"

def classify(frames):
    for frame in frames:
        for name, pattern in COMPILED:
            if pattern.search(frame):
                return name
    return UNMATCHED_THREADED

def samples(lines):
    frames = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        if line.startswith("\t") or line.startswith(" "):
            parts = line.strip().split(" ", 1)
            frames.append(parts[1] if len(parts) > 1 else "")
    if frames:
        yield frames

def main():
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    freq = float(os.environ.get("FREQ", "2000"))
    counts = {}
    total = 0
    for frames in samples(sys.stdin):
        group = classify(frames)
        counts[group] = counts.get(group, 0) + 1
        total += 1
    print("| subsystem | share of CPU |" + (" µs per file |" if files else ""))
    print("|---|---|" + ("---|" if files else ""))
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        row = f"| {name} | {100.0 * count / total:.1f}% |"
        if files:
            row += f" {count / freq / files * 1e6:.0f} |"
        print(row)
    row = f"| all ({total} samples) | 100% |"
    if files:
        row += f" {total / freq / files * 1e6:.0f} |"
    print(row)

main()
