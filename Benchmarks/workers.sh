#!/usr/bin/env bash
# Benchmarks/workers.sh: the shared queue on PostgreSQL (`haul worker`, issue 14). Two parts,
# chosen with ONLY (default "claims,downloads"):
#
#   claims     Claim-and-complete throughput without transfers: haul-worker-benchmark queues
#              CLAIM_COUNT (20,000) jobs in a fresh database, then 1, 2, 4 and 8 workers (each
#              with its own connection pool and job store, as a `haul worker` process has)
#              claim up to 16 at a time and confirm each completion (the fenced,
#              group-committed update a finished transfer makes before its rename) until the
#              queue is empty. Jobs per second, first claim to last completion.
#   downloads  Download throughput with 1, 2 and 4 `haul worker` processes (-j 2 each, so
#              each worker is capped at 2 connections) against nginx limiting every response
#              to RATE (4m: 4 MiB) per second: FILES (32) files of FILE_SIZE (8M) queued with
#              `haul get --queue -i`, timed from the workers' start to the last completion
#              the database shows (polled every 0.1 s). Near-linear scaling is the target.
#
# A private PostgreSQL 15 cluster is started in a temporary directory (as the postgres user
# when run as root) and removed at the end; fsync stays on (the defaults), so the numbers
# include durable commits. The report goes to standard output and
# Benchmarks/results/workers-YYYY-MM-DD.md (RESULTS_DIR overrides the directory).
#
#     Benchmarks/workers.sh
#     HAUL_BIN=.build-bench/release/haul ONLY=claims Benchmarks/workers.sh
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
REPO=$PWD
ONLY=${ONLY:-claims,downloads}
CLAIM_COUNT=${CLAIM_COUNT:-20000}
RATE=${RATE:-4m}
FILES=${FILES:-32}
FILE_SIZE=${FILE_SIZE:-8M}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}
PG=${PG:-/usr/lib/postgresql/15/bin}
PATH=$PATH:/usr/sbin
want() { [[ ",$ONLY," == *",$1,"* ]]; }
log() { printf '[workers %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=Benchmarks/lib.sh
source "$REPO/Benchmarks/lib.sh"
HAUL=$(haul_binary) || exit 1
[[ -x $PG/initdb ]] || die "PostgreSQL 15 is not installed ($PG): apt-get install postgresql"
command -v psql >/dev/null || die "psql is needed"

work=$(mktemp -d)
chmod 755 "$work"
worker_pids=()
nginx_pid_file=
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
    for p in "${worker_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    [[ -n $nginx_pid_file && -f $nginx_pid_file ]] && kill "$(cat "$nginx_pid_file")" 2>/dev/null || true
    [[ -d $work/pg/data ]] && as_pg "$PG/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# The cluster: Unix socket in $work/pg only, trust authentication.
mkdir -p "$work/pg"
[[ $(id -u) == 0 ]] && chown postgres: "$work/pg"
as_pg "$PG/initdb" -D "$work/pg/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
as_pg "$PG/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w \
    -o "-k $work/pg -p 5439 -c listen_addresses='' -c max_connections=200" start >/dev/null
ADMIN="postgres://postgres@/postgres?host=$work/pg&port=5439"
sql() { psql -h "$work/pg" -p 5439 -U postgres -d "$1" -Atc "$2"; }
log "PostgreSQL on $work/pg"

report=$work/report.md
{
    echo "# The shared queue: claims and downloads ($(date +%F))"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr)."
    echo "haul: $("$HAUL" --version 2>/dev/null || echo '?'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo "PostgreSQL: $("$PG/postgres" --version), fsync on. Command: \`ONLY=$ONLY Benchmarks/workers.sh\`"
    echo
} >"$report"

if want claims; then
    log "building haul-worker-benchmark"
    HAUL_BENCHMARKS=1 swift build "${BENCH_BUILD_FLAGS[@]}" --product haul-worker-benchmark >"$work/build.log" 2>&1 ||
        { tail -n 30 "$work/build.log" >&2; die "the benchmark did not build"; }
    bench=$(HAUL_BENCHMARKS=1 swift build "${BENCH_BUILD_FLAGS[@]}" --show-bin-path)/haul-worker-benchmark
    log "claims: $CLAIM_COUNT jobs, 1, 2, 4, 8 workers"
    {
        echo "## Claim and complete, no transfer ($CLAIM_COUNT jobs, up to 16 claimed at a time per worker)"
        echo
        "$bench" "$ADMIN" "$CLAIM_COUNT" 16 1 2 4 8
        echo
    } >>"$report"
fi

if want downloads; then
    www=$work/www prefix=$work/nginx
    mkdir -p "$www" "$prefix/tmp"
    head -c "$(numfmt --from=iec "$FILE_SIZE")" /dev/urandom >"$www/file.bin"
    chmod -R a+rX "$www"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    nginx_pid_file=$prefix/nginx.pid
    cat >"$prefix/nginx.conf" <<EOF
worker_processes 1;
pid $nginx_pid_file;
error_log $prefix/error.log warn;
events { worker_connections 1024; }
http {
$(nginx_http_basics "$prefix")
    server {
        listen 127.0.0.1:$port;
        root $www;
        # Without sendfile: with it nginx sends up to 2 MiB at once before it waits, and a
        # response runs well over its limit.
        location /f/ { sendfile off; limit_rate $RATE; try_files /file.bin =404; }
    }
}
EOF
    nginx -c "$prefix/nginx.conf" -p "$prefix" -e "$prefix/error.log"
    for _ in {1..50}; do curl -sf -o /dev/null "http://127.0.0.1:$port/f/x" && break; sleep 0.1; done
    for i in $(seq 1 "$FILES"); do echo "http://127.0.0.1:$port/f/$i.bin"; done >"$work/list.txt"
    rate_bytes=$(numfmt --from=iec "${RATE^^}")
    bytes=$(($(numfmt --from=iec "$FILE_SIZE") * FILES))
    {
        echo "## Downloads: $FILES files of $FILE_SIZE, nginx limit_rate $RATE per response, \`haul worker -j 2\` each"
        echo
        echo "| workers | seconds | MiB/s | ideal MiB/s (2 × $RATE × workers) | of ideal | scaling vs 1 worker |"
        echo "|---|---|---|---|---|---|"
    } >>"$report"
    base=
    for workers in 1 2 4; do
        db=haul_dl_$workers
        sql postgres "CREATE DATABASE $db" >/dev/null
        queue="postgres://postgres@/$db?host=$work/pg&port=5439"
        "$HAUL" get --queue "$queue" -i "$work/list.txt" >/dev/null
        dir=$work/out-$workers
        mkdir -p "$dir"
        start=$(date +%s.%N)
        worker_pids=()
        for _ in $(seq 1 "$workers"); do
            "$HAUL" worker --queue "$queue" -j 2 -d "$dir" 2>>"$work/workers.log" &
            worker_pids+=($!)
        done
        until [[ $(sql "$db" "SELECT count(*) FROM haul_jobs WHERE state = 'completed'") == "$FILES" ]]; do sleep 0.1; done
        end=$(date +%s.%N)
        for p in "${worker_pids[@]}"; do kill -TERM "$p"; wait "$p" || true; done
        worker_pids=()
        [[ $(find "$dir" -type f -name '*.bin' | wc -l) == "$FILES" ]] || die "$workers workers: files missing"
        seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
        mibs=$(awk -v s="$seconds" -v b="$bytes" 'BEGIN { printf "%.2f", b / 1048576 / s }')
        ideal=$(awk -v r="$rate_bytes" -v w="$workers" 'BEGIN { printf "%.2f", 2 * r * w / 1048576 }')
        base=${base:-$mibs}
        log "downloads: $workers workers, $seconds s, $mibs MiB/s"
        echo "| $workers | $seconds | $mibs | $ideal | $(awk -v m="$mibs" -v i="$ideal" 'BEGIN { printf "%.2f", m / i }') | $(awk -v m="$mibs" -v b="$base" 'BEGIN { printf "%.2f×", m / b }') |" >>"$report"
    done
    echo >>"$report"
fi

mkdir -p "$RESULTS_DIR"
cp "$report" "$RESULTS_DIR/workers-$(date +%F).md"
cat "$report"
log "report: $RESULTS_DIR/workers-$(date +%F).md"
