#!/usr/bin/env bash
# Every figure of docs/PERFORMANCE.md, in one run on one machine:
#
#   bench/measure.sh LLAMA_LIBDIR [THREADS...]        (default threads: 2)
#
# PARTS (default "bandwidth compare long") picks what runs:
#   bandwidth  the memory read bandwidth at each thread count (the decode
#              roofline; build/bench/bandwidth);
#   compare    ds4ref against llama.cpp on models/fullwidth.gguf at each
#              thread count (bench/compare.sh);
#   long       the long-context case at the largest thread count: an
#              8192-token prompt on models/fullwidth.gguf (make bench-long);
#   fulldepth  the 43-layer model end to end at the largest thread count,
#              ds4ref (per-layer times) and llama.cpp.
# Models are made on first use (fullwidth 2.4 GB, fulldepth 13.6 GB).
# Prints the report; OUT=FILE also writes it there.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:?usage: bench/measure.sh LLAMA_LIBDIR [THREADS...]}
shift
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(2)
top=${threads[${#threads[@]} - 1]}
parts=" ${PARTS:-bandwidth compare long} "
has() { [[ $parts == *" $1 "* ]]; }
make --no-print-directory -s ds4ref ds4ref-bench build/bench/llama_time build/bench/bandwidth >&2
if has compare || has long; then make --no-print-directory -s models/fullwidth.gguf >&2; fi
if has fulldepth; then make --no-print-directory -s models/fulldepth.gguf >&2; fi
{
    echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "== $(./ds4ref --version)"
    if has bandwidth; then
        for t in "${threads[@]}"; do OMP_NUM_THREADS=$t build/bench/bandwidth; done
    fi
    if has compare; then
        echo "== ds4ref vs llama.cpp, models/fullwidth.gguf"
        OUT= REPS=${REPS:-3} bench/compare.sh models/fullwidth.gguf "$lib" "${threads[@]}"
    fi
    if has long; then
        echo "== long context: 8192-token prompt on models/fullwidth.gguf, $top threads"
        ./ds4ref-bench -m models/fullwidth.gguf -t "$top" -p 8192 -n 16 --warm
    fi
    if has fulldepth; then
        echo "== fulldepth (43 layers), $top threads"
        ./ds4ref-bench -m models/fulldepth.gguf -t "$top" -p 256 -n 8 --warm --layers 2>&1
        build/bench/llama_time "$lib" models/fulldepth.gguf "$top" decode 8 1 1
        build/bench/llama_time "$lib" models/fulldepth.gguf "$top" prefill 256 1 0
    fi
} 2>&1 | tee "${OUT:-/dev/null}"
