#!/usr/bin/env bash
# Builds and runs the libFuzzer targets (docs/RELIABILITY.md).
#
#   tests/fuzz/fuzz.sh build            the targets and their seed corpora
#   tests/fuzz/fuzz.sh smoke [SECONDS]  every target for SECONDS (default 30),
#                                       from the seeds only (what CI runs)
#   tests/fuzz/fuzz.sh long [SECONDS]   every target for SECONDS (default 3600),
#                                       growing a kept corpus in build/fuzz/corpus
#   tests/fuzz/fuzz.sh run TARGET FILE...   replay inputs (a crash artifact);
#                                       TARGET is fuzz_gguf or gguf, ...
#
# Everything goes to $FUZZ_BUILD (default build/fuzz): the library built
# with clang and -fsanitize=fuzzer-no-link,address,undefined, the targets
# fuzz_gguf, fuzz_model, fuzz_dflash, fuzz_tokenizer, fuzz_parsers, fuzz_safetensors, fuzz_hfbind,
# fuzz_server (ds4ref-server's request parser, with jansson), fuzz_shard
# (ds4ref-conform's shard files, what --merge reads), the
# seeds (generated, not committed), logs, crash artifacts and summary-MODE.txt
# with the executions of each target.  Targets run side by side, one per core.
# Exit status: 0 when no target crashed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${FUZZ_BUILD:-build/fuzz}
cc=${FUZZ_CC:-clang}
jobs=$(nproc 2>/dev/null || echo 2)
targets=(gguf model dflash tokenizer parsers safetensors hfbind server shard)
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cflags="-std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter \
-ffp-contract=off -fno-fast-math -fopenmp -I. -Iinclude -Itests -Itests/fuzz $san"
# Inputs larger than this are not tried (the largest seed, a golden, is ~140 KB).
declare -A max_len=([gguf]=65536 [model]=4096 [dflash]=4096 [tokenizer]=4096 [parsers]=300000 [safetensors]=16384 [hfbind]=65536 [server]=16384 [shard]=16384)

build() {
    # The library through the Makefile's own rules, into its own build dir.
    make --no-print-directory -j"$jobs" BUILD="$out" CC="$cc" OPT=-O1 \
        EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $san" "$out/libds4check.a" "$out/libds4ref.a" \
        "$out/tests/malformed.o"
    for t in "${targets[@]}"; do
        local extra=()
        [ "$t" = server ] && extra=(-Iprograms programs/server_request.c -ljansson)
        # shellcheck disable=SC2086
        $cc $cflags -fsanitize=fuzzer "tests/fuzz/fuzz_$t.c" tests/fuzz/fuzzutil.c tests/chat_msgs.c tests/xzvocab.c \
            "${extra[@]}" "$out/libds4check.a" "$out/libds4ref.a" -lcurl -lpcre2-8 -lm -o "$out/fuzz_$t"
    done
    # shellcheck disable=SC2086
    $cc $cflags -fsanitize=fuzzer-no-link tests/fuzz/seeds.c tests/fuzz/fuzzutil.c \
        "$out/tests/malformed.o" "$out/libds4ref.a" -lpcre2-8 -lm -o "$out/seeds"
    rm -rf "$out/seeds.d"
    "$out/seeds" "$out/seeds.d"
}

# run_one TARGET SECONDS CORPUS: fuzz, then one summary line into $out/result-TARGET.
run_one() {
    local t=$1 secs=$2 corpus=$3
    rm -rf "$out/artifacts/$t"
    mkdir -p "$corpus" "$out/artifacts/$t" "$out/logs"
    local log="$out/logs/$t.log" rc=0
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        "$out/fuzz_$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=3072 \
        -max_len="${max_len[$t]}" -print_final_stats=1 -close_fd_mask=1 \
        -artifact_prefix="$out/artifacts/$t/" "$corpus" "$out/seeds.d/$t" > "$log" 2>&1 || rc=$?
    local execs corpus_n cov
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corpus_n=$(find "$corpus" -type f | wc -l)
    printf '%-15s %6ss %12s executions  cov %-6s corpus %-6s %s\n' "fuzz_$t" "$secs" \
        "${execs:-?}" "${cov:-?}" "$corpus_n" \
        "$([ $rc -eq 0 ] && echo "no crash" || echo "CRASH (exit $rc): see $log")" \
        > "$out/result-$t"
    return $rc
}

fuzz_all() {
    local mode=$1 secs=$2 failed=0 running=0
    local -a pids=()
    for t in "${targets[@]}"; do
        local corpus="$out/corpus/$t"
        if [ "$mode" = smoke ]; then corpus="$out/smoke/$t"; rm -rf "$corpus"; fi
        run_one "$t" "$secs" "$corpus" &
        pids+=($!)
        running=$((running + 1))
        if [ $running -ge "$jobs" ]; then
            wait "${pids[0]}" || failed=1
            pids=("${pids[@]:1}")
            running=$((running - 1))
        fi
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    {
        echo "fuzz $mode, $secs s per target, $(date -u +%Y-%m-%dT%H:%MZ), $($cc --version | head -1)"
        for t in "${targets[@]}"; do cat "$out/result-$t"; done
    } | tee "$out/summary-$mode.txt"
    return $failed
}

mode=${1:-smoke}
case "$mode" in
build) build ;;
smoke) build && fuzz_all smoke "${2:-30}" ;;
long) build && fuzz_all long "${2:-3600}" ;;
run)
    [ $# -ge 3 ] || { echo "usage: $0 run TARGET FILE..." >&2; exit 2; }
    t=${2#fuzz_}
    shift 2
    case " ${targets[*]} " in
        *" $t "*) ;;
        *) echo "fuzz.sh: no target \"$t\": the targets are $(printf "fuzz_%s " "${targets[@]}")" >&2; exit 2 ;;
    esac
    [ -x "$out/fuzz_$t" ] || { echo "fuzz.sh: $out/fuzz_$t is not built: run tests/fuzz/fuzz.sh build" >&2; exit 2; }
    "$out/fuzz_$t" "$@"
    ;;
*) echo "usage: $0 build | smoke [SECONDS] | long [SECONDS] | run TARGET FILE..." >&2; exit 2 ;;
esac
