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
#   RUNS        runs of every tool and limit (default 1). A run takes about DURATION + 1 s
#               per tool and limit: 4 tools × 3 limits × 8 s is about 2 minutes.
#   DURATION    seconds of download measured per run (default 8; at least 2). Below about 6
#               the mean of a tool that reads in steps of a second (aria2c) is rough: a
#               fit over a few steps swings by tens of percent. Short runs test the plumbing.
#   LIMITS      the limits, as curl writes them (default "100K 1M 10M").
#   MIN_SIZE    the smallest file downloaded (default 16M; 0 for exactly limit × (DURATION + 4)).
#   ONLY_TOOLS  which tools, of "haul curl wget2 aria2c" (the default).
#   HAUL_BIN    a haul binary to use; without it haul is built in release into .build-bench.
#   RESULTS_DIR where the report goes (default Benchmarks/results).
#   NOTE        a line added to the report.  KEEP_WORK=1 keeps the samples and logs.
#
# The report goes to standard output and to Benchmarks/results/rate-limit-YYYY-MM-DD.md.
#
# Usage (from anywhere; needs root or sudo only to install missing tools):
#   Benchmarks/rate-limit.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=3 Benchmarks/rate-limit.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=1 DURATION=3 LIMITS="100K 1M" ONLY_TOOLS="haul curl" Benchmarks/rate-limit.sh
set -euo pipefail
export LC_ALL=C
umask 022

CALLER_DIR=$PWD
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO"

RUNS=${RUNS:-1}
DURATION=${DURATION:-8}
LIMITS=${LIMITS:-"100K 1M 10M"}
MIN_SIZE=${MIN_SIZE:-16M}
ONLY_TOOLS=${ONLY_TOOLS:-"haul curl wget2 aria2c"}
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
    case $tool in haul | curl | wget2 | aria2c) TOOLS+=("$tool") ;; *) die "ONLY_TOOLS: unknown tool '$tool'" ;; esac
done
((${#TOOLS[@]})) || die "ONLY_TOOLS is empty"
want_tool() { [[ " ${TOOLS[*]} " == *" $1 "* ]]; }

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
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------
# Tools: what is missing is installed from Debian (as compare.sh does). nginx, ss and
# python3 are needed; a download tool that is still missing afterwards gets "not installed"
# rows.

install_tools() {
    local -A package_for=([nginx]=nginx [ss]=iproute2 [python3]=python3 [curl]=curl [wget2]=wget2 [aria2c]=aria2)
    local missing=() tool
    for tool in nginx ss python3 "${TOOLS[@]}"; do
        [[ $tool == haul ]] && continue
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

HAUL="" HAUL_HAS_LIMIT=0 HAUL_ONE=()
if want_tool haul; then
    if [[ -n ${HAUL_BIN:-} ]]; then
        HAUL=$HAUL_BIN
        if [[ $HAUL != /* ]]; then HAUL=$CALLER_DIR/$HAUL; fi
    else
        log "building haul (release, .build-bench)"
        build_log=$(mktemp)
        if ! swift build -c release --product haul --scratch-path .build-bench >"$build_log" 2>&1; then
            tail -n 40 "$build_log" >&2
            rm -f "$build_log"
            die "swift build failed (set HAUL_BIN to use an existing binary)"
        fi
        rm -f "$build_log"
        HAUL=$(swift build -c release --scratch-path .build-bench --show-bin-path)/haul
    fi
    [[ -x $HAUL ]] || die "no haul binary at $HAUL"
    # Captured first: `... | grep -q` would fail under pipefail when grep stops reading early.
    haul_help=$("$HAUL" get --help 2>&1) || die "$HAUL get --help failed"
    if [[ $haul_help == *--limit-rate* ]]; then HAUL_HAS_LIMIT=1; fi
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
for limit in "${LIMIT_LIST[@]}"; do
    FILE_BYTES[$limit]=$(awk -v l="${LIMIT_BYTES[$limit]}" -v d="$DURATION" -v m="$MIN_BYTES" \
        'BEGIN { s = l * (d + 4); if (s < m) s = m; printf "%d", s }')
    if [[ ! -f $WWW/rate-$limit.bin ]]; then
        head -c "${FILE_BYTES[$limit]}" /dev/urandom >"$WWW/rate-$limit.bin"
    fi
done
chmod -R a+rX "$WWW"
cat "$WWW"/*.bin >/dev/null # into the page cache
log "corpus: $(for l in "${LIMIT_LIST[@]}"; do printf '%s: %s bytes; ' "$l" "${FILE_BYTES[$l]}"; done)"
file_sizes=$(for l in "${LIMIT_LIST[@]}"; do printf '%s%s: %s MiB' "${sep:-}" "$l" \
    "$(awk -v b="${FILE_BYTES[$l]}" 'BEGIN { printf "%.1f", b / 1048576 }')"; sep=", "; done)

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
    default_type application/octet-stream;
    types { }
    sendfile on; tcp_nopush on;
    keepalive_requests 100000; keepalive_timeout 65s;
    access_log off;
    client_body_temp_path $prefix/tmp/body; proxy_temp_path $prefix/tmp/proxy;
    fastcgi_temp_path $prefix/tmp/fastcgi; uwsgi_temp_path $prefix/tmp/uwsgi; scgi_temp_path $prefix/tmp/scgi;
    server {
        listen 127.0.0.1:$PORT;
        root $WWW;
    }
}
EOF
        if nginx -c "$conf" -p "$prefix" -e "$prefix/error.log" 2>>"$prefix/start.log"; then
            for _ in {1..50}; do [[ -s $NGINX_PID_FILE ]] && break; sleep 0.1; done
            if curl -sf -o /dev/null -r 0-0 "http://127.0.0.1:$PORT/rate-${LIMIT_LIST[0]}.bin" 2>/dev/null ||
                python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1]).read(1)' \
                    "http://127.0.0.1:$PORT/rate-${LIMIT_LIST[0]}.bin" 2>/dev/null; then
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
nap_us() { # MICROSECONDS
    (($1 > 0)) || return 0
    read -r -t "$(printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)))" -u "$SLEEP_FD" _ || true
}
now_us() { local t=$EPOCHREALTIME; REPLY=$((10#${t/./})); } # EPOCHREALTIME has 6 decimals

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
for run in $(seq 1 "$RUNS"); do
    for limit in "${LIMIT_LIST[@]}"; do
        log "run $run/$RUNS: limit $limit"
        for tool in "${TOOLS[@]}"; do measure "$tool" "$limit" "$run"; done
    done
done
now_us; T_TOTAL=$(((REPLY - T_START) / 1000000))
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
cmdline="RUNS=$RUNS DURATION=$DURATION LIMITS=\"$LIMITS\" MIN_SIZE=$MIN_SIZE ONLY_TOOLS=\"${TOOLS[*]}\"${HAUL_BIN:+ HAUL_BIN=$HAUL_BIN} Benchmarks/rate-limit.sh"
{
    echo "# Download rate limiting: Haul, curl, wget2 and aria2c ($DATE)"
    echo
    echo "Each tool downloads one file from nginx on 127.0.0.1 at each limit, for $DURATION s after its first byte; median of $RUNS run(s)."
    echo "Generated by \`Benchmarks/rate-limit.sh\` in $T_TOTAL s."
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
    echo "## Machine, tools and command"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
    echo "| machine | $(nproc) CPUs (${cpu_model:-?}), $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM |"
    echo "| kernel | $(uname -sr) |"
    echo "| load average (1, 5, 15 min) | $LOAD_START at the start, $LOAD_END at the end |"
    for tool in "${TOOLS[@]}"; do
        gap=$(tool_gap "$tool")
        if [[ $gap == "not installed" ]]; then
            echo "| $tool | not installed |"
        elif [[ $tool == haul ]]; then
            echo "| haul | $(version_of haul), commit $git_rev; \`--limit-rate\`: $( ((HAUL_HAS_LIMIT)) && echo yes || echo 'not yet') |"
        else
            echo "| $tool | $(version_of "$tool") |"
        fi
    done
    echo "| nginx | $(nginx -v 2>&1 | sed 's/^nginx version: //') |"
    echo "| command | \`$cmdline\` |"
    if [[ -n $NOTE ]]; then echo "| note | $NOTE |"; fi
    echo
    echo "Tool commands (LIMIT as in LIMITS, e.g. 100K):"
    echo
    for tool in "${TOOLS[@]}"; do echo "- \`$(command_of "$tool")\`"; done
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
