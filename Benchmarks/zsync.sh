#!/usr/bin/env bash
# Benchmarks/zsync.sh: a delta download, Haul against Debian's zsync 0.6.2 client. An old
# version of SIZE (default 512M, random bytes, tmpfs) and, for each CHANGED percentage
# (default "1 10"), a new version with that share of its 2 KiB blocks changed (16 bytes
# each, at blocks chosen at random: scattered), with its control file from zsyncmake. nginx
# on 127.0.0.1 serves them over plain http (zsync 0.6.2 speaks no HTTPS); for each RTT_MS
# (default "0 40") above 0, through Benchmarks/relay.py holding each direction RTT/2.
#
#   haul get -q --journal J -d OUT --seed OLD URL.zsync
#   zsync -q -i OLD -o OUT/new.bin URL.zsync           (in OUT: it leaves its .part there)
#
# Runs alternate (haul, zsync, ...) RUNS times (default 5), after one unrecorded run of each
# tool; every result is compared with
# the served file. The report gives the medians of the wall time, CPU (user + system), peak
# RSS, and the bytes nginx sent for the target (its access log: the missing blocks, and the
# multipart headers around them).
#
# Usage (from anywhere):
#   Benchmarks/zsync.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=5 Benchmarks/zsync.sh
#   HAUL_BIN=... SIZE=64M CHANGED=1 RTT_MS=0 RUNS=1 Benchmarks/zsync.sh     # a quick look
# The report goes to standard output and to Benchmarks/results/zsync-YYYY-MM-DD-HHMM.md
# (RESULTS_DIR); NOTE adds a line to it; KEEP_WORK=1 keeps the files.
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
SIZE=${SIZE:-512M}
CHANGED=${CHANGED:-1 10}
RTT_MS=${RTT_MS:-0 40}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}

die() { printf 'zsync.sh: %s\n' "$*" >&2; exit 1; }
for tool in nginx zsync zsyncmake python3 /usr/bin/time; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: nginx, zsync, python3, time)"
done

HAUL=$(haul_binary) || exit 1
SIZE_BYTES=$(numfmt --from=iec "$SIZE")

WORK=$(mktemp -d "${TMPDIR_BASE:-/dev/shm}/haul-zsync.XXXXXX")
RELAYS=()
cleanup() {
    [[ -f $WORK/nginx/nginx.pid ]] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
    for pid in "${RELAYS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ ${KEEP_WORK:-0} == 1 ]]; then printf 'kept %s\n' "$WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
chmod 755 "$WORK"  # (mktemp makes it 0700: nginx's workers must reach the files)
mkdir -p "$WORK/www" "$WORK/nginx/tmp" "$WORK/nginx/logs" "$WORK/out"

printf 'making the old version and the new ones (%s)\n' "$SIZE" >&2
head -c "$SIZE_BYTES" /dev/urandom >"$WORK/old.bin"
for percent in $CHANGED; do
    python3 - "$WORK/old.bin" "$WORK/www/new-$percent.bin" "$percent" <<'PY'
import os, random, sys
source, target, percent = sys.argv[1], sys.argv[2], float(sys.argv[3])
data = bytearray(open(source, "rb").read())
blocks = len(data) // 2048
random.seed(int(percent * 1000))
for block in random.sample(range(blocks), int(blocks * percent / 100)):
    offset = block * 2048 + random.randrange(2048 - 16)
    data[offset:offset + 16] = os.urandom(16)
open(target, "wb").write(data)
PY
    (cd "$WORK/www" && zsyncmake -u "new-$percent.bin" -o "new-$percent.bin.zsync" "new-$percent.bin" 2>/dev/null)
done

PORT=$(free_port)
{
    echo "worker_processes 1; daemon on; pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/logs/error.log;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    nginx_http_basics "$WORK/nginx"
    echo "    log_format sent '\$uri \$status \$body_bytes_sent';"
    echo "    server { listen 127.0.0.1:$PORT; root $WORK/www; access_log $WORK/nginx/logs/access.log sent; }"
    echo "}"
} >"$WORK/nginx/nginx.conf"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" || die "nginx did not start"
declare -A ORIGIN
for rtt in $RTT_MS; do
    if [[ $rtt == 0 ]]; then
        ORIGIN[$rtt]=http://127.0.0.1:$PORT
    else
        start_far_link "$PORT" "$rtt" "$WORK/relay-$rtt.log"
        ORIGIN[$rtt]=http://127.0.0.1:$FAR_PORT
    fi
done

# One run: TOOL builds new-PERCENT.bin through ORIGIN; prints "wall cpu rss served".
run_one() {
    local tool=$1 percent=$2 origin=$3 out=$WORK/out/$1 start end
    local url=$origin/new-$percent.bin.zsync
    rm -rf "$out"
    mkdir -p "$out"
    : >"$WORK/nginx/logs/access.log"
    kill -USR1 "$(cat "$WORK/nginx/nginx.pid")"
    case $tool in
        haul)
            start=$EPOCHREALTIME
            /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$HAUL" get -q --journal "$out/journal.sqlite" -d "$out" \
                --seed "$WORK/old.bin" "$url" >"$WORK/log-$tool" 2>&1 || die "haul failed: $(tail -n 5 "$WORK/log-$tool")"
            end=$EPOCHREALTIME ;;
        zsync)
            start=$EPOCHREALTIME
            (cd "$out" && /usr/bin/time -f '%U %S %M' -o "$WORK/time" zsync -q -i "$WORK/old.bin" -o "$out/new-$percent.bin" \
                "$url" >"$WORK/log-$tool" 2>&1) || die "zsync failed: $(tail -n 5 "$WORK/log-$tool")"
            end=$EPOCHREALTIME ;;
    esac
    cmp -s "$out/new-$percent.bin" "$WORK/www/new-$percent.bin" || die "$tool's file differs from the served one"
    awk -v wall="$(echo "$end - $start" | bc -l)" -v times="$(cat "$WORK/time")" -v target="/new-$percent.bin" '
        $1 == target { served += $3 }
        END { split(times, t, " "); printf "%.3f %.2f %.1f %d\n", wall, t[1] + t[2], t[3] / 1024, served }' \
        "$WORK/nginx/logs/access.log"
}

# One unrecorded run of each tool first: the first runs after the files are made were the
# slowest of both tools (zsync 4.0 and 3.4 s against 2.3-2.5 s after).
first_rtt=${RTT_MS%% *}
first_percent=${CHANGED%% *}
for tool in haul zsync; do
    run_one "$tool" "$first_percent" "${ORIGIN[$first_rtt]}" >/dev/null
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A RESULTS
for rtt in $RTT_MS; do
    for percent in $CHANGED; do
        for run in $(seq 1 "$RUNS"); do
            for tool in haul zsync; do
                line=$(run_one "$tool" "$percent" "${ORIGIN[$rtt]}")
                RESULTS[$rtt,$percent,$tool]+="$line"$'\n'
                printf 'rtt %s ms, %s%%, run %d/%d %-5s %s\n' "$rtt" "$percent" "$run" "$RUNS" "$tool" "$line" >&2
            done
        done
    done
done
column_median() { printf '%s' "${RESULTS[$1]}" | awk -v c="$2" 'NF { print $c }' | median; }

STAMP=$(date -u +%Y-%m-%d-%H%M)
REPORT="$RESULTS_DIR/zsync-$STAMP.md"
mkdir -p "$RESULTS_DIR"
{
    echo "# Delta downloads: Haul against zsync 0.6.2, $(date -u +%Y-%m-%d)"
    echo
    echo "An old version of $SIZE (random bytes) and new versions with $CHANGED percent of their 2 KiB blocks changed (16 bytes each, blocks chosen at random), control files by \`zsyncmake -u\`, served by nginx on 127.0.0.1 over plain http; the round trip added by \`Benchmarks/relay.py\`. Medians of $RUNS runs, the tools alternating, after one unrecorded run of each; $(nproc) CPUs; tmpfs. haul: $("$HAUL" --version 2>/dev/null || echo "$HAUL") ($HAUL); zsync: $(zsync -V 2>/dev/null | head -n 1)."
    [[ -n ${NOTE:-} ]] && { echo; echo "$NOTE"; }
    echo
    echo "| round trip | changed | tool | wall | ÷ zsync | CPU (user + sys) | peak RSS | bytes served | ÷ zsync |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for rtt in $RTT_MS; do
        for percent in $CHANGED; do
            zwall=$(column_median "$rtt,$percent,zsync" 1)
            zserved=$(column_median "$rtt,$percent,zsync" 4)
            for tool in haul zsync; do
                key=$rtt,$percent,$tool
                wall=$(column_median "$key" 1)
                served=$(column_median "$key" 4)
                echo "| $rtt ms | $percent% | $tool | ${wall} s | $(echo "scale=2; $wall / $zwall" | bc -l) | $(column_median "$key" 2) s | $(column_median "$key" 3) MiB | $(numfmt --to=iec "${served%.*}") | $(echo "scale=2; $served / $zserved" | bc -l) |"
            done
        done
    done
    echo
    echo "Commands:"
    echo
    echo "    haul get -q --journal J -d OUT --seed OLD URL.zsync"
    echo "    zsync -q -i OLD -o OUT/new.bin URL.zsync"
    echo
    echo "Per run (wall s, CPU s, peak RSS MiB, bytes served):"
    echo
    for key in "${!RESULTS[@]}"; do
        printf '%s' "${RESULTS[$key]}" | awk -v k="$key" 'NF { printf "    %-14s %s\n", k, $0 }'
    done | sort
} | tee "$REPORT"
printf 'report: %s\n' "$REPORT" >&2
