#!/usr/bin/env bash
# Benchmarks/mirrors.sh: one file from three mirrors, Haul against aria2c with the same
# URIs. nginx on 127.0.0.1 serves the same SIZE file (default 256 MiB, random bytes, on
# tmpfs) from three ports, two allowing FAST (default 20m: 20 MiB/s, nginx's m is 1024²)
# per connection and one allowing SLOW (default 2m) per connection (nginx `limit_rate`).
# Each tool gets three connections, one per mirror at first:
#
#   haul get -q --journal J -d OUT -o f.bin -x 3 URL1 --mirror URL2 --mirror URL3
#   aria2c -q -x 3 -s 3 -k 1M --allow-overwrite=true --auto-file-renaming=false
#          --file-allocation=none -d OUT -o f.bin URL1 URL2 URL3
#
# (URL1 and URL2 are the fast mirrors, URL3 the slow one: a tool that leaves the slow
# mirror a large part of the file waits for it.) Every run's file is compared with the
# served one. Runs alternate (haul, aria2c, haul, ...) RUNS times (default 5); the report
# gives the medians of the wall time, the throughput (SIZE / wall), the throughput as a
# share of the sum of the three limits (what three connections, one per mirror, can take at
# best), CPU (user + system) and the bytes each mirror sent (from nginx's access logs).
# It also gives the transfer as the servers saw it, from nginx's log: from the start of the
# first request (\$msec - \$request_time) to the end of the last, and SIZE over that time;
# the difference from the wall time is each tool's own start and finish.
#
# Usage (from anywhere):
#   Benchmarks/mirrors.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=5 Benchmarks/mirrors.sh
#   HAUL_BIN=... SIZE=64M RUNS=1 Benchmarks/mirrors.sh      # a quick look
# The report goes to standard output and to Benchmarks/results/mirrors-YYYY-MM-DD-HHMM.md
# (RESULTS_DIR); NOTE adds a line to it; KEEP_WORK=1 keeps the logs.
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
SIZE=${SIZE:-256M}
FAST=${FAST:-20m}
SLOW=${SLOW:-2m}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}

die() { printf 'mirrors.sh: %s\n' "$*" >&2; exit 1; }
for rate in "$FAST" "$SLOW"; do [[ $rate =~ ^[0-9]+[km]?$ ]] || die "FAST and SLOW must be nginx rates such as 20m"; done
for tool in nginx aria2c /usr/bin/time; do command -v "$tool" >/dev/null || die "needs $tool (Debian: nginx, aria2, time)"; done

HAUL=$(haul_binary) || exit 1
SIZE_BYTES=$(numfmt --from=iec "$SIZE")
FAST_BYTES=$(numfmt --from=iec "${FAST^^}")
SLOW_BYTES=$(numfmt --from=iec "${SLOW^^}")
LIMITS=$((2 * FAST_BYTES + SLOW_BYTES))

WORK=$(mktemp -d "${TMPDIR_BASE:-/dev/shm}/haul-mirrors.XXXXXX")
cleanup() {
    [[ -f $WORK/nginx/nginx.pid ]] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
    if [[ ${KEEP_WORK:-0} == 1 ]]; then printf 'kept %s\n' "$WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
chmod 755 "$WORK"  # (mktemp makes it 0700: nginx's workers must reach the files)
mkdir -p "$WORK/www" "$WORK/nginx/tmp" "$WORK/nginx/logs" "$WORK/out"
head -c "$SIZE_BYTES" /dev/urandom >"$WORK/www/f.bin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORTS=("$(free_port)" "$(free_port)" "$(free_port)")
RATES=("$FAST" "$FAST" "$SLOW")
{
    echo "worker_processes 1; daemon on; pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/logs/error.log;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    nginx_http_basics "$WORK/nginx"
    echo "    log_format sent '\$server_port \$body_bytes_sent \$msec \$request_time';"
    for index in 0 1 2; do
        echo "    server { listen 127.0.0.1:${PORTS[$index]}; root $WORK/www; limit_rate ${RATES[$index]};"
        echo "             access_log $WORK/nginx/logs/access.log sent; }"
    done
    echo "}"
} >"$WORK/nginx/nginx.conf"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" || die "nginx did not start"
URLS=()
for port in "${PORTS[@]}"; do URLS+=("http://127.0.0.1:$port/f.bin"); done

# One run: TOOL into a fresh OUT; prints "wall cpu fast1 fast2 slow transfer" (bytes per
# mirror; transfer: seconds from the first request's start to the last one's end).
run_one() {
    local tool=$1 out=$WORK/out/$1 start end times
    rm -rf "$out"
    mkdir -p "$out"
    : >"$WORK/nginx/logs/access.log"
    kill -USR1 "$(cat "$WORK/nginx/nginx.pid")"
    case $tool in
        haul)
            start=$EPOCHREALTIME
            /usr/bin/time -f '%U %S' -o "$WORK/time" "$HAUL" get -q --journal "$out/journal.sqlite" -d "$out" \
                -o f.bin -x 3 "${URLS[0]}" --mirror "${URLS[1]}" --mirror "${URLS[2]}" >"$WORK/log-$tool" 2>&1 \
                || die "haul failed: $(tail -n 5 "$WORK/log-$tool")"
            end=$EPOCHREALTIME ;;
        aria2c)
            start=$EPOCHREALTIME
            /usr/bin/time -f '%U %S' -o "$WORK/time" aria2c -q -x 3 -s 3 -k 1M --allow-overwrite=true \
                --auto-file-renaming=false --file-allocation=none -d "$out" -o f.bin "${URLS[@]}" \
                >"$WORK/log-$tool" 2>&1 || die "aria2c failed: $(tail -n 5 "$WORK/log-$tool")"
            end=$EPOCHREALTIME ;;
    esac
    cmp -s "$out/f.bin" "$WORK/www/f.bin" || die "$tool's file differs from the served one"
    times=$(cat "$WORK/time")
    # nginx writes its log lines as each request ends: all are there once the tool exited.
    awk -v p0="${PORTS[0]}" -v p1="${PORTS[1]}" -v p2="${PORTS[2]}" \
        -v wall="$(echo "$end - $start" | bc -l)" -v cpu="$(echo "$times" | awk '{print $1 + $2}')" '
        { sent[$1] += $2; start = $3 - $4; if (first == "" || start < first) first = start; if ($3 > last) last = $3 }
        END { printf "%.3f %.2f %d %d %d %.3f\n", wall, cpu, sent[p0], sent[p1], sent[p2], last - first }' \
        "$WORK/nginx/logs/access.log"
}

declare -A RESULTS
for run in $(seq 1 "$RUNS"); do
    for tool in haul aria2c; do
        line=$(run_one "$tool")
        RESULTS[$tool]+="$line"$'\n'
        printf 'run %d/%d %-6s %s\n' "$run" "$RUNS" "$tool" "$line" >&2
    done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column_median() { printf '%s' "${RESULTS[$1]}" | awk -v c="$2" 'NF { print $c }' | median; }

STAMP=$(date -u +%Y-%m-%d-%H%M)
REPORT="$RESULTS_DIR/mirrors-$STAMP.md"
mkdir -p "$RESULTS_DIR"
{
    echo "# One file from three mirrors, $(date -u +%Y-%m-%d)"
    echo
    echo "$SIZE of random bytes on tmpfs from nginx on 127.0.0.1, three ports: two at \`limit_rate $FAST\`, one at \`limit_rate $SLOW\` per connection (together $(numfmt --to=iec "$LIMITS")/s, $(echo "scale=1; $LIMITS / 1000000" | bc) MB/s). Medians of $RUNS runs, the tools alternating; $(nproc) CPUs."
    [[ -n ${NOTE:-} ]] && { echo; echo "$NOTE"; }
    echo
    echo "| | wall | MB/s | ÷ the sum of the limits | transfer (nginx's log) | its MB/s | ÷ the sum of the limits | CPU (user + sys) | sent by fast 1, fast 2, slow (MiB) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for tool in haul aria2c; do
        wall=$(column_median "$tool" 1)
        cpu=$(column_median "$tool" 2)
        rate=$(echo "scale=1; $SIZE_BYTES / $wall / 1000000" | bc -l)
        share=$(echo "scale=3; $SIZE_BYTES / $wall / $LIMITS" | bc -l)
        transfer=$(column_median "$tool" 6)
        transfer_rate=$(echo "scale=1; $SIZE_BYTES / $transfer / 1000000" | bc -l)
        transfer_share=$(echo "scale=3; $SIZE_BYTES / $transfer / $LIMITS" | bc -l)
        sent=""
        for column in 3 4 5; do sent+="$(echo "scale=1; $(column_median "$tool" $column) / 1048576" | bc -l), "; done
        echo "| $tool | ${wall} s | $rate | $share | ${transfer} s | $transfer_rate | $transfer_share | ${cpu} s | ${sent%, } |"
    done
    echo
    echo "Commands:"
    echo
    echo "    haul get -q --journal J -d OUT -o f.bin -x 3 URL1 --mirror URL2 --mirror URL3"
    echo "    aria2c -q -x 3 -s 3 -k 1M --allow-overwrite=true --auto-file-renaming=false --file-allocation=none -d OUT -o f.bin URL1 URL2 URL3"
    echo
    echo "Per run (wall s, CPU s, bytes sent by fast 1, fast 2, slow, transfer s):"
    echo
    for tool in haul aria2c; do
        printf '%s' "${RESULTS[$tool]}" | awk -v t="$tool" 'NF { printf "    %-6s %s\n", t, $0 }'
    done
} | tee "$REPORT"
printf 'report: %s\n' "$REPORT" >&2
