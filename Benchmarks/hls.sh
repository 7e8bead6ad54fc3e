#!/usr/bin/env bash
# Benchmarks/hls.sh: an HLS VOD of SEGMENTS segments (default 300, 2 s each, 640x360 at
# 1.2 Mb/s plus AAC: about 93 MB, made once by ffmpeg into tmpfs) served by nginx over HTTPS
# (HTTP/1.1 and HTTP/2 offered by ALPN, a throwaway certificate authority), downloaded into
# one file by each tool with its own defaults:
#
#   haul get -q --journal J -d OUT --ca-certificate CA URL       (h2, segments in parallel)
#   ffmpeg -v error -i URL -c copy OUT/ffmpeg.ts                   (one segment at a time)
#   yt-dlp -q -N CONCURRENT --fixup never --no-check-certificates -o OUT/yt-dlp.ts URL
#
# yt-dlp (PyPI) with -N, its concurrent fragments (CONCURRENT, default 16): its fastest
# setting for HLS; --fixup never keeps it from remuxing afterwards, as Haul and ffmpeg do
# not either. ffmpeg verifies no certificate unless told to (and its HLS reader does not
# pass the authority on to segment requests), yt-dlp is told not to: neither costs them time.
# For each RTT_MS (default "0 40") above 0, every tool goes through Benchmarks/relay.py,
# which holds each direction RTT/2. Haul's file must be the segments, concatenated, byte
# for byte; yt-dlp's too; ffmpeg's (a remux) must hold as many packets as the playlist.
#
# Runs alternate (haul, ffmpeg, yt-dlp, ...) RUNS times (default 5). The report gives the
# medians of the wall time, CPU (user + system) and CPU per segment, and peak RSS.
#
# Usage (from anywhere):
#   Benchmarks/hls.sh
#   HAUL_BIN=.build-bench/release/haul RUNS=5 Benchmarks/hls.sh
#   HAUL_BIN=... SEGMENTS=60 RTT_MS=40 RUNS=1 Benchmarks/hls.sh     # a quick look
# The report goes to standard output and to Benchmarks/results/hls-YYYY-MM-DD-HHMM.md
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
SEGMENTS=${SEGMENTS:-300}
RTT_MS=${RTT_MS:-0 40}
CONCURRENT=${CONCURRENT:-16}
RESULTS_DIR=${RESULTS_DIR:-$REPO/Benchmarks/results}

die() { printf 'hls.sh: %s\n' "$*" >&2; exit 1; }
for tool in nginx ffmpeg openssl python3 /usr/bin/time; do
    command -v "$tool" >/dev/null || die "needs $tool (Debian: nginx, ffmpeg, openssl, python3, time)"
done
YTDLP=$(command -v yt-dlp || true)
[[ -n $YTDLP ]] || printf 'hls.sh: yt-dlp is not installed (pip install yt-dlp): its rows are left out\n' >&2

HAUL=$(haul_binary) || exit 1

WORK=$(mktemp -d "${TMPDIR_BASE:-/dev/shm}/haul-hls.XXXXXX")
RELAYS=()
cleanup() {
    [[ -f $WORK/nginx/nginx.pid ]] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
    for pid in "${RELAYS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ ${KEEP_WORK:-0} == 1 ]]; then printf 'kept %s\n' "$WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
chmod 755 "$WORK"  # (mktemp makes it 0700: nginx's workers must reach the files)
mkdir -p "$WORK/www/vod" "$WORK/nginx/tmp" "$WORK/nginx/logs" "$WORK/out"

printf 'making the stream (%d segments of 2 s)\n' "$SEGMENTS" >&2
(cd "$WORK/www/vod" && ffmpeg -nostdin -v error -f lavfi -i testsrc=size=640x360:rate=25 \
    -f lavfi -i sine=frequency=440:sample_rate=44100 -t $((SEGMENTS * 2)) -c:v libx264 -preset ultrafast \
    -b:v 1200k -g 50 -c:a aac -b:a 96k -f hls -hls_time 2 -hls_playlist_type vod \
    -hls_segment_filename 'seg%03d.ts' index.m3u8) || die "ffmpeg could not make the stream"
made=$(grep -c '^seg' "$WORK/www/vod/index.m3u8")
[[ $made == "$SEGMENTS" ]] || die "ffmpeg made $made segments, not $SEGMENTS"
cat "$WORK/www/vod"/seg*.ts >"$WORK/expected.ts"
STREAM_BYTES=$(stat -c %s "$WORK/expected.ts")
# The packets of every stream of a file, summed.
packets() { ffprobe -v error -count_packets -show_entries stream=nb_read_packets -of csv=p=0 "$1" | grep -E '^[0-9]+$' | paste -sd+ | bc; }
PACKETS=$(packets "$WORK/expected.ts")
[[ $PACKETS -gt 0 ]] || die "ffprobe counted no packets in the stream"

TLS_DIR=$WORK/tls
CA_FILE=$TLS_DIR/ca.pem
make_certificates

PORT=$(free_port)
{
    echo "worker_processes 1; daemon on; pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/logs/error.log;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    nginx_http_basics "$WORK/nginx"
    echo "    types { application/vnd.apple.mpegurl m3u8; video/mp2t ts; }"
    echo "    server {"
    echo "        listen 127.0.0.1:$PORT ssl http2; root $WORK/www;"
    echo "        ssl_certificate $TLS_DIR/server.pem; ssl_certificate_key $TLS_DIR/server.key;"
    echo "        ssl_protocols TLSv1.2 TLSv1.3;"
    echo "    }"
    echo "}"
} >"$WORK/nginx/nginx.conf"
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" || die "nginx did not start"
declare -A ORIGIN
for rtt in $RTT_MS; do
    if [[ $rtt == 0 ]]; then
        ORIGIN[$rtt]=https://127.0.0.1:$PORT
    else
        start_far_link "$PORT" "$rtt" "$WORK/relay-$rtt.log"
        ORIGIN[$rtt]=https://127.0.0.1:$FAR_PORT
    fi
done

TOOLS=(haul ffmpeg)
[[ -n $YTDLP ]] && TOOLS+=(yt-dlp)

# One run: TOOL downloads the stream through ORIGIN; prints "wall cpu rss".
run_one() {
    local tool=$1 origin=$2 out=$WORK/out/$1 start end file
    local url=$origin/vod/index.m3u8
    rm -rf "$out"
    mkdir -p "$out"
    start=$EPOCHREALTIME
    case $tool in
        haul)
            file=$out/index.ts
            /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$HAUL" get -q --journal "$out/journal.sqlite" -d "$out" \
                --ca-certificate "$CA_FILE" "$url" >"$WORK/log-$tool" 2>&1 || die "haul failed: $(tail -n 5 "$WORK/log-$tool")" ;;
        ffmpeg)
            file=$out/ffmpeg.ts
            /usr/bin/time -f '%U %S %M' -o "$WORK/time" ffmpeg -nostdin -v error -i "$url" -c copy "$file" \
                >"$WORK/log-$tool" 2>&1 || die "ffmpeg failed: $(tail -n 5 "$WORK/log-$tool")" ;;
        yt-dlp)
            file=$out/yt-dlp.ts
            /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$YTDLP" -q --no-warnings -N "$CONCURRENT" --fixup never \
                --no-check-certificates --no-part -o "$file" "$url" >"$WORK/log-$tool" 2>&1 ||
                die "yt-dlp failed: $(tail -n 5 "$WORK/log-$tool")" ;;
    esac
    end=$EPOCHREALTIME
    case $tool in
        ffmpeg)
            local packets
            packets=$(packets "$file")
            [[ $packets == "$PACKETS" ]] || die "ffmpeg's file holds $packets packets, the stream $PACKETS" ;;
        *)
            cmp -s "$file" "$WORK/expected.ts" || die "$tool's file is not the segments concatenated" ;;
    esac
    awk -v wall="$(echo "$end - $start" | bc -l)" -v times="$(cat "$WORK/time")" \
        'BEGIN { split(times, t, " "); printf "%.3f %.2f %.1f\n", wall, t[1] + t[2], t[3] / 1024 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A RESULTS
for rtt in $RTT_MS; do
    for run in $(seq 1 "$RUNS"); do
        for tool in "${TOOLS[@]}"; do
            line=$(run_one "$tool" "${ORIGIN[$rtt]}")
            RESULTS[$rtt,$tool]+="$line"$'\n'
            printf 'rtt %s ms, run %d/%d %-7s %s\n' "$rtt" "$run" "$RUNS" "$tool" "$line" >&2
        done
    done
done
column_median() { printf '%s' "${RESULTS[$1]}" | awk -v c="$2" 'NF { print $c }' | median; }

STAMP=$(date -u +%Y-%m-%d-%H%M)
REPORT="$RESULTS_DIR/hls-$STAMP.md"
mkdir -p "$RESULTS_DIR"
{
    echo "# HLS: Haul against ffmpeg and yt-dlp, $(date -u +%Y-%m-%d)"
    echo
    echo "A VOD of $SEGMENTS MPEG-TS segments of 2 s ($(numfmt --to=iec "$STREAM_BYTES")B), served by nginx on 127.0.0.1 over HTTPS (HTTP/1.1 and HTTP/2 offered); the round trip added by \`Benchmarks/relay.py\`. Every tool with its defaults (yt-dlp with \`-N $CONCURRENT\`). Medians of $RUNS runs, the tools alternating; $(nproc) CPUs; tmpfs. haul: $("$HAUL" --version 2>/dev/null || echo "$HAUL"); $(ffmpeg -version | head -n 1 | cut -d' ' -f1-3); yt-dlp: $([[ -n $YTDLP ]] && "$YTDLP" --version || echo "not installed")."
    [[ -n ${NOTE:-} ]] && { echo; echo "$NOTE"; }
    echo
    echo "| round trip | tool | wall | ÷ haul | CPU (user + sys) | CPU per segment | peak RSS |"
    echo "|---|---|---|---|---|---|---|"
    for rtt in $RTT_MS; do
        hwall=$(column_median "$rtt,haul" 1)
        for tool in "${TOOLS[@]}"; do
            key=$rtt,$tool
            wall=$(column_median "$key" 1)
            cpu=$(column_median "$key" 2)
            echo "| $rtt ms | $tool | ${wall} s | $(echo "scale=2; $wall / $hwall" | bc -l) | ${cpu} s | $(echo "scale=2; $cpu * 1000 / $SEGMENTS" | bc -l) ms | $(column_median "$key" 3) MiB |"
        done
    done
    echo
    echo "Commands:"
    echo
    echo "    haul get -q --journal J -d OUT --ca-certificate CA URL"
    echo "    ffmpeg -v error -i URL -c copy OUT/ffmpeg.ts"
    echo "    yt-dlp -q -N $CONCURRENT --fixup never --no-check-certificates --no-part -o OUT/yt-dlp.ts URL"
    echo
    echo "Per run (wall s, CPU s, peak RSS MiB):"
    echo
    for key in "${!RESULTS[@]}"; do
        printf '%s' "${RESULTS[$key]}" | awk -v k="$key" 'NF { printf "    %-10s %s\n", k, $0 }'
    done | sort
} | tee "$REPORT"
printf 'report: %s\n' "$REPORT" >&2
