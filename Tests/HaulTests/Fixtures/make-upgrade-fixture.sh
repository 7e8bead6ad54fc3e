#!/bin/sh
# Makes Tests/HaulTests/Fixtures/upgrade-10c1a37: the journal and partial files that the
# release at commit 10c1a37 leaves behind when it is killed mid-transfer, for
# UpgradeTests (see the fixture's README.md).
#
# Usage: make-upgrade-fixture.sh [PATH-TO-OLD-HAUL]   (default /work/old-haul/haul)
#
# The journal stores absolute paths and the URL's port, so the fixture is made under a
# fixed directory (/tmp/haul-upgrade-fixture) against a server on a fixed port (47391);
# the test restores it to the same directory and serves the same bytes on the same port.
set -eu
HAUL=${1:-/work/old-haul/haul}
ROOT=/tmp/haul-upgrade-fixture
PORT=47391
OUT=$(cd "$(dirname "$0")" && pwd)/upgrade-10c1a37

rm -rf "$ROOT" && mkdir -p "$ROOT/downloads"
# The files: byte i of a file is (i * 7 + (i >> 8) * 13 + seed) & 0xff, with a strong
# ETag; a.bin is 300 KiB (seed 1), b.bin 400 KiB (seed 2). UpgradeTests serves the same.
python3 - "$PORT" > "$ROOT/server.log" 2>&1 <<'PY' &
import sys, http.server
files = {"/files/a.bin": (300 * 1024, 1, '"a-v1"'), "/files/b.bin": (400 * 1024, 2, '"b-v1"')}
def content(n, seed): return bytes((i * 7 + (i >> 8) * 13 + seed) & 0xff for i in range(n))
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path not in files:
            self.send_error(404); return
        n, seed, etag = files[self.path]
        body = content(n, seed)
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
        self.end_headers()
        try: self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
sleep 1

J="$ROOT/journal.sqlite"
# Both downloads run at 40 KB/s each, so they are mid-transfer for several seconds.
"$HAUL" get --journal "$J" -d "$ROOT/downloads" --limit-rate 40K \
    "http://127.0.0.1:$PORT/files/a.bin" "http://127.0.0.1:$PORT/files/b.bin" > "$ROOT/get.log" 2>&1 &
GET=$!
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
# Wait until both partials hold at least 64 KiB.
for _ in $(seq 100); do
    if [ "$(size "$ROOT/downloads/a.bin.haul-partial")" -ge 65536 ] \
        && [ "$(size "$ROOT/downloads/b.bin.haul-partial")" -ge 65536 ]; then break; fi
    sleep 0.1
done
# a.bin: paused through the journal (its process syncs the partial and records the
# checkpoint); b.bin: still running when the process is killed.
"$HAUL" pause --journal "$J" "http://127.0.0.1:$PORT/files/a.bin"
for _ in $(seq 50); do
    [ "$(sqlite3 "$J" "SELECT state FROM job WHERE url LIKE '%a.bin'")" = paused ] && break
    sleep 0.1
done
sleep 0.5
kill -9 $GET
wait $GET 2>/dev/null || true
sqlite3 "$J" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null

rm -rf "$OUT" && mkdir -p "$OUT/downloads"
cp "$J" "$OUT/journal.sqlite"
cp "$ROOT"/downloads/*.haul-partial "$ROOT"/downloads/*.haul-meta "$OUT/downloads/"
sqlite3 "$J" "SELECT id, state, bytesCommitted, bootID FROM job" 
ls -l "$OUT/downloads"
