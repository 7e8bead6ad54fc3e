#!/usr/bin/env bash
# Benchmarks/serve.sh: the service (`haul serve`) under load, for issue 12's targets. Three parts,
# chosen with ONLY (default "list,events,throughput"):
#
#   list        100,000 jobs in the journal (inserted with python3's sqlite3): the median of 7
#               `GET /api/v1/downloads?limit=100` at offsets 0, half and the last page (curl's
#               time_total), the same filtered by state, and the daemon's RSS after them.
#               Target: under 50 ms from any offset, RSS under 150 MB.
#   events      16 downloads of EVENTS_SIZE (256M) each from nginx, -j 16: the daemon's CPU time
#               (utime + stime from /proc/PID/stat, from the POST to the last completion) with
#               no event client, and with 10 `curl -N /api/v1/events` clients reading the stream.
#               Completion is seen by polling `GET /api/v1/stats` every 0.2 s in both runs.
#               Target: CPU with clients within 10% of CPU without.
#   throughput  The same `haul get` with and without a daemon for the journal (as its client it
#               queues the downloads and follows them over the event stream): one BIG_SIZE (1G)
#               file, and SMALL_COUNT (5,000) files of 16 KiB with -j 16 --per-host 16 (the
#               daemon started with the same). Wall time of the `haul get` process.
#               Target: within 5%.
#
# Runs (RUNS, default 3, after one uncounted warm-up) alternate between the two sides of a
# comparison, and medians are reported. Downloads go to a directory on /dev/shm when it exists, so the disk's noise stays
# out. The report goes to standard output and Benchmarks/results/serve-YYYY-MM-DD.md.
#
#     Benchmarks/serve.sh                          (builds haul in release into .build-bench)
#     HAUL_BIN=/path/to/haul ONLY=events RUNS=5 Benchmarks/serve.sh
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$PWD
ONLY=${ONLY:-list,events,throughput}
RUNS=${RUNS:-3}
JOBS=${JOBS:-100000}
EVENTS_SIZE=${EVENTS_SIZE:-256M}
BIG_SIZE=${BIG_SIZE:-1G}
SMALL_COUNT=${SMALL_COUNT:-5000}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}
PATH=$PATH:/usr/sbin
want() { [[ ",$ONLY," == *",$1,"* ]]; }
log() { printf '[serve %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# shellcheck source=Benchmarks/lib.sh
source "$REPO/Benchmarks/lib.sh"
HAUL=$(haul_binary) || exit 1

work=$(mktemp -d)
scratch_parent=/dev/shm
[ -d "$scratch_parent" ] && [ -w "$scratch_parent" ] || scratch_parent=$work
scratch=$(mktemp -d "$scratch_parent/haul-serve-bench.XXXXXX")
pid=
nginx_pid_file=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    jobs -p | xargs -r kill 2>/dev/null || true
    [ -n "$nginx_pid_file" ] && [ -f "$nginx_pid_file" ] && kill "$(cat "$nginx_pid_file")" 2>/dev/null || true
    rm -rf "$work" "$scratch"
}
trap cleanup EXIT
export HAUL_TOKEN=benchmark-token-0123456789
auth=(-H "Authorization: Bearer $HAUL_TOKEN")
report=$work/report.md

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks_per_second=$(getconf CLK_TCK)

# Starts the daemon on a free port: start JOURNAL DIR [options...]; sets pid and address.
start() {
    local journal=$1 dir=$2
    shift 2
    # Emptied here, not only by the redirection below: that runs in the background job,
    # maybe after the first grep, which would find the last daemon's address.
    : >"$work/serve.out"
    "$HAUL" serve --listen 127.0.0.1:0 --journal "$journal" -d "$dir" "$@" >"$work/serve.out" 2>&1 &
    pid=$!
    until grep -q "listening on http://" "$work/serve.out" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || { cat "$work/serve.out" >&2; exit 1; }
        sleep 0.05
    done
    address=$(grep -o 'http://[0-9.:]*' "$work/serve.out" | head -1)
}
stop() {
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
}

# nginx on a free port, serving $work/www (events and throughput parts).
start_nginx() {
    local www=$work/www prefix=$work/nginx port
    mkdir -p "$www/small" "$prefix/tmp"
    chmod 755 "$work"
    log "writing the corpus ($EVENTS_SIZE, $BIG_SIZE, $SMALL_COUNT x 16 KiB)"
    head -c "$(numfmt --from=iec "$EVENTS_SIZE")" /dev/urandom >"$www/event.bin"
    head -c "$(numfmt --from=iec "$BIG_SIZE")" /dev/urandom >"$www/big.bin"
    head -c 16384 /dev/urandom >"$www/small.bin"
    for _ in 1 2 3 4 5; do
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        cat >"$prefix/nginx.conf" <<EOF
worker_processes auto;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 4096; }
http {
$(nginx_http_basics "$prefix")
    server {
        listen 127.0.0.1:$port;
        root $www;
        # /event/N.bin: one file under many names; /small/N.bin likewise.
        location /event/ { try_files /event.bin =404; }
        location /small/ { try_files /small.bin =404; }
    }
}
EOF
        if nginx -c "$prefix/nginx.conf" -p "$prefix" -e "$prefix/error.log" 2>>"$prefix/start.log"; then
            nginx_pid_file=$prefix/nginx.pid
            base=http://127.0.0.1:$port
            return
        fi
    done
    cat "$prefix/start.log" >&2
    exit 1
}

{
    echo "# haul serve under load ($(date +%Y-%m-%d))"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)."
    echo "haul: $("$HAUL" --version 2>/dev/null || echo "?"), commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "?")."
    echo "Command: \`ONLY=$ONLY RUNS=$RUNS Benchmarks/serve.sh\`"
    echo
} >"$report"

if want list; then
    log "list: $JOBS jobs"
    mkdir -p "$scratch/list"
    start "$work/list.sqlite" "$scratch/list"
    stop # the schema
    python3 - "$work/list.sqlite" "$JOBS" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); n = int(sys.argv[2])
states = ["completed"] * 6 + ["failed", "paused", "queued", "cancelled"]
rows = [(f"http://example.invalid/f/{i}", f"http://example.invalid/f/{i}", "directory", "/tmp/dl", f"f{i}",
         f"/tmp/dl/f{i}.haul-partial", states[i % len(states)], 2, 1000 + i, 1000 + i,
         "2026-11-24 00:00:00.000", "2026-11-24 00:00:00.000") for i in range(n)]
db.executemany("""INSERT INTO job (id, url, destinationKind, destinationPath, destinationName, partialPath, state,
    priority, bytesCommitted, totalBytes, createdAt, updatedAt) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""", rows)
db.commit()
PY
    # The queued ones would start downloading from example.invalid: keep them paused.
    sqlite3_pause="UPDATE job SET state = 'paused' WHERE state = 'queued'"
    python3 -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute(sys.argv[2]); d.commit()" \
        "$work/list.sqlite" "$sqlite3_pause"
    start "$work/list.sqlite" "$scratch/list"
    timed() {
        for run in 1 2 3 4 5 6 7; do
            curl -s -o /dev/null -w '%{time_total}\n' "${auth[@]}" "$address/api/v1/downloads?$1"
        done | median
    }
    {
        echo "## Listing $JOBS jobs"
        echo
        echo "| request | median of 7 (ms) |"
        echo "|---|---|"
        for query in "limit=100&offset=0" "limit=100&offset=$((JOBS / 2))" "limit=100&offset=$((JOBS - 100))" \
            "limit=100&offset=$((JOBS / 2))&sort=name" "limit=100&offset=$((JOBS - 100))&sort=size&order=desc" \
            "limit=100&state=failed&offset=$((JOBS / 10 - 100))" "limit=100&q=f9999"; do
            printf '| `GET /api/v1/downloads?%s` | %.1f |\n' "$query" "$(echo "$(timed "$query") * 1000" | bc -l)"
        done
        printf '| `GET /api/v1/stats` | %.1f |\n' "$(echo "$(for run in 1 2 3 4 5 6 7; do
            curl -s -o /dev/null -w '%{time_total}\n' "${auth[@]}" "$address/api/v1/stats"; done | median) * 1000" | bc -l)"
        echo
        echo "Daemon RSS after these requests: $(awk '/VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status") (VmHWM $(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status"))."
        echo
    } >>"$report"
    stop
fi

if want events || want throughput; then
    start_nginx
    log "nginx on $base"
fi

if want events; then
    mkdir -p "$scratch/events"
    body=$(python3 -c 'import json,sys; print(json.dumps({"downloads": [{"url": f"{sys.argv[1]}/event/{i}.bin", "directory": sys.argv[2]} for i in range(16)]}))' "$base" "$scratch/events")
    declare -A cpu
    for run in $(seq 0 "$RUNS"); do # run 0 warms up (the first writes to a fresh tmpfs are slow) and is not counted
        for clients in 0 10; do
            rm -rf "$scratch/events" "$work/events.sqlite"*
            mkdir -p "$scratch/events"
            start "$work/events.sqlite" "$scratch/events" -j 16 --per-host 16
            readers=()
            for reader in $(seq "$clients"); do
                curl -sN "${auth[@]}" "$address/api/v1/events" >"$work/reader$reader.txt" &
                readers+=($!)
            done
            # Every reader has its first frame ("retry:") before the clock starts.
            for reader in $(seq "$clients"); do
                until [ -s "$work/reader$reader.txt" ]; do sleep 0.01; done
            done
            before=$(cpu_ticks "$pid")
            started=$EPOCHREALTIME
            curl -sf -o /dev/null "${auth[@]}" -H 'Content-Type: application/json' -d "$body" "$address/api/v1/downloads"
            until [[ $(curl -s "${auth[@]}" "$address/api/v1/stats") == *'"completed":16'* ]]; do sleep 0.2; done
            wall=$(echo "$EPOCHREALTIME - $started" | bc -l)
            ticks=$(($(cpu_ticks "$pid") - before))
            events=0
            for reader in $(seq "$clients"); do
                events=$((events + $(grep -c '^event:' "$work/reader$reader.txt" || true)))
            done
            if [ "${#readers[@]}" -gt 0 ]; then
                kill "${readers[@]}" 2>/dev/null || true
                wait "${readers[@]}" 2>/dev/null || true
            fi
            stop
            seconds=$(echo "$ticks / $ticks_per_second" | bc -l)
            log "events: run $run, $clients clients: CPU ${seconds}s, wall ${wall}s, $events events read"
            [ "$run" = 0 ] && continue
            cpu[$clients]+="$seconds "
            echo "$clients $run $seconds $wall $events" >>"$work/events.tsv"
        done
    done
    none=$(tr ' ' '\n' <<<"${cpu[0]}" | grep . | median)
    ten=$(tr ' ' '\n' <<<"${cpu[10]}" | grep . | median)
    {
        echo "## 16 downloads of $EVENTS_SIZE, -j 16: daemon CPU with and without event clients"
        echo
        echo "| SSE clients | daemon CPU, median of $RUNS (s) | runs (CPU s, wall s, events read by all clients) |"
        echo "|---|---|---|"
        for clients in 0 10; do
            printf '| %s | %.2f | %s |\n' "$clients" "$([ "$clients" = 0 ] && echo "$none" || echo "$ten")" \
                "$(awk -v c="$clients" '$1 == c {printf "%s%.2f, %.2f, %d", sep, $3, $4, $5; sep = "; "}' "$work/events.tsv")"
        done
        echo
        printf 'CPU with 10 clients / without: **%.3f**\n\n' "$(echo "$ten / $none" | bc -l)"
    } >>"$report"
fi

if want throughput; then
    seq -f "$base/small/%06g.bin" 0 $((SMALL_COUNT - 1)) >"$work/small.txt"
    declare -A wall
    for workload in big small; do
        for run in $(seq 0 "$RUNS"); do # run 0 warms up and is not counted
            for side in direct service; do
                rm -rf "$scratch/t" "$work/t.sqlite"* "$work/d.sqlite"*
                mkdir -p "$scratch/t"
                if [ "$workload" = big ]; then args=("$base/big.bin"); else args=(-i "$work/small.txt" -j 16 --per-host 16); fi
                if [ "$side" = service ]; then
                    start "$work/d.sqlite" "$scratch/t" -j 16 --per-host 16
                    journal=$work/d.sqlite
                else
                    journal=$work/t.sqlite
                fi
                started=$EPOCHREALTIME
                "$HAUL" get -q --journal "$journal" -d "$scratch/t" "${args[@]}"
                seconds=$(echo "$EPOCHREALTIME - $started" | bc -l)
                files=$(find "$scratch/t" -type f ! -name '*.haul-partial' | wc -l)
                expected=$([ "$workload" = big ] && echo 1 || echo "$SMALL_COUNT")
                [ "$files" = "$expected" ] || { log "throughput: $workload/$side: $files files, not $expected"; exit 1; }
                [ "$side" = service ] && stop
                log "throughput: $workload, run $run, $side: ${seconds}s"
                [ "$run" = 0 ] && continue
                wall[$workload.$side]+="$seconds "
                echo "$workload $side $run $seconds" >>"$work/throughput.tsv"
            done
        done
    done
    {
        echo "## Throughput: \`haul get\` alone, and as the client of a daemon"
        echo
        echo "| workload | alone, median (s) | through the daemon, median (s) | daemon / alone | runs alone; through the daemon |"
        echo "|---|---|---|---|---|"
        for workload in big small; do
            direct=$(tr ' ' '\n' <<<"${wall[$workload.direct]}" | grep . | median)
            service=$(tr ' ' '\n' <<<"${wall[$workload.service]}" | grep . | median)
            name=$([ "$workload" = big ] && echo "one $BIG_SIZE file" || echo "$SMALL_COUNT files of 16 KiB, -j 16")
            printf '| %s | %.2f | %.2f | **%.3f** | %s; %s |\n' "$name" "$direct" "$service" \
                "$(echo "$service / $direct" | bc -l)" "${wall[$workload.direct]% }" "${wall[$workload.service]% }"
        done
        echo
    } >>"$report"
fi

cat "$report"
mkdir -p "$RESULTS_DIR"
cp "$report" "$RESULTS_DIR/serve-$(date +%Y-%m-%d).md"
log "report: $RESULTS_DIR/serve-$(date +%Y-%m-%d).md"
