#!/usr/bin/env bash
# ds4ref-server under load (docs/PERFORMANCE.md, "The server"): wrk keeps
# C clients (connections) sending the same greedy completion of 16 tokens
# for SECONDS each, on each model; prints one line per run: requests/s,
# tokens/s, p50 and p99 latency, non-200 answers and socket errors, the
# server's peak RSS, and its CPU time over 3 s once nothing is in flight.
#
#   bench/server_load.sh [SECONDS] [CLIENTS...]   (default 10 s; 1 4 16 64)
#   MODELS="models/tiny.gguf models/fullwidth.gguf" bench/server_load.sh
#   IDLE=48 SLOW=48 bench/server_load.sh     (with idle and slow clients present)
#
# IDLE and SLOW (default 0) hold that many idle connections and that many
# clients sending a header line every half second, for the whole of each
# run, as the idle and slow clients of a real deployment do.
# Needs wrk (Debian: apt-get install wrk).  Run from the repository root
# after make.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
shift || true
clients=("${@:-1 4 16 64}")
# shellcheck disable=SC2206
clients=(${clients[*]})
command -v wrk > /dev/null || { echo "server_load: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
export MAX_TOKENS=${MAX_TOKENS:-16}
printf '%-22s %7s %9s %9s %9s %9s %8s %9s %10s\n' model clients req/s tok/s p50_ms p99_ms lost rss_MB idle_cpu_s
for model in ${MODELS:-models/tiny.gguf}; do
    for c in "${clients[@]}"; do
        log=$(mktemp)
        ./ds4ref-server -m "$model" --port 0 --parallel 16 --queue 64 2> "$log" &
        pid=$!
        for _ in $(seq 100); do grep -q listening "$log" && break; sleep 0.1; done
        url=$(grep -o 'http://[0-9.:]*' "$log")
        hold=
        if [ "${IDLE:-0}" -gt 0 ] || [ "${SLOW:-0}" -gt 0 ]; then
            python3 -c '
import socket, sys, time
host, port = sys.argv[1].split("//")[1].split(":")
idle = [socket.create_connection((host, int(port))) for _ in range(int(sys.argv[2]))]
slow = [socket.create_connection((host, int(port))) for _ in range(int(sys.argv[3]))]
for s in slow:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
k = 0
while True:
    for s in slow:
        try:
            s.sendall(b"X-Slow: %d\r\n" % k)
        except OSError:
            pass
    k += 1
    time.sleep(0.5)' "$url" "${IDLE:-0}" "${SLOW:-0}" &
            hold=$!
            sleep 1
        fi
        out=$(wrk -t "$(( c < 4 ? c : 4 ))" -c "$c" -d "${secs}s" --timeout 120s --latency \
                  -s bench/server_post.lua "$url/v1/completions")
        rps=$(awk '/^Requests\/sec/ {print $2}' <<< "$out")
        p50=$(awk '$1 == "50%" {print $2}' <<< "$out")
        p99=$(awk '$1 == "99%" {print $2}' <<< "$out")
        lost=$(( $(awk '/Non-2xx/ {print $5}' <<< "$out" | tr -d ' ' || true) + 0 ))
        errs=$(awk '/Socket errors/ {s = 0; for (i = 3; i <= NF; i += 2) s += $(i + 1) + 0; print s}' <<< "$out")
        rss=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
        if [ -n "$hold" ]; then kill "$hold" 2> /dev/null; wait "$hold" 2> /dev/null || true; fi
        # wrk leaves requests in flight when its time is up: the server
        # finishes or drops them first; then it must be idle.
        for _ in $(seq 1200); do
            curl -s "$url/health" | grep -q '"rows":0,"queued":0' && break
            sleep 0.1
        done
        t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        sleep 3
        t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill -TERM "$pid"
        wait "$pid"
        ms() { awk -v v="$1" 'BEGIN { u = v; sub(/[0-9.]+/, "", u); x = v + 0;
            print (u == "m" ? x * 60000 : u == "s" ? x * 1000 : u == "us" ? x / 1000 : x) }'; }
        printf '%-22s %7s %9.2f %9.1f %9.1f %9.1f %8s %9s %10.2f\n' "$(basename "$model")" "$c" \
            "$rps" "$(awk -v r="$rps" -v n="$MAX_TOKENS" 'BEGIN {print r * n}')" \
            "$(ms "$p50")" "$(ms "$p99")" "$((lost + ${errs:-0}))" "$rss" \
            "$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN {print (b - a) / hz}')"
        rm -f "$log"
    done
done
