#!/usr/bin/env bash
# Every figure of docs/PERFORMANCE.md, in one run on one machine:
#
#   bench/measure.sh LLAMA_LIBDIR [THREADS...]        (default threads: 2)
#
# For each thread count: the memory read bandwidth (the decode roofline),
# ds4ref against llama.cpp on models/fullwidth.gguf (bench/compare.sh), and
# the long-context case (an 8192-token prompt, make bench-long); then, with
# FULLDEPTH=1, the 43-layer model end to end at the largest thread count.
# Models are made on first use (fullwidth 2.4 GB, fulldepth 13.6 GB).
# Prints the report; OUT=FILE also writes it there.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:?usage: bench/measure.sh LLAMA_LIBDIR [THREADS...]}
shift
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(2)
make --no-print-directory -s all build/bench/llama_time build/bench/bandwidth models/fullwidth.gguf >&2
[ -z "${FULLDEPTH:-}" ] || make --no-print-directory -s models/fulldepth.gguf >&2
{
    echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "== $(./ds4ref --version)"
    for t in "${threads[@]}"; do OMP_NUM_THREADS=$t build/bench/bandwidth; done
    echo "== ds4ref vs llama.cpp, models/fullwidth.gguf"
    REPS=${REPS:-3} bench/compare.sh models/fullwidth.gguf "$lib" "${threads[@]}"
    echo "== long context: 8192-token prompt on models/fullwidth.gguf"
    for t in "${threads[@]}"; do
        ./ds4ref-bench -m models/fullwidth.gguf -t "$t" -p 8192 -n 16 --warm
    done
    if [ -n "${FULLDEPTH:-}" ]; then
        t=${threads[${#threads[@]} - 1]}
        echo "== fulldepth (43 layers), $t threads"
        ./ds4ref-bench -m models/fulldepth.gguf -t "$t" -p 256 -n 8 --warm --layers 2>&1
        build/bench/llama_time "$lib" models/fulldepth.gguf "$t" decode 8 1 1
        build/bench/llama_time "$lib" models/fulldepth.gguf "$t" prefill 256 1 0
    fi
} 2>&1 | tee "${OUT:-/dev/null}"
