#!/usr/bin/env bash
# The service with 100,000 jobs in its journal: how long `GET /api/v1/downloads?limit=100`
# takes from any offset (median of 7 curl runs each), and the daemon's RSS.
#     Benchmarks/serve.sh            (builds haul in release into .build-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-100000}
swift build -c release --product haul --build-path .build-bench >/dev/null
HAUL=.build-bench/release/haul
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/dl"
export HAUL_TOKEN=benchmark-token-0123456789
start() {
    "$HAUL" serve --listen 127.0.0.1:0 --journal "$work/j.sqlite" -d "$work/dl" >"$work/out" 2>&1 &
    pid=$!
    until grep -q "listening on" "$work/out" 2>/dev/null; do sleep 0.1; done
    address=$(grep -o 'http://[0-9.:]*' "$work/out" | head -1)
}
start; kill -TERM $pid; wait $pid || true     # creates the schema
python3 - "$work/j.sqlite" "$JOBS" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); n = int(sys.argv[2])
rows = [(f"http://example.invalid/f/{i}", f"http://example.invalid/f/{i}", "directory", "/tmp/dl", f"f{i}",
         f"/tmp/dl/f{i}.haul-partial", "completed", 2, 1000 + i, 1000 + i, "2026-11-24 00:00:00.000",
         "2026-11-24 00:00:00.000") for i in range(n)]
db.executemany("""INSERT INTO job (id, url, destinationKind, destinationPath, destinationName, partialPath, state,
    priority, bytesCommitted, totalBytes, createdAt, updatedAt) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""", rows)
db.commit()
PY
start
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf 'jobs\toffset\tmedian_ms\n'
for offset in 0 $((JOBS / 2)) $((JOBS - 100)); do
    ms=$(for run in 1 2 3 4 5 6 7; do
        curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $HAUL_TOKEN" \
            "$address/api/v1/downloads?limit=100&offset=$offset"
    done | median)
    printf '%s\t%s\t%.1f\n' "$JOBS" "$offset" "$(echo "$ms * 1000" | bc -l)"
done
printf 'filtered (state=completed, offset %s): ' $((JOBS - 100))
curl -s -o /dev/null -w '%{time_total}s\n' -H "Authorization: Bearer $HAUL_TOKEN" \
    "$address/api/v1/downloads?limit=100&state=completed&offset=$((JOBS - 100))"
echo "RSS: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
