#!/usr/bin/env bash
# Benchmarks/cache.sh: a list of small images fetched twice (a first pass, then a second
# over the same list, as a list scrolled back), through Haul's cache and through URLSession
# (FoundationNetworking on Linux) with a URLCache of the same sizes: 32 MiB in memory, 100 MB
# on disk. nginx on 127.0.0.1 serves COUNT images (default 2000) of 8-64 KiB from tmpfs:
# three in four under /fresh/ (`expires 1h`), the rest under /stale/ (`Cache-Control:
# no-cache`, so a cache must revalidate them each time). Both clients keep IN_FLIGHT
# (default 16) requests going, through 6 connections to the host.
#
#   haul-cache-benchmark haul       BASE LIST CACHE_DIR 16
#   haul-cache-benchmark urlsession BASE LIST CACHE_DIR 16
#
# Runs alternate (haul, urlsession, ...) RUNS times (default 5), each with an empty cache
# directory. nginx's access log, split at each pass's marker request, says what reached the
# server in each pass: bodies (200) and conditional requests answered 304. The report gives
# the medians of each pass's time and throughput, what the second pass asked, the process's
# CPU and peak RSS, and Haul's memory-hit and disk-hit latencies.
#
# Usage (from anywhere):
#   Benchmarks/cache.sh
#   RUNS=1 COUNT=500 Benchmarks/cache.sh      # a quick look
# The report goes to standard output and to Benchmarks/results/cache-YYYY-MM-DD-HHMM.md
# (RESULTS_DIR); NOTE adds a line to it; BENCH_BIN uses a built haul-cache-benchmark.
set -euo pipefail
export LC_ALL=C
umask 022

CALLER_DIR=$PWD
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=Benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"

RUNS=${RUNS:-5}
COUNT=${COUNT:-2000}
IN_FLIGHT=${IN_FLIGHT:-16}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}

die() { printf 'cache.sh: %s\n' "$*" >&2; exit 1; }
for tool in nginx python3 /usr/bin/time; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: nginx, python3, time)"
done

if [[ -n ${BENCH_BIN:-} ]]; then
    BENCH=$BENCH_BIN
    [[ $BENCH == /* ]] || BENCH=$CALLER_DIR/$BENCH
else
    printf 'building haul-cache-benchmark (release, .build-bench)\n' >&2
    HAUL_BENCHMARKS=1 swift build "${BENCH_BUILD_FLAGS[@]}" --product haul-cache-benchmark >&2 \
        || die "the build failed"
    BENCH=$(HAUL_BENCHMARKS=1 swift build "${BENCH_BUILD_FLAGS[@]}" --show-bin-path)/haul-cache-benchmark
fi
[[ -x $BENCH ]] || die "no benchmark binary at $BENCH"

WORK=$(mktemp -d "${TMPDIR_BASE:-/dev/shm}/haul-cache.XXXXXX")
cleanup() {
    [[ -f $WORK/nginx/nginx.pid ]] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
    if [[ ${KEEP_WORK:-0} == 1 ]]; then printf 'kept %s\n' "$WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir -p "$WORK/www/fresh" "$WORK/www/stale" "$WORK/nginx/tmp" "$WORK/nginx/logs"

printf 'making %s images\n' "$COUNT" >&2
python3 - "$WORK" "$COUNT" <<'PY'
import os, random, sys
work, count = sys.argv[1], int(sys.argv[2])
rng = random.Random(46)
with open(f"{work}/list", "w") as listing:
    for index in range(count):
        folder = "stale" if index % 4 == 3 else "fresh"
        size = rng.randint(8 << 10, 64 << 10)
        with open(f"{work}/www/{folder}/img-{index}.jpg", "wb") as image:
            image.write(rng.randbytes(size))
        listing.write(f"/{folder}/img-{index}.jpg\n")
PY

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
{
    printf 'daemon on; worker_processes 1; pid %s/nginx/nginx.pid; error_log %s/nginx/logs/error.log;\n' "$WORK" "$WORK"
    printf 'events { worker_connections 1024; }\nhttp {\n'
    nginx_http_basics "$WORK/nginx"
    printf '    log_format pass "$request_uri $status $body_bytes_sent";\n'
    printf '    server { listen 127.0.0.1:%s; root %s/www; access_log %s/nginx/logs/access.log pass;\n' "$PORT" "$WORK" "$WORK"
    printf '        location /fresh/ { expires 1h; }\n'
    printf '        location /stale/ { add_header Cache-Control "no-cache"; }\n    }\n}\n'
} >"$WORK/nginx/nginx.conf"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" || die "nginx did not start"
BASE="http://127.0.0.1:$PORT"

: >"$WORK/runs.tsv"
run_one() {
    local tool=$1 run=$2 cache="$WORK/cache-$1-$2"
    rm -rf "$cache"
    : >"$WORK/nginx/logs/access.log"
    /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$BENCH" "$tool" "$BASE" "$WORK/list" "$cache" "$IN_FLIGHT" \
        >"$WORK/out.json" 2>"$WORK/err" || { cat "$WORK/err" >&2; die "$tool failed"; }
    local disk
    disk=$(du -sb "$cache" | cut -f1)
    python3 - "$tool" "$run" "$WORK/out.json" "$WORK/time" "$WORK/nginx/logs/access.log" "$disk" "$COUNT" \
        >>"$WORK/runs.tsv" <<'PY'
import json, sys
tool, run, out, timing, log, disk, count = sys.argv[1:8]
report = json.load(open(out))
user, system, peak_kb = open(timing).read().split()
passes = {1: {"200": 0, "304": 0, "other": 0}, 2: {"200": 0, "304": 0, "other": 0}}
current = 0
for line in open(log):
    uri, status, sent = line.split()
    if uri.startswith("/marker-pass-"):
        current = int(uri[-1]); continue
    if current in passes:
        passes[current][status if status in ("200", "304") else "other"] += 1
row = {
    "tool": tool, "run": int(run), "pass1": report["pass1Seconds"], "pass2": report["pass2Seconds"],
    "p1bodies": passes[1]["200"], "p2bodies": passes[2]["200"], "p2revalidations": passes[2]["304"],
    "p2requests": passes[2]["200"] + passes[2]["304"] + passes[2]["other"],
    "cpu": float(user) + float(system), "peak": int(peak_kb) * 1024, "disk": int(disk),
    "sources2": report.get("pass2Sources", {}), "failed": sum(v for k, v in report.get("pass1Sources", {}).items() if k.startswith("failed")),
    "memoryHit": report.get("memoryHitMicroseconds"), "diskHit": report.get("diskHitMicroseconds"),
    "memoryDownload": report.get("memoryDownloadMicroseconds"), "memoryTier": report.get("memoryTierBytes"),
    "rss": report.get("rssAfterPasses"), "ioHop": report.get("ioHopMicroseconds"),
}
print(json.dumps(row, sort_keys=True))
PY
    tail -n 1 "$WORK/runs.tsv" >&2
}

for run in $(seq 1 "$RUNS"); do
    run_one haul "$run"
    run_one urlsession "$run"
done

mkdir -p "$RESULTS_DIR"
REPORT="$RESULTS_DIR/cache-$(date -u +%Y-%m-%d-%H%M).md"
python3 - "$WORK/runs.tsv" "$COUNT" "$IN_FLIGHT" "$RUNS" "${NOTE:-}" "$(git rev-parse --short HEAD)" <<'PY' | tee "$REPORT"
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
count, in_flight, runs, note, commit = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def med(tool, key):
    values = [r[key] for r in rows if r["tool"] == tool and r[key] is not None]
    return statistics.median(values) if values else None
print(f"# Cache: {count} images of 8-64 KiB, two passes, Haul's cache against URLSession + URLCache\n")
print(f"Build {commit}; {runs} runs of each, alternating, medians; {in_flight} requests in flight, 6 connections;")
print("nginx on 127.0.0.1 from tmpfs, 3 in 4 images `expires 1h`, the rest `Cache-Control: no-cache`;")
print("both caches 32 MiB in memory and 100 MB on disk. Command: `Benchmarks/cache.sh`.")
if note: print(f"\n{note}")
print("\n| | Haul | URLSession | Haul / URLSession |\n|---|---|---|---|")
def line(label, key, fmt, ratio=True, invert=False):
    h, u = med("haul", key), med("urlsession", key)
    r = ""
    if ratio and h and u: r = f"{(u / h) if invert else (h / u):.2f}x"
    print(f"| {label} | {fmt(h)} | {fmt(u)} | {r} |")
seconds = lambda v: "-" if v is None else f"{v:.3f} s"
ints = lambda v: "-" if v is None else f"{v:.0f}"
mb = lambda v: "-" if v is None else f"{v / 1e6:.1f} MB"
for r in rows:
    r["tp1"] = count / r["pass1"]; r["tp2"] = count / r["pass2"]
    r["nobody"] = count - r["p2bodies"]
line("first pass", "pass1", seconds)
line("first pass, images/s", "tp1", ints)
line("second pass", "pass2", seconds)
line("second pass, images/s", "tp2", ints)
line("second pass: requests reaching the server", "p2requests", ints, ratio=False)
line("second pass: of which 304 (no body)", "p2revalidations", ints, ratio=False)
line("second pass: answers without a body", "nobody", ints, ratio=False)
line("CPU, both passes", "cpu", seconds)
line("peak RSS", "peak", mb)
line("cache directory after the passes", "disk", mb, ratio=False)
print("\nHaul alone (medians of the runs' medians):\n")
print(f"- memory hit (`ResponseCache.freshDataInMemory`): {med('haul', 'memoryHit'):.2f} µs")
print(f"- disk hit, a new manager on the directory (`ResponseCache.freshData`): {med('haul', 'diskHit'):.1f} µs")
print(f"- of which the floor: a trip to the manager's I/O threads and back with no work: {med('haul', 'ioHop'):.1f} µs")
print(f"- a whole `download(_:)` into memory answered by the memory tier: {med('haul', 'memoryDownload'):.1f} µs")
print(f"- memory tier after the passes: {med('haul', 'memoryTier') / 1048576:.1f} MiB (limit 32 MiB); RSS after the passes {med('haul', 'rss') / 1e6:.1f} MB")
sources = {}
for r in rows:
    if r["tool"] == "haul":
        for k, v in r["sources2"].items(): sources.setdefault(k, []).append(v)
print("- second pass, where Haul's answers came from: " + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(sources.items())))
print("\nEvery run:\n\n| tool | run | pass 1 | pass 2 | 2nd-pass requests | 2nd-pass 304 | CPU | peak RSS | cache dir |\n|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['tool']} | {r['run']} | {r['pass1']:.3f} s | {r['pass2']:.3f} s | {r['p2requests']} | {r['p2revalidations']} | {r['cpu']:.2f} s | {r['peak'] / 1e6:.1f} MB | {r['disk'] / 1e6:.1f} MB |")
PY
printf '\nreport: %s\n' "$REPORT" >&2
