#!/usr/bin/env bash
# ds4ref against llama.cpp's CPU backend, side by side: the same GGUF, the
# same machine, the same thread counts, one program after the other in one
# run (docs/PERFORMANCE.md says why only ratios measured this way count).
#
#   bench/compare.sh MODEL LLAMA_LIBDIR [THREADS...]     (default threads: 2)
#
# LLAMA_LIBDIR is bins/linux-x64 of the npm package @node-llama-cpp/linux-x64
# (npm install @node-llama-cpp/linux-x64@3.22.1).  For each thread count:
#   decode   32 tokens one at a time from an empty context (ds4ref-bench
#            -p 1 -n 32; llama_time decode 32), tokens/s;
#   prefill  one 256-token prompt (ds4ref-bench -p 256 in one chunk;
#            llama_time prefill 256), tokens/s;
# llama.cpp decodes with its repacked weights (its default) and prefills
# without them (bench/llama_time.c says why); each the median of REPS runs (default 3; ds4ref-bench reports one run, so
# it is run REPS times).  Both read the whole model once before timing
# (ds4ref-bench --warm; llama.cpp loads it).  Environment: REPS, DS4REF_BIN
# (where ds4ref-bench is, default the repository root), OUT (also write the
# table there).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/compare.sh MODEL LLAMA_LIBDIR [THREADS...]}
lib=${2:?usage: bench/compare.sh MODEL LLAMA_LIBDIR [THREADS...]}
shift 2
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(2)
reps=${REPS:-3}
bin=${DS4REF_BIN:-.}
make --no-print-directory -s build/bench/llama_time >&2

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ds4ref-bench's CSV: column 3 prefill_tps, column 5 gen_tps.
ds4ref() { # threads prompt gen column
    for _ in $(seq "$reps"); do
        "$bin/ds4ref-bench" -m "$model" -t "$1" -p "$2" -n "$3" --chunk "$2" --warm --no-header |
            cut -d, -f"$4"
    done | median
}

llama() { # threads mode n repack
    build/bench/llama_time "$lib" "$model" "$1" "$2" "$3" "$reps" "$4" |
        sed -n 's/.* tokens_per_s=\([0-9.]*\).*/\1/p'
}

row() { awk -v t="$1" -v c="$2" -v d="$3" -v l="$4" \
          'BEGIN { printf "%-8s %-8s %14.3f %14.3f %8.2f\n", t, c, d, l, d / l }'; }

{
    echo "model: $model"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "ds4ref kernels: $("$bin/ds4ref" --version)"
    printf '%-8s %-8s %14s %14s %8s\n' threads case ds4ref_tok_s llama_tok_s ratio
    for t in "${threads[@]}"; do
        d=$(ds4ref "$t" 1 32 5)
        l=$(llama "$t" decode 32 1)
        row "$t" decode "$d" "$l"
        d=$(ds4ref "$t" 256 1 3)
        l=$(llama "$t" prefill 256 0)
        row "$t" prefill "$d" "$l"
    done
} | tee "${OUT:-/dev/null}"
