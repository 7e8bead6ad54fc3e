#!/usr/bin/env bash
# Benchmarks/per-file-counts.sh: what one small download costs Haul in countable events,
# which, unlike times, do not move with the machine's load: retains, object allocations
# and task enqueues (probes on the Swift runtime's entry points in the binary), and futex
# calls and system calls (strace -c -f). One run of `haul get -i LIST -j 16 --per-host 16`
# on COUNT (5,000) files of 16 KiB from nginx on 127.0.0.1, on tmpfs: workload 3 of
# compare.sh, counted instead of timed. With AHC_BIN, the same counts for the client floor
# (`haul-client-baseline` in MODE=journal, see ClientBaseline/main.swift) on the same list.
#
# Usage (root: probes need it; perf and strace are installed if missing):
#   HAUL_BIN=path/to/haul Benchmarks/per-file-counts.sh
#   HAUL_BIN=… AHC_BIN=path/to/haul-client-baseline COUNT=2000 Benchmarks/per-file-counts.sh
#
# Both binaries must be built with the Swift runtime linked in (--static-swift-stdlib, as
# scripts/install.sh and lib.sh build Haul): the probes go on the runtime's functions in the
# binary itself. A counter that cannot be taken is printed as "–" with the reason.
#
# Compare two builds by running it for each: retains and allocations per file move with the
# code, hardly with the machine; task enqueues and futex calls a little with scheduling too.
# (Timings of the same workload: compare.sh.)
set -euo pipefail
export LC_ALL=C
umask 022

CALLER_DIR=$PWD
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=Benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"

COUNT=${COUNT:-5000}
HAUL=$(haul_binary)
AHC=${AHC_BIN:-}
if [[ -n $AHC && $AHC != /* ]]; then AHC=$CALLER_DIR/$AHC; fi

log() { printf '[per-file-counts %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

need=()
command -v perf >/dev/null || need+=(linux-perf)
command -v strace >/dev/null || need+=(strace)
command -v nginx >/dev/null || need+=(nginx)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

WORK=$(mktemp -d /dev/shm/haul-counts.XXXXXX)
chmod 755 "$WORK" # nginx's workers read the corpus as another user
PROBES=()
cleanup() {
    if [[ -s $WORK/nginx/nginx.pid ]]; then kill -QUIT "$(<"$WORK/nginx/nginx.pid")" 2>/dev/null || true; fi
    for probe in "${PROBES[@]}"; do perf probe -q -d "$probe" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# The corpus and its list.
mkdir -p "$WORK/www/small" "$WORK/nginx/tmp"
head -c $((COUNT * 16384)) /dev/urandom | split -b 16384 -a 6 -d --additional-suffix=.bin - "$WORK/www/small/f"
PORT=$((20000 + RANDOM % 40000))
for file in "$WORK"/www/small/*.bin; do printf 'http://127.0.0.1:%s/small/%s\n' "$PORT" "${file##*/}"; done >"$WORK/list.txt"
cat >"$WORK/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
events { worker_connections 1024; }
http {
$(nginx_http_basics "$WORK/nginx")
    server { listen 127.0.0.1:$PORT; root $WORK/www; }
}
CONF
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log"
for _ in {1..50}; do [[ -s $WORK/nginx/nginx.pid ]] && break; sleep 0.1; done
[[ -s $WORK/nginx/nginx.pid ]] || { log "nginx did not start: $(cat "$WORK/nginx/error.log")"; exit 1; }

# Probes on the runtime's functions in BINARY, named after NAME; sets EVENTS to their event
# names, or empties it when the binary does not hold the runtime.
EVENTS=()
add_probes() {
    local name=${1//[^a-zA-Z0-9]/_} binary=$2 function address
    EVENTS=()
    for function in swift_retain swift_allocObject swift_task_enqueueGlobal; do
        address=$(nm "$binary" 2>/dev/null | awk -v f="$function" '$3 == f { found = $1 } END { print found }')
        if [[ -z $address ]]; then EVENTS=(); return 0; fi
        perf probe -q -d "probe_counts:${name}_$function" 2>/dev/null || true
        if ! perf probe -q -x "$binary" -a "probe_counts:${name}_$function=0x$address" >/dev/null 2>&1; then
            EVENTS=()
            return 0
        fi
        PROBES+=("probe_counts:${name}_$function")
        EVENTS+=("probe_counts:${name}_$function")
    done
}

# Runs the command for NAME once under perf stat (its probes) and once under strace -c -f,
# each on a fresh output directory and journal; prints one Markdown row per file.
count() {
    local name=$1 binary=$2
    shift 2
    local perf_out strace_out retains="–" allocations="–" enqueues="–" futex syscalls
    add_probes "$name" "$binary"
    run() {
        rm -rf "$WORK/out" "$WORK/journal"
        mkdir -p "$WORK/out" "$WORK/journal"
        "$@" || { log "$name: exited with status $?: its counts are not comparable"; return 0; }
    }
    if ((${#EVENTS[@]} == 3)); then
        perf_out=$WORK/$name.perf
        local joined
        joined=$(IFS=,; printf '%s' "${EVENTS[*]}")
        run perf stat -x, -o "$perf_out" -e "$joined" "$@" >/dev/null
        retains=$(awk -F, -v n="$COUNT" '/_swift_retain/ { printf "%.0f", $1 / n }' "$perf_out")
        allocations=$(awk -F, -v n="$COUNT" '/_swift_allocObject/ { printf "%.0f", $1 / n }' "$perf_out")
        enqueues=$(awk -F, -v n="$COUNT" '/_swift_task_enqueueGlobal/ { printf "%.1f", $1 / n }' "$perf_out")
    else
        log "$name: no Swift runtime in $binary to probe (build it with --static-swift-stdlib); runtime counts skipped"
    fi
    strace_out=$WORK/$name.strace
    run strace -f -c -o "$strace_out" "$@" >/dev/null
    futex=$(awk -v n="$COUNT" '$NF == "futex" { printf "%.1f", $4 / n }' "$strace_out")
    syscalls=$(awk -v n="$COUNT" '$NF == "total" { printf "%.1f", $4 / n }' "$strace_out")
    [[ $(find "$WORK/out" -type f | wc -l) -eq $COUNT ]] || log "$name: the last run did not leave $COUNT files"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$retains" "$allocations" "$enqueues" "$futex" "$syscalls"
}

log "$COUNT files of 16 KiB from nginx on 127.0.0.1:$PORT, tmpfs ($WORK)"
printf '| per file | retains | allocations | global task enqueues | futex calls | system calls |\n'
printf '|---|---|---|---|---|---|\n'
count haul "$HAUL" "$HAUL" get -i "$WORK/list.txt" -d "$WORK/out" -q --journal "$WORK/journal/journal.sqlite" -j 16 --per-host 16
if [[ -n $AHC ]]; then
    count ahc-journal "$AHC" env MODE=journal JOURNAL="$WORK/journal/baseline.sqlite" "$AHC" "$WORK/list.txt" "$WORK/out" 16
fi
