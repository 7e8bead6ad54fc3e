#!/usr/bin/env bash
# Benchmarks/rate-limit.sh: how closely a download keeps to a rate limit. Haul
# (`haul get --limit-rate`), curl (`--limit-rate`), wget2 (`--limit-rate`) and aria2c
# (`--max-download-limit`) each download one file from nginx on 127.0.0.1 at each limit
# of LIMITS (default "100K 1M 10M", bytes per second, K = 1024 and M = 1024 K as all four
# tools read them). The file is limit × (DURATION + 4) bytes, and at least MIN_SIZE (16
# MiB: curl 7.88 reads up to 100 buffers of 100 KiB, about 10 MiB, before its limit first
# holds it back, and would otherwise be done with the 1.2 MiB file of 100K at once), so a
# download that keeps to its limit is still running when it is stopped, DURATION seconds
# (default 8) after its first byte, with SIGTERM (SIGKILL 3 s later if it is still there).
# A tool that ends by itself before then is reported so, measured up to its end, its last
# count taken from the bytes it wrote.
#
# What is sampled, and why: nginx logs nothing per byte, so the measuring is done on the
# client's side, every 0.1 s (times from bash's EPOCHREALTIME, no fork). The output file's
# size will not do (aria2c writes in steps of 1 MiB, Haul into NAME.haul-partial, and the
# tools buffer differently), and neither will the process's rchar in /proc/PID/io: it
# counts read() and pread() only, and curl and aria2c take their data with recv(), so
# their rchar stays flat while they download. What is sampled instead is the socket, with
# `ss -ti` (tcp_info of every connection from the machine to nginx's port; only the tool
# under test has any): bytes_received (all the payload the kernel took in, in order)
# minus Recv-Q (what of it still waits in the receive buffer) is exactly how many bytes
# the tool has read from its socket, whichever way it reads or writes them. A connection
# that closes keeps its last count. A rate limiter works by reading no faster than its
# rate, so these are the bytes it let through; what the kernel took in on the wire is
# kept too ("on the wire" in the per-run table): it can run ahead by at most the receive
# buffer.
#
# From the samples, with t = 0 at the first sample that sees a byte read (polled every
# 10 ms until then, so the tool's start-up does not count against it):
#   mean rate / limit         the slope of the least-squares line through the samples from
#                             t = 1 s to the last, / limit. (The difference of the end points
#                             is in the per-run table; it swings by a whole step for a tool
#                             that reads in steps, as aria2c does once a second.)
#   worst 1 s, 2 s window     every window of 1 s (2 s) starting at t = 1 s, 1.1 s, ... and
#                             ending by the last sample; bytes are interpolated linearly
#                             between samples. The one whose rate / limit is farthest from 1
#                             (|rate / limit − 1|), as rate / limit: below 1 a stall, above
#                             1 a burst.
#   initial burst (KiB)       bytes read by t = 0.5 s, minus limit × 0.5 s: what came in
#                             ahead of the limit at the start. (The per-run table also has
#                             the most the tool was ever ahead, max of bytes(t) − limit × t,
#                             which catches a burst that comes after 0.5 s.)
#   CPU (% of a core)         utime + stime of the process (/proc/PID/stat, every thread),
#                             last sampled just before the SIGTERM, over the wall time from
#                             its start to then; its seconds are shown too.
# Each tool and limit is run RUNS times, interleaved (run 1 of every limit and tool, then
# run 2 ...), so a burst of background load hits every tool alike; the table shows the
# median of each number over the runs.
#
# The commands (Haul with a journal of its own for every run, so nothing is resumed):
#   haul get -q --journal SCRATCH/haul-N.sqlite -d OUT -x 1 --limit-rate 100K URL
#   curl -s -o OUT/NAME --limit-rate 100K URL
#   wget2 -q -O OUT/NAME --limit-rate=100k URL
#   aria2c -q -x1 -s1 --max-download-limit=100K --allow-overwrite=true
#          --auto-file-renaming=false --file-allocation=none -d OUT -o NAME URL
# A tool without the option (Haul before --limit-rate, Debian 12's wget2 1.99.1) gets rows
# saying so; one that is not installed and cannot be installed from Debian gets rows saying
# "not installed". Output (and Haul's journal) goes to SCRATCH, a directory on /dev/shm
# (tmpfs) when there is one, so the disk stays out of it.
#
# Knobs (environment):
#   RUNS        runs of every tool and limit, and of every workload (default 1). A run takes
#               about DURATION + 1 s per tool and limit: 4 tools × 3 limits × 8 s is about 2
#               minutes (wget2, without a limit, takes none).
#   DURATION    seconds of download measured per run (default 8; at least 2). Below about 6
#               the mean of a tool that reads in steps of a second (aria2c) is rough: a
#               fit over a few steps swings by tens of percent. Short runs test the plumbing.
#   LIMITS      the limits, as curl writes them (default "100K 1M 10M").
#   MIN_SIZE    the smallest file downloaded (default 16M; 0 for exactly limit × (DURATION + 4)).
#   ONLY_TOOLS  which tools, of "haul curl wget2 aria2c" (the default); "none" skips the
#               comparison and runs only the workloads below.
#   HAUL_WORKLOADS  which of Haul's own workloads (below) run after the comparison, of
#               "global small change idle" (the default); "none" for none.
#   SMALL_FILES files in the small workload (default 2000).  SMALL_TOOLS: the tools that
#               download them, of "haul curl aria2c" (the default).
#   IDLE_DURATION  seconds the idle workload runs (default 20; CPU over all but the first 5).
#   CHANGE_AT   seconds after the first byte at which the change workload lowers the limit
#               (default 4); it runs 2 × CHANGE_AT + 1 s in all.
#   HAUL_BIN    a haul binary to use; without it haul is built in release into .build-bench.
#   RESULTS_DIR where the report goes (default Benchmarks/results).
#   NOTE        a line added to the report.  KEEP_WORK=1 keeps the samples and logs.
#
# Haul's own workloads (HAUL_WORKLOADS), after the comparison, for the issue's accuracy
# targets. nginx serves every /g/N.bin as one file, of 4 MiB × (DURATION + 4) and at least
# MIN_SIZE and (11 × CHANGE_AT + 16) MiB, and every /s/N.bin as one file of 16 KiB, so each
# URL is a download of its own.
# Each runs RUNS times; every run is a column of its table.
#   global  8 downloads at once, /g/1.bin ... /g/8.bin, under one overall limit, for DURATION s
#           after the first byte, sampled every 0.1 s as above, per connection. nginx's
#           access log (client port, URL, and each request's start and end) tells which URL a
#           connection was fetching at each sample: a download limited to its share of 512
#           KiB/s is fetched in paced requests of 32 KiB, on kept-alive connections it may
#           share with the others one request after another:
#             haul get -q --journal J -d OUT -j 8 --per-host 8 -x 1 --max-overall-rate 4M URL...
#           Reported: the total's fitted mean from t = 1 s / 4 MiB/s (target 0.95 to 1.05),
#           its worst 2 s window / 4 MiB/s, and the slowest download's fitted mean / its fair
#           share of 512 KiB/s (target at least 0.5).
#   small   SMALL_FILES files of 16 KiB from a list, the wall time of the whole command (from
#           its start to its exit) / the ideal, files × 16 KiB / 2 MiB/s (15.6 s for 2,000;
#           target 0.95 to 1.05):
#             haul get -q --journal J -d OUT -j 16 --per-host 16 --max-overall-rate 2M -i LIST
#           and, for comparison, curl (its --limit-rate holds each transfer, not all together,
#           so it is not held to 2 MiB/s overall) and aria2c (an overall limit, like Haul's):
#             curl -s --parallel --parallel-max 16 --limit-rate 2M --output-dir OUT --remote-name-all -K CONFIG
#             aria2c -q -j 16 --max-overall-download-limit=2M --allow-overwrite=true
#                    --auto-file-renaming=false --file-allocation=none -d OUT -i LIST
#   change  one download of /g/1.bin from `haul serve` (POST /api/v1/downloads with
#           maxBytesPerSecond 10M; no CLI command changes a running download's limit), lowered
#           with PATCH /api/v1/downloads/ID {"maxBytesPerSecond": 1M} CHANGE_AT s after its
#           first byte, and sampled until CHANGE_AT s after that. Reported: the mean before /
#           10 MiB/s, the mean from 1 s after the change / 1 MiB/s, the bytes read ahead of
#           1 MiB/s × (time since the change) at most after it, and the bytes read in the 0.5 s
#           after the change (512 KiB at the new limit, 5 MiB at the old). (The service splits a file
#           of 16 MiB or more over up to 4 connections, which share the download's budget: all
#           are summed.) No target is set for it here. A service without speed limits (no
#           maxBytesPerSecond in GET /api/v1/settings) gets a row saying so.
#   idle    16 downloads each held to 10 KiB/s, for IDLE_DURATION s from the start:
#             haul get -q --journal J -d OUT -j 16 --per-host 16 -x 1 --limit-rate 10K URL...
#           Reported: the process's CPU (utime + stime of every thread) from 5 s after its
#           start to the end, as % of one core (target under 2%), and the bytes written
#           meanwhile (the sizes of the .haul-partial files) / 16 × 10 KiB/s, to show that all of
#           them were running; the bytes read from the sockets say little here, as SwiftNIO
#           reads up to 256 KiB at a time, 25 s of 10 KiB/s, and Haul writes in steps of 64 KiB.
# The workloads take about a minute (global 10 s, small 35 s, change 10 s, idle 20 s): a
# default run took 2.5 minutes on 2 cores, 77 s of it the comparison.
#
# The report goes to standard output and to Benchmarks/results/rate-limit-YYYY-MM-DD.md.
#
# Usage (from anywhere; needs root or sudo only to install missing tools):
#   Benchmarks/rate-limit.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=3 Benchmarks/rate-limit.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=1 DURATION=3 LIMITS="100K 1M" ONLY_TOOLS="haul curl" Benchmarks/rate-limit.sh
#   HAUL_BIN=.build-bench/release/haul ONLY_TOOLS=none HAUL_WORKLOADS="global idle" Benchmarks/rate-limit.sh
set -euo pipefail
export LC_ALL=C
umask 022

CALLER_DIR=$PWD
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"
# shellcheck source=Benchmarks/lib.sh
source "$SCRIPT_DIR/lib.sh"

RUNS=${RUNS:-1}
DURATION=${DURATION:-8}
LIMITS=${LIMITS:-"100K 1M 10M"}
MIN_SIZE=${MIN_SIZE:-16M}
ONLY_TOOLS=${ONLY_TOOLS:-"haul curl wget2 aria2c"}
HAUL_WORKLOADS=${HAUL_WORKLOADS:-"global small change idle"}
SMALL_FILES=${SMALL_FILES:-2000}
SMALL_TOOLS=${SMALL_TOOLS:-"haul curl aria2c"}
IDLE_DURATION=${IDLE_DURATION:-20}
CHANGE_AT=${CHANGE_AT:-4}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}
NOTE=${NOTE:-}
PATH=$PATH:/usr/sbin # nginx and ss live in /usr/sbin on some systems

log() { printf '[rate-limit %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $DURATION =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "DURATION must be a number of seconds"
DURATION_US=$(awk -v d="$DURATION" 'BEGIN { printf "%d", d * 1000000 }')
((DURATION_US >= 2000000)) || die "DURATION must be at least 2 (the measuring starts at t = 1 s)"
MIN_BYTES=$(numfmt --from=iec "${MIN_SIZE^^}") || die "MIN_SIZE=$MIN_SIZE is not a size like 16M"
read -r -a LIMIT_LIST <<<"$LIMITS"
((${#LIMIT_LIST[@]})) || die "LIMITS is empty"
declare -A LIMIT_BYTES=()
for limit in "${LIMIT_LIST[@]}"; do
    [[ $limit =~ ^[1-9][0-9]*[KkMm]?$ ]] || die "limit '$limit' is not like 100K, 1M or 500000"
    LIMIT_BYTES[$limit]=$(numfmt --from=iec "${limit^^}")
done
TOOLS=()
for tool in $ONLY_TOOLS; do
    case $tool in
    haul | curl | wget2 | aria2c) TOOLS+=("$tool") ;;
    none) ;;
    *) die "ONLY_TOOLS: unknown tool '$tool'" ;;
    esac
done
want_tool() { [[ " ${TOOLS[*]} " == *" $1 "* ]]; }
WORKLOADS=()
for workload in $HAUL_WORKLOADS; do
    case $workload in
    global | small | change | idle) WORKLOADS+=("$workload") ;;
    none) ;;
    *) die "HAUL_WORKLOADS: unknown workload '$workload' (of global, small, change, idle, none)" ;;
    esac
done
want_workload() { [[ " ${WORKLOADS[*]} " == *" $1 "* ]]; }
((${#TOOLS[@]} + ${#WORKLOADS[@]})) || die "nothing to run: ONLY_TOOLS and HAUL_WORKLOADS are both none"
SMALL_TOOL_LIST=()
if want_workload small; then
    for tool in $SMALL_TOOLS; do
        case $tool in haul | curl | aria2c) SMALL_TOOL_LIST+=("$tool") ;; *) die "SMALL_TOOLS: unknown tool '$tool'" ;; esac
    done
    ((${#SMALL_TOOL_LIST[@]})) || die "SMALL_TOOLS is empty"
    [[ $SMALL_FILES =~ ^[1-9][0-9]*$ ]] || die "SMALL_FILES must be a positive integer"
fi
if [[ ! $IDLE_DURATION =~ ^[0-9]+$ ]] || ((IDLE_DURATION < 7)); then
    die "IDLE_DURATION must be a whole number of seconds, at least 7"
fi
if [[ ! $CHANGE_AT =~ ^[0-9]+$ ]] || ((CHANGE_AT < 2)); then
    die "CHANGE_AT must be a whole number of seconds, at least 2"
fi

SUDO=()
if [[ $EUID -ne 0 ]]; then SUDO=(sudo); fi

# ---------------------------------------------------------------------------------------
# Clean-up: every process started and every file written goes on any exit.

WORK="" SCRATCH="" NGINX_PID_FILE="" POLICY_RC_CREATED="" SLEEP_FD=""
BG_PIDS=()
forget_bg() { # PID: no longer needs killing at exit
    local pid kept=()
    for pid in "${BG_PIDS[@]}"; do [[ $pid == "$1" ]] || kept+=("$pid"); done
    BG_PIDS=("${kept[@]}")
}
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    if ((${#BG_PIDS[@]})); then
        sleep 0.3
        for pid in "${BG_PIDS[@]}"; do
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        done
    fi
    if [[ -n $NGINX_PID_FILE && -s $NGINX_PID_FILE ]]; then
        pid=$(<"$NGINX_PID_FILE")
        kill -QUIT "$pid" 2>/dev/null || true
        for _ in {1..50}; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if [[ -n $POLICY_RC_CREATED ]]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; fi
    if [[ -n $SCRATCH && -d $SCRATCH ]]; then rm -rf "$SCRATCH"; fi
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ ${KEEP_WORK:-0} == 1 ]]; then
            rm -rf "$WORK/www"
            log "kept the samples and logs in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
}
trap cleanup EXIT
# A signal ends the script (and so runs cleanup), but never from inside nap_us's `read -t`:
# bash runs the trap there at once while read's timer stays armed, and when that timer
# went off during cleanup, bash crashed (SIGSEGV) and left nginx running. In a nap, the
# signal is noted and acted on when the read returns (naps are cut into steps of 0.1 s).
SIGNALLED="" IN_NAP=0
on_signal() { # STATUS
    SIGNALLED=$1
    if ((!IN_NAP)); then exit "$1"; fi
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# ---------------------------------------------------------------------------------------
# Tools: what is missing is installed from Debian (as compare.sh does). nginx, ss and
# python3 are needed; a download tool that is still missing afterwards gets "not installed"
# rows.

install_tools() {
    local -A package_for=([nginx]=nginx [ss]=iproute2 [python3]=python3 [curl]=curl [wget2]=wget2 [aria2c]=aria2)
    local missing=() tool
    for tool in nginx ss python3 "${TOOLS[@]}" "${SMALL_TOOL_LIST[@]}"; do
        [[ $tool == haul ]] && continue
        [[ " ${missing[*]} " == *" ${package_for[$tool]} "* ]] && continue
        command -v "$tool" >/dev/null 2>&1 || missing+=("${package_for[$tool]}")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $EUID -ne 0 ]] && ! command -v sudo >/dev/null 2>&1; then
        log "missing ${missing[*]}, and no sudo to install them with"
        return 0
    fi
    log "installing ${missing[*]}"
    # Keep nginx's postinst from starting the system service (and taking port 80).
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
        POLICY_RC_CREATED=1
    fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || log "apt-get update failed"
    # One at a time, so a package that cannot be had does not keep the others out.
    for tool in "${missing[@]}"; do
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$tool" >&2 ||
            log "could not install $tool"
    done
    if [[ -n $POLICY_RC_CREATED ]]; then "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d; POLICY_RC_CREATED=""; fi
}
install_tools
for tool in nginx ss python3; do command -v "$tool" >/dev/null 2>&1 || die "$tool is needed"; done

# ---------------------------------------------------------------------------------------
# Haul, release build (a scratch path of its own so it never disturbs .build), and what
# each tool can do.

HAUL="" HAUL_HAS_LIMIT=0 HAUL_HAS_OVERALL=0 HAUL_ONE=()
if want_tool haul || ((${#WORKLOADS[@]})); then
    HAUL=$(haul_binary) || die "no haul to measure"
    # Captured first: `... | grep -q` would fail under pipefail when grep stops reading early.
    haul_help=$("$HAUL" get --help 2>&1) || die "$HAUL get --help failed"
    if [[ $haul_help == *--limit-rate* ]]; then HAUL_HAS_LIMIT=1; fi
    if [[ $haul_help == *--max-overall-rate* ]]; then HAUL_HAS_OVERALL=1; fi
    if [[ $haul_help == *--connections* ]]; then HAUL_ONE=(-x 1); fi # one connection (its default is 4)
fi
WGET2_HAS_LIMIT=0
if want_tool wget2 && command -v wget2 >/dev/null 2>&1; then
    # wget2 1.99.1 documents --limit-rate in its man page but rejects it ("Unknown option").
    wget2_probe=$(wget2 --limit-rate=1k --version 2>&1) || true
    if [[ $wget2_probe != *"Unknown option"* ]]; then WGET2_HAS_LIMIT=1; fi
fi

# Why TOOL has no rows, if it has none.
tool_gap() {
    case $1 in
    haul) ((HAUL_HAS_LIMIT)) || echo "n/a (haul has no --limit-rate)" ;;
    wget2)
        if ! command -v wget2 >/dev/null 2>&1; then echo "not installed"
        elif ((!WGET2_HAS_LIMIT)); then echo "n/a (wget2 $(wget2 --version 2>/dev/null | head -n1 | awk '{ print $3 }') has no --limit-rate)"; fi ;;
    *) command -v "$1" >/dev/null 2>&1 || echo "not installed" ;;
    esac
}

# ---------------------------------------------------------------------------------------
# Work directories, corpus and nginx.

fs_type() { stat -f -c %T "$1"; }
base=${TMPDIR:-/tmp}
if [[ $(fs_type "$base") == tmpfs ]]; then base=/var/tmp; fi
WORK=$(mktemp -d -p "$base" haul-rate-limit.XXXXXX)
chmod 755 "$WORK" # nginx workers (user nobody when started as root) read the corpus here
if [[ -d /dev/shm && $(fs_type /dev/shm) == tmpfs && -w /dev/shm ]]; then
    SCRATCH=$(mktemp -d -p /dev/shm haul-rate-limit.XXXXXX)
else
    SCRATCH=$(mktemp -d -p "$WORK" out.XXXXXX)
fi
WWW=$WORK/www
mkdir -p "$WWW" "$WORK/nginx/tmp" "$WORK/logs" "$WORK/samples"
RAW=$WORK/raw.tsv
: >"$RAW"

declare -A FILE_BYTES=()
if ((${#TOOLS[@]})); then
    for limit in "${LIMIT_LIST[@]}"; do
        FILE_BYTES[$limit]=$(awk -v l="${LIMIT_BYTES[$limit]}" -v d="$DURATION" -v m="$MIN_BYTES" \
            'BEGIN { s = l * (d + 4); if (s < m) s = m; printf "%d", s }')
        if [[ ! -f $WWW/rate-$limit.bin ]]; then
            head -c "${FILE_BYTES[$limit]}" /dev/urandom >"$WWW/rate-$limit.bin"
        fi
    done
fi
# The workloads' files: every /g/N.bin is big.bin, every /s/N.bin small.bin (nginx's
# try_files). big.bin outlasts global (4 MiB/s for DURATION + 4 s) and change (10 MiB/s for
# CHANGE_AT + 1 s, then 1 MiB/s for CHANGE_AT + 1 s).
BIG_BYTES=0 SMALL_BYTES=16384
if ((${#WORKLOADS[@]})); then
    BIG_BYTES=$(awk -v d="$DURATION" -v c="$CHANGE_AT" -v m="$MIN_BYTES" \
        'BEGIN { s = 4 * 1048576 * (d + 4); t = 1048576 * (11 * c + 16); if (t > s) s = t; if (m > s) s = m; printf "%d", s }')
    head -c "$BIG_BYTES" /dev/urandom >"$WWW/big.bin"
    head -c "$SMALL_BYTES" /dev/urandom >"$WWW/small.bin"
fi
echo ok >"$WWW/ping.txt" # what start_nginx asks for
chmod -R a+rX "$WWW"
cat "$WWW"/* >/dev/null # into the page cache
if ((${#TOOLS[@]})); then
    log "corpus: $(for l in "${LIMIT_LIST[@]}"; do printf '%s: %s bytes; ' "$l" "${FILE_BYTES[$l]}"; done)"
fi
file_sizes=$(for l in "${LIMIT_LIST[@]}"; do printf '%s%s: %s MiB' "${sep:-}" "$l" \
    "$(awk -v b="${FILE_BYTES[$l]:-0}" 'BEGIN { printf "%.1f", b / 1048576 }')"; sep=", "; done)

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
start_nginx() {
    local conf=$WORK/nginx/nginx.conf prefix=$WORK/nginx
    NGINX_PID_FILE=$prefix/nginx.pid
    for _ in {1..20}; do
        PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        port_free "$PORT" || continue
        cat >"$conf" <<EOF
worker_processes 1;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 1024; }
http {
$(nginx_http_basics "$prefix")
    log_format ports '\$remote_port \$request_uri \$status \$bytes_sent \$msec \$request_time';
    server {
        listen 127.0.0.1:$PORT;
        root $WWW;
        location /g/ { try_files /big.bin =404; access_log $WORK/logs/nginx-g.log ports; }
        location /s/ { try_files /small.bin =404; }
    }
}
EOF
        if nginx -c "$conf" -p "$prefix" -e "$prefix/error.log" 2>>"$prefix/start.log"; then
            for _ in {1..50}; do [[ -s $NGINX_PID_FILE ]] && break; sleep 0.1; done
            if curl -sf -o /dev/null "http://127.0.0.1:$PORT/ping.txt" 2>/dev/null ||
                python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1]).read(1)' \
                    "http://127.0.0.1:$PORT/ping.txt" 2>/dev/null; then
                return 0
            fi
            if [[ -s $NGINX_PID_FILE ]]; then kill -QUIT "$(<"$NGINX_PID_FILE")" 2>/dev/null || true; sleep 0.5; fi
        fi
    done
    cat "$prefix/start.log" "$prefix/error.log" >&2 2>/dev/null || true
    die "nginx did not start"
}
start_nginx
BASE=http://127.0.0.1:$PORT
log "nginx on $BASE"

# ---------------------------------------------------------------------------------------
# Sampling helpers, none of which forks except for ss.

# A sleep without a fork: read with a timeout from a FIFO that never gets data.
mkfifo "$WORK/never"
exec {SLEEP_FD}<>"$WORK/never"
now_us() { local t=$EPOCHREALTIME; REPLY=$((10#${t/./})); } # EPOCHREALTIME has 6 decimals
nap_us() { # MICROSECONDS, in steps of at most 0.1 s (see on_signal)
    local deadline step timeout
    (($1 > 0)) || return 0
    now_us; deadline=$((REPLY + $1))
    while [[ -z $SIGNALLED ]]; do
        now_us; step=$((deadline - REPLY))
        ((step > 0)) || break
        ((step <= 100000)) || step=100000
        printf -v timeout '0.%06d' "$step"
        IN_NAP=1
        read -r -t "$timeout" -u "$SLEEP_FD" _ || true
        IN_NAP=0
    done
    if [[ -n $SIGNALLED ]]; then exit "$SIGNALLED"; fi
}

# The process's state letter, or nothing once it is gone; a zombie (Z) has exited.
proc_fields() { # PID: sets PF (the fields of /proc/PID/stat after the command name)
    local line
    PF=()
    { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
    read -r -a PF <<<"${line##*) }"
}
running() { proc_fields "$1" && [[ ${PF[0]} != Z && ${PF[0]} != X ]]; }

# Every connection from here to nginx's port (only the tool under test has one): per local
# port, bytes read by the tool (bytes_received − Recv-Q) and bytes received by the kernel.
# Sets READ_TOTAL and RECV_TOTAL, summed over every connection seen in this run.
declare -A SOCK_READ=() SOCK_RECV=()
SS_HEAD_RE='^([A-Za-z-]+[[:space:]]+)?([0-9]+)[[:space:]]+[0-9]+[[:space:]]+[^[:space:]]+:([0-9]+)[[:space:]]'
SS_BYTES_RE='bytes_received:([0-9]+)'
sample_sockets() {
    local out line port="" queued=0 p
    out=$(ss -tinH state established state close-wait dst "127.0.0.1:$PORT" 2>/dev/null) || true
    while IFS= read -r line; do
        if [[ $line =~ $SS_HEAD_RE ]]; then
            queued=${BASH_REMATCH[2]} port=${BASH_REMATCH[3]}
        elif [[ -n $port && $line =~ $SS_BYTES_RE ]]; then
            SOCK_RECV[$port]=${BASH_REMATCH[1]}
            SOCK_READ[$port]=$((BASH_REMATCH[1] - queued))
            port=""
        fi
    done <<<"$out"
    READ_TOTAL=0 RECV_TOTAL=0
    for p in "${!SOCK_RECV[@]}"; do
        READ_TOTAL=$((READ_TOTAL + SOCK_READ[$p]))
        RECV_TOTAL=$((RECV_TOTAL + SOCK_RECV[$p]))
    done
}

# One sample: "microseconds since launch, bytes read, bytes received, CPU ticks" to SAMPLES.
# The time is the middle of the ss call.
CPU_TICKS=0
take_sample() { # PID LAUNCH_US
    local before
    now_us; before=$REPLY
    sample_sockets
    now_us
    SAMPLE_US=$(((before + REPLY) / 2 - $2))
    if proc_fields "$1" && ((${#PF[@]} > 12)); then CPU_TICKS=$((PF[11] + PF[12])); fi
    printf '%d %d %d %d\n' "$SAMPLE_US" "$READ_TOTAL" "$RECV_TOTAL" "$CPU_TICKS" >>"$SAMPLES"
}

tool_cmd() { # TOOL LIMIT OUT N -> CMD
    local tool=$1 limit=$2 out=$3 n=$4 url=$BASE/rate-$2.bin name=rate-$2.bin
    case $tool in
    haul) CMD=("$HAUL" get -q --journal "$SCRATCH/haul-$n.sqlite" -d "$out" "${HAUL_ONE[@]}" --limit-rate "$limit" "$url") ;;
    curl) CMD=(curl -s -o "$out/$name" --limit-rate "$limit" "$url") ;;
    wget2) CMD=(wget2 -q -O "$out/$name" "--limit-rate=${limit,,}" "$url") ;;
    aria2c) CMD=(aria2c -q -x1 -s1 "--max-download-limit=$limit" --allow-overwrite=true --auto-file-renaming=false
        --file-allocation=none -d "$out" -o "$name" "$url") ;;
    esac
}

# The arithmetic over one run's samples: prints, tab-separated, mean (fitted), worst 1 s,
# worst 2 s (ratios to the limit), burst KiB (read), burst KiB (on the wire), CPU s, CPU %,
# bytes read, mean (end points, a ratio), most ahead of limit × t (KiB); "-" where there are
# too few samples.
cat >"$WORK/analyze.py" <<'PY'
import sys
path, t0_us, limit, tck, exited = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
# A sample: microseconds since the launch, bytes read, bytes received, CPU ticks.
rows = [tuple(int(x) for x in line.split()) for line in open(path) if line.strip()]
ts = [(r[0] - t0_us) / 1e6 for r in rows]
read = [r[1] for r in rows]
recv = [r[2] for r in rows]
end = ts[-1]

def at(values, t):  # a cumulative count at time t, interpolated linearly between samples
    if t <= ts[0]:
        return values[0]
    for i in range(1, len(ts)):
        if ts[i] >= t:
            a, b = ts[i - 1], ts[i]
            return values[i - 1] + (values[i] - values[i - 1]) * ((t - a) / (b - a) if b > a else 1.0)
    return values[-1]  # after the last sample: only for a tool that has exited

def worst(width):  # the window of `width` s from t = 1 s on whose rate is farthest from the limit
    best, k = None, 0
    while 1.0 + k / 10 + width <= end + 1e-9:
        start = 1.0 + k / 10
        ratio = (at(read, start + width) - at(read, start)) / width / limit
        if best is None or abs(ratio - 1) > abs(best - 1):
            best = ratio
        k += 1
    return best

def fmt(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"

def slope(t_from):  # least-squares rate through the samples from t_from on
    pts = [(t, b) for t, b in zip(ts, read) if t >= t_from]
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mb = sum(b for _, b in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    return sum((t - mt) * (b - mb) for t, b in pts) / var if var > 0 else None

burst = wire = mean = ends = None
if end >= 0.5 or exited:
    burst = (at(read, 0.5) - limit * 0.5) / 1024
    wire = (at(recv, 0.5) - limit * 0.5) / 1024
if end >= 1.5:
    fit = slope(1.0)
    mean = None if fit is None else fit / limit
    ends = (at(read, end) - at(read, 1.0)) / (end - 1.0) / limit
ahead = max(b - limit * max(t, 0.0) for t, b in zip(ts, read)) / 1024
cpu_s = rows[-1][3] / tck
wall_s = rows[-1][0] / 1e6  # from the launch to the last sample
cpu_pct = 100 * cpu_s / wall_s if wall_s > 0 else 0.0
print("\t".join([fmt(mean, 3), fmt(worst(1.0), 3), fmt(worst(2.0), 3), fmt(burst, 0), fmt(wire, 0),
                 fmt(cpu_s, 2), fmt(cpu_pct, 1), str(read[-1]), fmt(ends, 3), fmt(ahead, 0)]))
PY

TICKS=$(getconf CLK_TCK)
RUN_N=0
NOTES=()

# record LIMIT TOOL RUN STATUS [mean w1 w2 burst wire cpu_s cpu_pct bytes mean_ends ahead first_byte_s]
record() {
    local IFS=$'\t'
    echo "$*" >>"$RAW"
}

# Bytes in the output directory (not aria2c's control file): what a tool that has exited
# has written, for its last sample.
out_bytes() { find "$1" -type f ! -name '*.aria2' -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

measure() { # TOOL LIMIT RUN
    local tool=$1 limit=$2 run=$3 gap out logfile pid launch t0="" last_zero=0 stop rc=0 status=ok k next first_s
    local exited=0 metrics written after
    gap=$(tool_gap "$tool")
    if [[ -n $gap ]]; then record "$limit" "$tool" "$run" "$gap"; return; fi
    RUN_N=$((RUN_N + 1))
    out=$SCRATCH/out-$RUN_N
    mkdir -p "$out"
    logfile=$WORK/logs/$tool-$limit-$run.log
    SAMPLES=$WORK/samples/$tool-$limit-$run.txt
    : >"$SAMPLES"
    SOCK_READ=() SOCK_RECV=() CPU_TICKS=0 READ_TOTAL=0 RECV_TOTAL=0
    tool_cmd "$tool" "$limit" "$out" "$RUN_N"
    now_us; launch=$REPLY
    "${CMD[@]}" </dev/null >"$logfile" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    # Until the first byte is read: every 10 ms, for at most 10 s.
    while running "$pid"; do
        take_sample "$pid" "$launch"
        if ((READ_TOTAL > 0)); then t0=$SAMPLE_US; break; fi
        last_zero=$SAMPLE_US
        ((SAMPLE_US < 10000000)) || break
        nap_us 10000
    done
    # Then every 0.1 s on a fixed schedule, until DURATION after the first byte.
    if [[ -n $t0 ]]; then
        k=1
        while running "$pid"; do
            next=$((t0 + k * 100000))
            ((next <= t0 + DURATION_US)) || break
            now_us
            nap_us $((launch + next - REPLY))
            running "$pid" || break
            take_sample "$pid" "$launch"
            k=$((k + 1))
        done
    fi
    now_us; stop=$((REPLY - launch))
    if running "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in {1..60}; do running "$pid" || break; nap_us 50000; done
        if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    else
        exited=1
    fi
    { wait "$pid"; } 2>/dev/null || rc=$?
    forget_bg "$pid"
    if ((exited)); then
        # It ended by itself (finished the file, or failed) before its time was up: its
        # socket is gone, so the last count is taken from what it wrote, when that is more
        # (a tool that read the whole file at once can be gone before the first sample).
        written=$(out_bytes "$out")
        if ((written > READ_TOTAL)); then
            READ_TOTAL=$written
            ((RECV_TOTAL >= READ_TOTAL)) || RECV_TOTAL=$READ_TOTAL
            if [[ -z $t0 ]]; then t0=$last_zero; fi
        fi
        if [[ -n $t0 ]]; then
            printf '%d %d %d %d\n' "$stop" "$READ_TOTAL" "$RECV_TOTAL" "$CPU_TICKS" >>"$SAMPLES"
            after=$(awk -v s="$stop" -v t="$t0" 'BEGIN { printf "%.2f", (s - t) / 1e6 }')
            if ((rc == 0 && READ_TOTAL >= FILE_BYTES[$limit])); then
                status="finished the whole file within $after s of its first byte"
            else
                status="exited by itself (exit $rc) within $after s of its first byte"
            fi
        fi
    fi
    rm -rf "$out" "$SCRATCH/haul-$RUN_N.sqlite"*
    if [[ -z $t0 ]]; then status="no byte read (exit $rc)"; fi
    if [[ $status != ok ]]; then
        local first
        first=$(grep -m1 -v '^\s*$' "$logfile" 2>/dev/null | cut -c1-200 || true)
        NOTES+=("$limit, $tool, run $run: $status${first:+ — \`$first\`}")
        log "$limit $tool run $run: $status"
    fi
    if [[ -z $t0 ]]; then record "$limit" "$tool" "$run" "$status"; return; fi
    metrics=$(python3 "$WORK/analyze.py" "$SAMPLES" "$t0" "${LIMIT_BYTES[$limit]}" "$TICKS" "$exited")
    first_s=$(awk -v t="$t0" 'BEGIN { printf "%.3f", t / 1e6 }')
    record "$limit" "$tool" "$run" "$status" "$metrics" "$first_s"
    log "$limit $tool run $run: $(tr '\t' ' ' <<<"$metrics") (mean fitted, worst 1 s, worst 2 s, burst KiB read, on the wire, CPU s, CPU %, bytes, mean end points, most ahead KiB)"
}

# ---------------------------------------------------------------------------------------
# Run everything: run 1 of every limit and tool, then run 2 ...

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
now_us; T_START=$REPLY
if ((${#TOOLS[@]})); then
    for run in $(seq 1 "$RUNS"); do
        for limit in "${LIMIT_LIST[@]}"; do
            log "run $run/$RUNS: limit $limit"
            for tool in "${TOOLS[@]}"; do measure "$tool" "$limit" "$run"; done
        done
    done
fi
now_us; T_TOTAL=$(((REPLY - T_START) / 1000000))

# ---------------------------------------------------------------------------------------
# Haul's own workloads (HAUL_WORKLOADS): the issue's accuracy targets. Each run appends one
# JSON object to WL_RESULTS; the report makes the tables from them.

WL_RESULTS=$WORK/workloads.jsonl
: >"$WL_RESULTS"
WL_N=0
WL_TOTAL=0
cat >"$WORK/workloads.py" <<'PY'
# The arithmetic of Haul's workloads. Subcommands append one JSON object per run to RESULTS:
#   record RESULTS key=value ...                       (numbers stay numbers)
#   global RESULTS RUN SAMPLES T0 LIMIT N TCK NGINX_LOG EXITED RC LOG LAUNCH (T0 is µs after LAUNCH, a Unix time in µs)
#   change RESULTS RUN SAMPLES T0 PATCH_START PATCH_END FROM TO PATCH_CODE FILE_BYTES
#   idle   RESULTS RUN SAMPLES RATE N TCK EXITED RC LOG
# and `report RESULTS key=value ...` prints the Markdown tables. A sample line: µs since the launch, CPU
# ticks, then port:read:received for every connection seen so far.
import json, sys

def number(v):
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v

def append(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")

def load(path, t0_us):
    rows = []
    for line in open(path):
        f = line.split()
        if not f:
            continue
        ports = {}
        for x in f[2:]:
            p, r, c = x.split(":")
            ports[p] = (int(r), int(c))
        rows.append(((int(f[0]) - t0_us) / 1e6, int(f[1]), ports))
    return rows

def at(ts, values, t):  # a cumulative count at time t, interpolated linearly between samples
    if t <= ts[0]:
        return values[0]
    for i in range(1, len(ts)):
        if ts[i] >= t:
            a, b = ts[i - 1], ts[i]
            return values[i - 1] + (values[i] - values[i - 1]) * ((t - a) / (b - a) if b > a else 1.0)
    return values[-1]

def slope(ts, values, t_from, t_to=float("inf")):  # least-squares rate through the samples in [t_from, t_to]
    pts = [(t, b) for t, b in zip(ts, values) if t_from - 1e-9 <= t <= t_to + 1e-9]
    if len(pts) < 2:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mb = sum(b for _, b in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    return sum((t - mt) * (b - mb) for t, b in pts) / var if var > 0 else None

def worst(ts, values, limit, width, t_from=1.0):  # the window farthest from the limit, as rate / limit
    best, k, end = None, 0, ts[-1]
    while t_from + k / 10 + width <= end + 1e-9:
        start = t_from + k / 10
        ratio = (at(ts, values, start + width) - at(ts, values, start)) / width / limit
        if best is None or abs(ratio - 1) > abs(best - 1):
            best = ratio
        k += 1
    return best

def r3(x, digits=3):
    return None if x is None else round(x, digits)

def cmd_global(a):
    results, run, samples, t0, limit, n, tck, nginx_log, exited, rc, log, launch = a
    origin = (int(launch) + int(t0)) / 1e6  # the samples' t = 0 as a Unix time, as nginx logs it
    limit, n, tck = float(limit), int(n), float(tck)
    rows = load(samples, int(t0))
    ts = [r[0] for r in rows]
    ports = sorted({p for r in rows for p in r[2]})
    # Each download's bytes, from nginx's log ("port uri status bytes end-time duration", one
    # line per request): a download limited to its share is fetched in paced requests of
    # 32 KiB, on kept-alive connections it shares with the others, one request after
    # another, so connections do not tell downloads apart; requests do. A request's bytes
    # are counted as sent evenly from its start to its end (a paced one takes about no
    # time). The total stays the sum over the connections, as the client read it.
    requests = []
    try:
        for line in open(nginx_log):
            f = line.split()
            if len(f) >= 6:
                finish = float(f[4])
                requests.append((f[1], finish - float(f[5]), finish, int(f[3]), f[0]))
    except OSError:
        pass
    series = {}
    for uri, start, finish, sent, _ in requests:
        v = series.setdefault(uri, [0.0] * len(rows))
        for i, r in enumerate(rows):
            t_abs = origin + r[0]
            if t_abs >= finish:
                v[i] += sent
            elif t_abs > start:
                v[i] += sent * (t_abs - start) / (finish - start)
    total = [sum(r[2].get(p, (0, 0))[0] for p in ports) for r in rows]
    fair = limit / n
    per = {d: slope(ts, v, 1.0) for d, v in series.items()}
    rates = sorted((v / fair if v is not None else 0.0) for v in per.values())
    rates += [0.0] * max(0, n - len(rates))  # downloads that never read a byte
    rates.sort()
    fit = slope(ts, total, 1.0)
    cpu_s = rows[-1][1] / tck
    wall = rows[-1][0] + int(t0) / 1e6
    append(results, {
        "workload": "global", "run": int(run), "status": "ok" if exited != "1" else f"exited by itself (exit {rc})",
        "log": log if exited == "1" else "", "seconds": r3(ts[-1], 2),
        "total": r3(fit / limit if fit else None), "worst2": r3(worst(ts, total, limit, 2.0)),
        "worst1": r3(worst(ts, total, limit, 1.0)),
        "burst_kib": r3((at(ts, total, 0.5) - limit * 0.5) / 1024, 0),
        "min_share": r3(rates[0]), "max_share": r3(rates[-1]),
        "shares": [r3(x, 2) for x in rates],
        "downloads": len([d for d, v in series.items() if v[-1] > 0]), "connections": len(ports),
        "mapped": len({r[4] for r in requests}),
        "cpu_pct": r3(100 * cpu_s / wall if wall > 0 else None, 1), "mib": r3(total[-1] / 1048576, 1),
    })

def cmd_change(a):
    results, run, samples, t0, p0, p1, frm, to, code, file_bytes = a
    t0, frm, to = int(t0), float(frm), float(to)
    rows = load(samples, t0)
    ts = [r[0] for r in rows]
    total = [sum(c[0] for c in r[2].values()) for r in rows]
    tc = (int(p0) - t0) / 1e6  # the PATCH's start, s after the first byte
    before = slope(ts, total, 1.0, tc)
    after = slope(ts, total, tc + 1.0)
    base = at(ts, total, tc)
    ahead = max([b - base - to * (t - tc) for t, b in zip(ts, total) if t >= tc] or [0.0])
    # what was read in the half second after the PATCH went out
    half = at(ts, total, tc + 0.5) - base if ts[-1] >= tc + 0.5 else None
    status = "ok"
    if not code.startswith("2"):
        status = f"PATCH /api/v1/downloads/ID answered {code}"
        # Connections that closed before the first sample are not seen, so this is at least what was read.
        status += (f"; by then the sampled connections had read {at(ts, total, tc) / 1048576:.1f} MiB of the "
                   f"{int(file_bytes) / 1048576:.1f} MiB file, {total[0] / 1048576:.1f} MiB of it at the first sample")
    append(results, {
        "workload": "change", "run": int(run), "status": status, "change_at": r3(tc, 2),
        "patch_ms": r3((int(p1) - int(p0)) / 1000, 1), "seconds": r3(ts[-1], 2),
        "before": r3(before / frm if before else None), "after": r3(after / to if after else None),
        "ahead_kib": r3(ahead / 1024, 0), "half_kib": r3(half / 1024, 0) if half is not None else None,
        "connections": len({p for r in rows for p in r[2]}),
    })

def cmd_idle(a):
    results, run, samples, rate, n, tck, exited, rc, log, written_a, written_b = a
    rate, n, tck = float(rate), int(n), float(tck)
    rows = load(samples, 0)
    rec = {"workload": "idle", "run": int(run), "log": log if exited == "1" else ""}
    if len(rows) < 2:
        rec["status"] = f"exited by itself (exit {rc})" if exited == "1" else "too few samples"
        append(results, rec)
        return
    (ta, ca, pa), (tb, cb, pb) = rows[0], rows[-1]
    span = tb - ta
    per = sorted((pb[p][0] - pa.get(p, (0, 0))[0]) / span / rate for p in pb)
    per += [0.0] * max(0, n - len(per))
    per.sort()
    rec.update({
        "status": "ok", "from_s": r3(ta, 2), "to_s": r3(tb, 2),
        "cpu_pct": r3(100 * (cb - ca) / tck / span, 2), "cpu_s": r3((cb - ca) / tck, 2),
        "total": r3(sum(per) / n), "min_share": r3(per[0]), "downloads": len([p for p in pb if pb[p][0] > 0]),
        "written": r3((int(written_b) - int(written_a)) / span / rate / n),
    })
    append(results, rec)

def cmd_record(a):
    append(a[0], {k: (number(v) if k not in ("log", "status", "tool", "workload") else v)
                  for k, v in (x.split("=", 1) for x in a[1:])})

# ----------------------------------------------------------------------------------------
# Report: per workload, one table with the targets, a column per run.

def fmt(x, digits=3, suffix=""):
    return "–" if x is None else f"{x:.{digits}f}{suffix}"

def verdict(ok):
    return "" if ok is None else (" ✓" if ok else " **✗**")

def table(rows_spec, runs):
    heads = ["measure", "target"] + [f"run {r['run']}" for r in runs]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for name, target, cell in rows_spec:
        print(f"| {name} | {target} | " + " | ".join(cell(r) for r in runs) + " |")
    print()

def ok_runs(runs):
    return [r for r in runs if r.get("status") == "ok"]

def status_lines(runs):
    for r in runs:
        if r.get("status") != "ok":
            extra = f" — `{r['log']}`" if r.get("log") else ""
            print(f"- run {r['run']}{' (' + r['tool'] + ')' if 'tool' in r else ''}: {r.get('status')}{extra}")
    if any(r.get("status") != "ok" for r in runs):
        print()

def report(a):
    path = a[0]
    knobs = {k: number(v) for k, v in (x.split("=", 1) for x in a[1:])}
    knobs["small_cmds"] = [knobs[k] for k in ("small_cmd_haul", "small_cmd_curl", "small_cmd_aria2c") if k in knobs]
    items = [json.loads(line) for line in open(path) if line.strip()]
    by = lambda w: [r for r in items if r["workload"] == w]

    if by("global"):
        runs = by("global")
        print(f"### global: {knobs['global_n']} downloads under one overall limit of {knobs['global_rate']}")
        print()
        print(f"`{knobs['global_cmd']}`, {knobs['duration']} s after the first byte, every connection sampled every 0.1 s. "
              f"Fair share: {knobs['global_rate']} / {knobs['global_n']}.")
        print()
        status_lines(runs)
        good = ok_runs(runs) or []
        if good:
            table([
                ("total rate / limit (fitted from t = 1 s)", "0.95 to 1.05",
                 lambda r: fmt(r["total"]) + verdict(None if r["total"] is None else 0.95 <= r["total"] <= 1.05)),
                ("worst 2 s window of the total / limit", "–", lambda r: fmt(r["worst2"])),
                ("worst 1 s window of the total / limit", "–", lambda r: fmt(r["worst1"])),
                ("slowest download / fair share (fitted from t = 1 s)", "≥ 0.5",
                 lambda r: fmt(r["min_share"]) + verdict(r["min_share"] >= 0.5)),
                ("fastest download / fair share", "–", lambda r: fmt(r["max_share"])),
                ("every download / fair share", "–", lambda r: " ".join(f"{x:.2f}" for x in r["shares"])),
                ("initial burst of the total (KiB over limit × 0.5 s)", "–", lambda r: fmt(r["burst_kib"], 0)),
                ("downloads that read (connections the client used; connections in nginx's log)", f"{knobs['global_n']}",
                 lambda r: f"{r['downloads']} ({r['connections']}; {r['mapped']})"),
                ("CPU (% of a core, from the start)", "–", lambda r: fmt(r["cpu_pct"], 1, "%")),
            ], good)

    if by("small"):
        runs = by("small")
        print(f"### small: {knobs['small_files']:,} files of 16 KiB under {knobs['small_rate']} overall")
        print()
        print(f"Ideal: {knobs['small_files']:,} × 16 KiB / {knobs['small_rate']}/s = {knobs['small_ideal']:.2f} s; "
              "the wall time is from the command's start to its exit, start-up included.")
        print()
        print("| tool | run | wall time (s) | / ideal | target | CPU (s) | files complete | note |")
        print("|---|---|---|---|---|---|---|---|")
        for r in runs:
            if "wall_s" not in r:
                print(f"| {r['tool']} | {r['run']} | {r.get('status')} | – | – | – | – | |")
                continue
            ratio = r["wall_s"] / knobs["small_ideal"]
            complete = r["files"] == r["expected"] and r["rc"] == 0 and r["exited"] == 1
            if r["tool"] == "haul":
                target = "0.95 to 1.05"
                mark = verdict(complete and 0.95 <= ratio <= 1.05)
                note = ""
            else:
                target = "–"
                mark = ""
                note = ("per transfer: 2 MiB/s each, not overall" if r["tool"] == "curl"
                        else "overall limit, like Haul's")
            if not complete:
                note = (note + "; " if note else "") + f"exit {r['rc']}" + (" (stopped at the time limit)" if r["exited"] != 1 else "")
                if r.get("log"):
                    note += f": `{r['log']}`"
            print(f"| {r['tool']} | {r['run']} | {r['wall_s']:.2f} | {ratio:.3f}{mark} | {target} | {fmt(r.get('cpu_s'), 2)} | "
                  f"{r['files']:,} / {r['expected']:,} | {note} |")
        print()
        print("Commands:")
        print()
        for c in knobs["small_cmds"]:
            print(f"- `{c}`")
        print()

    if by("change"):
        runs = by("change")
        print(f"### change: one download's limit lowered from {knobs['change_from']} to {knobs['change_to']} while it runs")
        print()
        print(f"Through `haul serve` (no CLI command changes a running download's limit): `{knobs['change_cmd']}`; "
              f"POST /api/v1/downloads with maxBytesPerSecond {knobs['change_from']}, then "
              f"PATCH /api/v1/downloads/ID {{\"maxBytesPerSecond\": {knobs['change_to']}}} {knobs['change_at']} s after the first byte, "
              f"measured for {knobs['change_at']} s more (all the download's connections summed). "
              "The test suite (RateLimitTests) checks that a change takes effect; this measures how fast.")
        print()
        status_lines(runs)
        good = [r for r in runs if "before" in r]
        if good:
            table([
                (f"mean before / {knobs['change_from']} (t = 1 s to the PATCH)", "–", lambda r: fmt(r["before"])),
                (f"mean from 1 s after the PATCH / {knobs['change_to']}", "–", lambda r: fmt(r["after"])),
                (f"most read ahead of {knobs['change_to']} × (time since the PATCH), KiB", "–", lambda r: fmt(r["ahead_kib"], 0)),
                (f"read in the 0.5 s after the PATCH, KiB ({knobs['change_to']}: {knobs['change_to_bytes'] // 2048}, "
                 f"{knobs['change_from']}: {knobs['change_from_bytes'] // 2048})", "–", lambda r: fmt(r["half_kib"], 0)),
                ("PATCH answered within (ms)", "–", lambda r: fmt(r["patch_ms"], 1)),
                ("connections", "–", lambda r: str(r["connections"])),
            ], good)

    if by("idle"):
        runs = by("idle")
        print(f"### idle: {knobs['idle_n']} downloads held to {knobs['idle_rate']} each")
        print()
        print(f"`{knobs['idle_cmd']}`, for {knobs['idle_duration']} s; CPU (utime + stime, every thread) "
              f"from {knobs['idle_skip']} s after the start to the end.")
        print()
        status_lines(runs)
        good = ok_runs(runs)
        if good:
            table([
                (f"CPU, % of one core (over the last {knobs['idle_duration'] - knobs['idle_skip']} s)", "< 2%",
                 lambda r: fmt(r["cpu_pct"], 2, "%") + f" ({fmt(r['cpu_s'], 2)} s)" + verdict(r["cpu_pct"] < 2)),
                (f"bytes written / ({knobs['idle_n']} × {knobs['idle_rate']}/s), same span "
                 "(the content: the responses' heads count against the limit too)", "–", lambda r: fmt(r["written"])),
                (f"bytes read from the sockets / ({knobs['idle_n']} × {knobs['idle_rate']}/s), same span",
                 "–", lambda r: fmt(r["total"])),
                ("connections that read (a kept-alive one carries paced requests of any download)", "–",
                 lambda r: str(r["downloads"])),
            ], good)

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"record": cmd_record, "global": cmd_global, "change": cmd_change, "idle": cmd_idle, "report": report}[cmd](args)
PY

# One sample of every connection to nginx: "µs since LAUNCH, CPU ticks of PID, then
# port:read:received for every connection seen so far in this run" to SAMPLES.
take_port_sample() { # PID LAUNCH_US
    local before p line
    now_us; before=$REPLY
    sample_sockets
    now_us
    SAMPLE_US=$(((before + REPLY) / 2 - $2))
    if proc_fields "$1" && ((${#PF[@]} > 12)); then CPU_TICKS=$((PF[11] + PF[12])); fi
    line="$SAMPLE_US $CPU_TICKS"
    for p in "${!SOCK_READ[@]}"; do line+=" $p:${SOCK_READ[$p]}:${SOCK_RECV[$p]}"; done
    echo "$line" >>"$SAMPLES"
}
# Every 10 ms until a byte is read (at most 10 s): T0, µs from LAUNCH to that sample, or "".
sample_first() { # PID LAUNCH_US
    T0="" SAMPLE_K=1
    while running "$1"; do
        take_port_sample "$1" "$2"
        if ((READ_TOTAL > 0)); then T0=$SAMPLE_US; return 0; fi
        ((SAMPLE_US < 10000000)) || return 0
        nap_us 10000
    done
}
# Then every 0.1 s on the schedule T0 + k × 0.1 s, up to T0 + UNTIL_US, while PID runs.
sample_span() { # PID LAUNCH_US UNTIL_US
    local next
    while running "$1"; do
        next=$((T0 + SAMPLE_K * 100000))
        ((next <= T0 + $3)) || return 0
        now_us
        nap_us $(($2 + next - REPLY))
        running "$1" || return 0
        take_port_sample "$1" "$2"
        SAMPLE_K=$((SAMPLE_K + 1))
    done
}
# SIGTERM (SIGKILL 3 s later) unless PID has ended by itself; EXITED=1 when it had, RC its status.
stop_proc() { # PID
    EXITED=0 RC=0
    if running "$1"; then
        kill -TERM "$1" 2>/dev/null || true
        for _ in {1..60}; do running "$1" || break; nap_us 50000; done
        if running "$1"; then kill -KILL "$1" 2>/dev/null || true; fi
    else
        EXITED=1
    fi
    { wait "$1"; } 2>/dev/null || RC=$?
    forget_bg "$1"
}
# A new run's samples and per-connection counts.
wl_start() { # NAME RUN
    WL_N=$((WL_N + 1))
    SAMPLES=$WORK/samples/$1-$2.txt
    : >"$SAMPLES"
    SOCK_READ=() SOCK_RECV=() CPU_TICKS=0 READ_TOTAL=0 RECV_TOTAL=0
}
wl_record() { python3 "$WORK/workloads.py" record "$WL_RESULTS" "$@"; }
first_line() { grep -m1 -v '^\s*$' "$1" 2>/dev/null | cut -c1-200 || true; }
wl_gap() { # why the workloads cannot run, if they cannot
    if ((!HAUL_HAS_LIMIT || !HAUL_HAS_OVERALL)); then echo "n/a (this haul has no --limit-rate or --max-overall-rate)"; fi
}

GLOBAL_RATE=4M GLOBAL_N=8
wl_global() { # RUN
    local run=$1 out journal logfile pid launch log_from urls=() i gap
    gap=$(wl_gap)
    if [[ -n $gap ]]; then wl_record workload=global run="$run" status="$gap"; return; fi
    wl_start global "$run"
    out=$SCRATCH/out-global-$run journal=$SCRATCH/haul-global-$run.sqlite logfile=$WORK/logs/global-$run.log
    for ((i = 1; i <= GLOBAL_N; i++)); do urls+=("$BASE/g/$i.bin"); done
    log_from=$(($(wc -l <"$WORK/logs/nginx-g.log" 2>/dev/null || echo 0) + 1))
    now_us; launch=$REPLY
    "$HAUL" get -q --journal "$journal" -d "$out" -j "$GLOBAL_N" --per-host "$GLOBAL_N" -x 1 \
        --max-overall-rate "$GLOBAL_RATE" "${urls[@]}" </dev/null >"$logfile" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    sample_first "$pid" "$launch"
    if [[ -n $T0 ]]; then sample_span "$pid" "$launch" "$DURATION_US"; fi
    stop_proc "$pid"
    nap_us 300000 # for nginx to log the closed connections
    tail -n "+$log_from" "$WORK/logs/nginx-g.log" >"$WORK/samples/global-$run.nginx" 2>/dev/null || true
    rm -rf "$out" "$journal"*
    if [[ -z $T0 ]]; then
        wl_record workload=global run="$run" status="no byte read (exit $RC)" log="$(first_line "$logfile")"
        return
    fi
    python3 "$WORK/workloads.py" global "$WL_RESULTS" "$run" "$SAMPLES" "$T0" "$(numfmt --from=iec "$GLOBAL_RATE")" \
        "$GLOBAL_N" "$TICKS" "$WORK/samples/global-$run.nginx" "$EXITED" "$RC" "$(first_line "$logfile")" "$launch"
    log "global run $run: $(tail -n1 "$WL_RESULTS" | cut -c1-300)"
}

SMALL_RATE=2M
small_cmd() { # TOOL OUT JOURNAL -> CMD
    case $1 in
    haul) CMD=("$HAUL" get -q --journal "$3" -d "$2" -j 16 --per-host 16 --max-overall-rate "$SMALL_RATE" -i "$WORK/small.list") ;;
    curl) CMD=(curl -s --parallel --parallel-max 16 --limit-rate "$SMALL_RATE" --output-dir "$2" --remote-name-all -K "$WORK/small.curl") ;;
    aria2c) CMD=(aria2c -q -j 16 "--max-overall-download-limit=$SMALL_RATE" --allow-overwrite=true
        --auto-file-renaming=false --file-allocation=none -d "$2" -i "$WORK/small.list") ;;
    esac
}
wl_small() { # RUN TOOL
    local run=$1 tool=$2 out journal logfile pid launch end limit_us cpu files bytes gap="" i
    case $tool in
    haul) gap=$(wl_gap) ;;
    *) command -v "$tool" >/dev/null 2>&1 || gap="not installed" ;;
    esac
    if [[ -n $gap ]]; then wl_record workload=small run="$run" tool="$tool" status="$gap"; return; fi
    if [[ ! -f $WORK/small.list ]]; then
        for ((i = 1; i <= SMALL_FILES; i++)); do echo "$BASE/s/$i.bin"; done >"$WORK/small.list"
        sed 's/^/url = /' "$WORK/small.list" >"$WORK/small.curl"
    fi
    out=$SCRATCH/out-small-$tool-$run journal=$SCRATCH/haul-small-$run.sqlite logfile=$WORK/logs/small-$tool-$run.log
    mkdir -p "$out"
    small_cmd "$tool" "$out" "$journal"
    # The tool's CPU: the children's times (bash's `times`, no fork) before and after it is reaped.
    times >"$WORK/times-0.txt"
    limit_us=$(((SMALL_FILES * SMALL_BYTES * 3 / (2 * 1048576) + 60) * 1000000)) # 3 × the ideal + 60 s
    now_us; launch=$REPLY
    "${CMD[@]}" </dev/null >"$logfile" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    while running "$pid"; do
        nap_us 10000
        now_us
        ((REPLY - launch < limit_us)) || break
    done
    now_us; end=$REPLY
    stop_proc "$pid"
    times >"$WORK/times-1.txt"
    # "XmY.YYYs XmY.YYYs" (user, system) on the second line: the children's
    cpu=$(awk 'function s(x,  m) { m = x; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", x); sub(/s$/, "", x); return m * 60 + x }
        FNR == 2 { c[++n] = s($1) + s($2) } END { printf "%.2f", c[2] - c[1] }' "$WORK/times-0.txt" "$WORK/times-1.txt")
    files=$(find "$out" -type f -name '*.bin' -size "${SMALL_BYTES}c" | wc -l)
    bytes=$(out_bytes "$out")
    rm -rf "$out" "$journal"*
    wl_record workload=small run="$run" tool="$tool" wall_s="$(awk -v e="$end" -v l="$launch" 'BEGIN { printf "%.3f", (e - l) / 1e6 }')" \
        cpu_s="$cpu" files="$files" bytes="$bytes" expected="$SMALL_FILES" rate="$(numfmt --from=iec "$SMALL_RATE")" \
        file_bytes="$SMALL_BYTES" exited="$EXITED" rc="$RC" log="$(first_line "$logfile")"
    log "small run $run $tool: $(tail -n1 "$WL_RESULTS" | cut -c1-300)"
}

CHANGE_FROM=10M CHANGE_TO=1M
# A request to the service, with its token from a file (not the command line).
api() { curl -s -H "@$WORK/change.headers" -H 'Content-Type: application/json' "$@"; }
wl_change() { # RUN
    local run=$1 out journal logfile pid launch address="" token body id patch_start patch_end patch_code answer gap status
    gap=$(wl_gap)
    if [[ -n $gap ]]; then wl_record workload=change run="$run" status="$gap"; return; fi
    wl_start change "$run"
    out=$SCRATCH/out-change-$run journal=$SCRATCH/haul-change-$run.sqlite logfile=$WORK/logs/change-$run.log
    mkdir -p "$out"
    token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    printf 'Authorization: Bearer %s\n' "$token" >"$WORK/change.headers"
    HAUL_TOKEN=$token "$HAUL" serve --listen 127.0.0.1:0 --journal "$journal" -d "$out" </dev/null >"$logfile" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    for _ in {1..200}; do # the service prints its address ("listening on http://...") once it is up
        address=$(grep -o -m1 'http://[0-9.:]*' "$logfile" 2>/dev/null || true)
        if [[ -n $address ]] || ! running "$pid"; then break; fi
        nap_us 50000
    done
    if [[ -z $address ]]; then
        stop_proc "$pid"
        wl_record workload=change run="$run" status="haul serve did not start (exit $RC)" log="$(first_line "$logfile")"
        rm -rf "$out" "$journal"*
        return
    fi
    answer=$(api "$address/api/v1/settings" 2>&1) || true
    if [[ $answer != *maxBytesPerSecond* ]]; then
        stop_proc "$pid"
        rm -rf "$out" "$journal"* "$WORK/change.headers"
        wl_record workload=change run="$run" status="n/a (this haul serve has no speed limits: GET /api/v1/settings has no maxBytesPerSecond)"
        return
    fi
    body=$(printf '{"downloads":[{"url":"%s/g/1.bin","maxBytesPerSecond":%d}]}' "$BASE" "$(numfmt --from=iec "$CHANGE_FROM")")
    patch_start=0 patch_end=0 patch_code=-
    now_us; launch=$REPLY
    answer=$(api -d "$body" "$address/api/v1/downloads" 2>&1) || true
    # The ID (the URL, here), percent-encoded for the path.
    id=$(python3 -c 'import json, sys, urllib.parse; print(urllib.parse.quote(json.loads(sys.argv[1])["ids"][0], safe=""))' \
        "$answer" 2>/dev/null) || id=""
    status=ok
    if [[ -z $id ]]; then
        status="POST /api/v1/downloads failed: ${answer:0:200}"
    else
        sample_first "$pid" "$launch"
        if [[ -z $T0 ]]; then
            status="no byte read"
        else
            sample_span "$pid" "$launch" $((CHANGE_AT * 1000000))
            now_us; patch_start=$((REPLY - launch))
            patch_code=$(api -o /dev/null -w '%{http_code}' -X PATCH -d "{\"maxBytesPerSecond\":$(numfmt --from=iec "$CHANGE_TO")}" \
                "$address/api/v1/downloads/$id" 2>&1) || true
            now_us; patch_end=$((REPLY - launch))
            sample_span "$pid" "$launch" $((2 * CHANGE_AT * 1000000))
        fi
    fi
    stop_proc "$pid"
    rm -rf "$out" "$journal"* "$WORK/change.headers"
    if [[ $status != ok ]]; then
        wl_record workload=change run="$run" status="$status" log="$(first_line "$logfile")"
        return
    fi
    python3 "$WORK/workloads.py" change "$WL_RESULTS" "$run" "$SAMPLES" "$T0" "$patch_start" "$patch_end" \
        "$(numfmt --from=iec "$CHANGE_FROM")" "$(numfmt --from=iec "$CHANGE_TO")" "$patch_code" "$BIG_BYTES"
    log "change run $run: $(tail -n1 "$WL_RESULTS" | cut -c1-300)"
}

IDLE_RATE=10K IDLE_N=16 IDLE_SKIP=5
wl_idle() { # RUN
    local run=$1 out journal logfile pid launch urls=() i gap written
    gap=$(wl_gap)
    if [[ -n $gap ]]; then wl_record workload=idle run="$run" status="$gap"; return; fi
    wl_start idle "$run"
    out=$SCRATCH/out-idle-$run journal=$SCRATCH/haul-idle-$run.sqlite logfile=$WORK/logs/idle-$run.log
    for ((i = 1; i <= IDLE_N; i++)); do urls+=("$BASE/g/$i.bin"); done
    now_us; launch=$REPLY
    "$HAUL" get -q --journal "$journal" -d "$out" -j "$IDLE_N" --per-host "$IDLE_N" -x 1 \
        --limit-rate "$IDLE_RATE" "${urls[@]}" </dev/null >"$logfile" 2>&1 &
    pid=$!
    BG_PIDS+=("$pid")
    # Two samples only (an ss call costs the machine, not haul, but keep it quiet): at 5 s and
    # at the end. With the bytes written too: at 10 KiB/s the sockets say little, since
    # SwiftNIO reads up to 256 KiB at a time, 25 s of it.
    written=()
    for i in "$IDLE_SKIP" "$IDLE_DURATION"; do
        now_us
        nap_us $((launch + i * 1000000 - REPLY))
        running "$pid" || break
        take_port_sample "$pid" "$launch"
        written+=("$(out_bytes "$out")")
    done
    stop_proc "$pid"
    rm -rf "$out" "$journal"*
    python3 "$WORK/workloads.py" idle "$WL_RESULTS" "$run" "$SAMPLES" "$(numfmt --from=iec "$IDLE_RATE")" "$IDLE_N" \
        "$TICKS" "$EXITED" "$RC" "$(first_line "$logfile")" "${written[0]:-0}" "${written[1]:-0}"
    log "idle run $run: $(tail -n1 "$WL_RESULTS" | cut -c1-300)"
}

if ((${#WORKLOADS[@]})); then
    now_us; WL_START=$REPLY
    for run in $(seq 1 "$RUNS"); do
        for workload in "${WORKLOADS[@]}"; do
            log "run $run/$RUNS: workload $workload"
            case $workload in
            global) wl_global "$run" ;;
            small) for tool in "${SMALL_TOOL_LIST[@]}"; do wl_small "$run" "$tool"; done ;;
            change) wl_change "$run" ;;
            idle) wl_idle "$run" ;;
            esac
        done
    done
    now_us; WL_TOTAL=$(((REPLY - WL_START) / 1000000))
fi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------------------
# Report. raw.tsv: limit, tool, run, status, then (when measured) mean (fitted), worst 1 s,
# worst 2 s, burst KiB, burst on the wire KiB, CPU s, CPU %, bytes read, mean (end points),
# most ahead KiB, first byte s.

version_of() {
    case $1 in
    haul) "$HAUL" --version 2>/dev/null || echo "?" ;;
    curl) curl --version 2>/dev/null | head -n1 | cut -d' ' -f1-2 ;;
    wget2) wget2 --version 2>/dev/null | head -n1 | sed 's/ - .*//' ;;
    aria2c) aria2c --version 2>/dev/null | head -n1 ;;
    esac
}
command_of() {
    case $1 in
    haul) echo "haul get -q --journal SCRATCH/haul-N.sqlite -d OUT${HAUL_ONE[*]:+ ${HAUL_ONE[*]}} --limit-rate LIMIT URL" ;;
    curl) echo "curl -s -o OUT/NAME --limit-rate LIMIT URL" ;;
    wget2) echo "wget2 -q -O OUT/NAME --limit-rate=limit URL (the limit in lower case)" ;;
    aria2c) echo "aria2c -q -x1 -s1 --max-download-limit=LIMIT --allow-overwrite=true --auto-file-renaming=false --file-allocation=none -d OUT -o NAME URL" ;;
    esac
}

REPORT=$WORK/report.md
DATE=$(date +%F)
cpu_model=$(awk -F: '/^model name/ { sub(/^ +/, "", $2); print $2; exit }' /proc/cpuinfo)
git_rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo "?")
cmdline="RUNS=$RUNS DURATION=$DURATION LIMITS=\"$LIMITS\" MIN_SIZE=$MIN_SIZE ONLY_TOOLS=\"${TOOLS[*]:-none}\""
cmdline+=" HAUL_WORKLOADS=\"${WORKLOADS[*]:-none}\""
if want_workload small; then cmdline+=" SMALL_FILES=$SMALL_FILES SMALL_TOOLS=\"${SMALL_TOOL_LIST[*]}\""; fi
if want_workload idle; then cmdline+=" IDLE_DURATION=$IDLE_DURATION"; fi
if want_workload change; then cmdline+=" CHANGE_AT=$CHANGE_AT"; fi
cmdline+="${HAUL_BIN:+ HAUL_BIN=$HAUL_BIN} Benchmarks/rate-limit.sh"
{
    if ((${#TOOLS[@]})); then
        echo "# Download rate limiting: Haul, curl, wget2 and aria2c ($DATE)"
    else
        echo "# Download rate limiting: Haul's workloads ($DATE)"
    fi
    echo
    echo "Generated by \`Benchmarks/rate-limit.sh\`: the tool comparison in $T_TOTAL s, Haul's workloads in $WL_TOTAL s."
    echo
    if ((${#TOOLS[@]})); then
    echo "Each tool downloads one file from nginx on 127.0.0.1 at each limit, for $DURATION s after its first byte; median of $RUNS run(s)."
    echo
    python3 - "$RAW" "${TOOLS[*]}" "${LIMIT_LIST[*]}" <<'PY'
import sys, statistics
raw, tools, limits = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rows = [line.rstrip("\n").split("\t") for line in open(raw) if line.strip()]
def med(values):
    values = [float(v) for v in values if v not in ("-", "")]
    return statistics.median(values) if values else None
def f(x, digits, suffix=""):
    return "–" if x is None else f"{x:.{digits}f}{suffix}"
print("| limit | tool | mean rate / limit | worst 1 s window / limit | worst 2 s window / limit | initial burst (KiB) | CPU (% of a core) |")
print("|---|---|---|---|---|---|---|")
for limit in limits:
    for tool in tools:
        runs = [r for r in rows if r[0] == limit and r[1] == tool]
        measured = [r for r in runs if len(r) > 4]
        if not measured:
            status = runs[0][3] if runs else "not run"
            print(f"| {limit} | {tool} | {status} | – | – | – | – |")
            continue
        col = lambda i: med([r[i] for r in measured])
        cpu_pct, cpu_s = col(10), col(9)
        flag = "" if all(r[3] == "ok" for r in runs) else f" ({sum(r[3] == 'ok' for r in runs)}/{len(runs)} runs ran to the end)"
        print(f"| {limit} | {tool}{flag} | {f(col(4), 3)} | {f(col(5), 3)} | {f(col(6), 3)} | {f(col(7), 0)} | "
              f"{f(cpu_pct, 1, '%')} ({f(cpu_s, 2)} s) |")
print()
print("### Every run")
print()
print("| limit | tool | run | mean / limit (fitted) | mean / limit (end points) | worst 1 s | worst 2 s | burst KiB (read) | burst KiB (on the wire) | most ahead of limit × t (KiB) | CPU s | first byte after (s) | MiB read | status |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for limit in limits:
    for tool in tools:
        for r in rows:
            if r[0] != limit or r[1] != tool or len(r) <= 4:
                continue
            print(f"| {limit} | {tool} | {r[2]} | {r[4]} | {r[12]} | {r[5]} | {r[6]} | {r[7]} | {r[8]} | {r[13]} | {r[9]} | "
                  f"{r[14]} | {int(r[11]) / 1048576:.1f} | {r[3]} |")
PY
    echo
    echo "## How each number is taken"
    echo
    echo "- Bytes are those the tool has read from its socket: \`bytes_received\` minus Recv-Q of its connection to nginx, from \`ss -ti\`, sampled every 0.1 s (every 10 ms until the first byte). Not the output file's size (aria2c writes it in steps of 1 MiB, Haul into a .haul-partial file) and not rchar from /proc/PID/io (it counts read() only; curl and aria2c read their sockets with recv(), which it misses). \"On the wire\" is \`bytes_received\` alone, what the kernel took in: it may run ahead of the reads by the receive buffer."
    echo "- t = 0 is the first sample that sees a byte read, so start-up time does not count; the tool gets SIGTERM at t = $DURATION s (SIGKILL 3 s later if still there). The file is limit × ($DURATION + 4) bytes and at least MIN_SIZE=$MIN_SIZE ($file_sizes), so a tool that keeps to its limit is still downloading then. A tool that ends by itself earlier is measured up to its end (its last count from the bytes it wrote) and listed under Problems."
    echo "- Mean rate / limit: the slope of the least-squares line through the samples from t = 1 s to the last, over the limit. The difference of the end points, (bytes at the last sample − bytes at t = 1 s) / the time between, is in the per-run table too, but it depends on where the ends fall for a tool that reads in steps: aria2c reads once a second (16 KiB buffers up to its limit), so it counts a step more or less, ±1/(DURATION − 1), while the fitted line is within about 2% over 7 s."
    echo "- Worst 1 s (2 s) window / limit: of the windows of 1 s (2 s) starting at t = 1 s, 1.1 s, ... and ending by the last sample, bytes interpolated linearly between samples, the one whose rate / limit is farthest from 1. Below 1: a stall; above 1: a burst."
    echo "- Initial burst: bytes read by t = 0.5 s minus limit × 0.5 s, in KiB (1 KiB = 1024 bytes). Negative: a slow start. A burst that comes later is in \"most ahead of limit × t\" (per-run table): the largest bytes(t) − limit × t over the samples, the bucket size a token bucket would need to let the run through; curl 7.88, for one, can read up to 100 buffers of 100 KiB (about 10 MiB) in one go at the start, before its limit (on its average since the start) holds it back; whether that comes in the first 0.5 s or after a first read of 64 KiB and a sleep (0.64 s at 100K) is down to timing."
    echo "- CPU: utime + stime of the process (all threads, /proc/PID/stat) at the last sample, as % of one core over the wall time from its start to that sample (just before the SIGTERM); seconds in brackets."
    echo "- Limits are bytes per second with K = 1024 and M = 1024 K, which is how all four tools read them."
    echo "- Runs are interleaved: run 1 of every limit and tool, then run 2, and so on. Output goes to ${SCRATCH%/*} ($(fs_type "$SCRATCH"))."
    echo
    fi
    if ((${#WORKLOADS[@]})); then
        echo "## Haul's workloads: the issue's accuracy targets"
        echo
        echo "nginx serves every /g/N.bin as one file of $(awk -v b="$BIG_BYTES" 'BEGIN { printf "%.1f", b / 1048576 }') MiB and every /s/N.bin as one of 16 KiB, so each URL is a download of its own. Bytes are those read from the sockets, as above (\`ss -ti\`, bytes_received − Recv-Q, per connection); K = 1024, M = 1024 K. Output goes to ${SCRATCH%/*} ($(fs_type "$SCRATCH")). Each run is a column; ✓ / ✗ against the target."
        echo
        python3 "$WORK/workloads.py" report "$WL_RESULTS" duration="$DURATION" \
            global_n="$GLOBAL_N" global_rate="$GLOBAL_RATE" \
            global_cmd="haul get -q --journal SCRATCH/J.sqlite -d OUT -j $GLOBAL_N --per-host $GLOBAL_N -x 1 --max-overall-rate $GLOBAL_RATE BASE/g/1.bin ... BASE/g/$GLOBAL_N.bin" \
            small_files="$SMALL_FILES" small_rate="$SMALL_RATE" \
            small_ideal="$(awk -v n="$SMALL_FILES" -v b="$SMALL_BYTES" -v r="$(numfmt --from=iec "$SMALL_RATE")" 'BEGIN { printf "%.4f", n * b / r }')" \
            small_cmd_haul="haul get -q --journal SCRATCH/J.sqlite -d OUT -j 16 --per-host 16 --max-overall-rate $SMALL_RATE -i LIST" \
            small_cmd_curl="curl -s --parallel --parallel-max 16 --limit-rate $SMALL_RATE --output-dir OUT --remote-name-all -K CONFIG (CONFIG: a line url = URL for each)" \
            small_cmd_aria2c="aria2c -q -j 16 --max-overall-download-limit=$SMALL_RATE --allow-overwrite=true --auto-file-renaming=false --file-allocation=none -d OUT -i LIST" \
            change_from="$CHANGE_FROM" change_to="$CHANGE_TO" change_at="$CHANGE_AT" \
            change_from_bytes="$(numfmt --from=iec "$CHANGE_FROM")" change_to_bytes="$(numfmt --from=iec "$CHANGE_TO")" \
            change_cmd="HAUL_TOKEN=... haul serve --listen 127.0.0.1:0 --journal SCRATCH/J.sqlite -d OUT" \
            idle_n="$IDLE_N" idle_rate="$IDLE_RATE" idle_duration="$IDLE_DURATION" idle_skip="$IDLE_SKIP" \
            idle_cmd="haul get -q --journal SCRATCH/J.sqlite -d OUT -j $IDLE_N --per-host $IDLE_N -x 1 --limit-rate $IDLE_RATE BASE/g/1.bin ... BASE/g/$IDLE_N.bin"
    fi
    echo "## Machine, tools and command"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
    echo "| machine | $(nproc) CPUs (${cpu_model:-?}), $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM |"
    echo "| kernel | $(uname -sr) |"
    echo "| load average (1, 5, 15 min) | $LOAD_START at the start, $LOAD_END at the end |"
    report_tools=("${TOOLS[@]}")
    for tool in $( ((${#WORKLOADS[@]})) && echo haul) "${SMALL_TOOL_LIST[@]}"; do
        [[ " ${report_tools[*]} " == *" $tool "* ]] || report_tools+=("$tool")
    done
    for tool in "${report_tools[@]}"; do
        gap=$(tool_gap "$tool")
        if [[ $gap == "not installed" ]]; then
            echo "| $tool | not installed |"
        elif [[ $tool == haul ]]; then
            echo "| haul | $(version_of haul), $HAUL built $(date -u -r "$HAUL" '+%Y-%m-%d %H:%M UTC'); the repository at commit $git_rev$(git -C "$REPO" diff --quiet HEAD -- Sources 2>/dev/null || echo ' (Sources changed since)'); \`--limit-rate\`: $( ((HAUL_HAS_LIMIT)) && echo yes || echo 'not yet') |"
        else
            echo "| $tool | $(version_of "$tool") |"
        fi
    done
    echo "| nginx | $(nginx -v 2>&1 | sed 's/^nginx version: //') |"
    echo "| command | \`$cmdline\` |"
    if [[ -n $NOTE ]]; then echo "| note | $NOTE |"; fi
    if ((${#TOOLS[@]})); then
        echo
        echo "Tool commands in the comparison (LIMIT as in LIMITS, e.g. 100K):"
        echo
        for tool in "${TOOLS[@]}"; do echo "- \`$(command_of "$tool")\`"; done
    fi
    if ((${#NOTES[@]})); then
        echo
        echo "## Problems"
        echo
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

mkdir -p "$RESULTS_DIR"
cp "$REPORT" "$RESULTS_DIR/rate-limit-$DATE.md"
cat "$REPORT"
log "report: $RESULTS_DIR/rate-limit-$DATE.md"
