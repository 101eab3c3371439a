#!/usr/bin/env bash
# Runs the whole test suite: every cmocka unit test binary, the ds4_test runner
# on the committed goldens, the CLI and install tests, the Python package's
# tests (python/tests, when an interpreter has NumPy and pytest), a valgrind
# pass over a fast subset, the suite again under ASan and UBSan, the fuzz
# targets briefly, the mutation check, the short portability matrix and a
# benchmark smoke run.
# Usage: tests/run_tests.sh [--quick] BUILD_DIR
#   --quick (make check): the unit tests, the layering and symbol checks,
#   ds4_test on the goldens and the command-line tests only, for the inner
#   loop.
set -uo pipefail
quick=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
build=${1:-build}
fail=0
summary=()
skips=()      # "STAGE: TEST: REASON", for the closing summary
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
started=$SECONDS

# run NAME COMMAND...: one stage.  Its output goes to the terminal and to a
# log, from which tests/skips.awk takes what it skipped and why.  A stage
# that prints nothing for 30 seconds gets a line saying it is still running,
# so a long one (conform, valgrind, the sanitizer builds) never goes quiet.
run() {
    local name=$1; shift
    local log=$logs/stage.log start=$SECONDS quiet=0 size=0 now rc
    echo "=== $name"
    "$@" > >(tee "$log") 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        now=$(stat -c %s "$log" 2>/dev/null || echo 0)
        if [ "$now" != "$size" ]; then size=$now; quiet=0; else quiet=$((quiet + 1)); fi
        if [ $quiet -ge 30 ]; then
            echo "--- $name: still running ($((SECONDS - start)) s)"
            quiet=0
        fi
    done
    wait "$pid"
    rc=$?
    # tee may still be writing the last lines.
    sleep 0.1
    # LeakSanitizer's tracer dying at exit is the tool's fault, not a leak
    # (google/sanitizers#1353; checks.sh's status_is says more): the stage
    # runs once more, as status_is runs a command again.
    if [ $rc -ne 0 ] && grep -q 'LeakSanitizer has encountered a fatal error' "$log" &&
       ! grep -q 'detected memory leaks' "$log"; then
        echo "  (LeakSanitizer's tracer failed at exit, not a leak: run again)"
        "$@" > >(tee "$log") 2>&1
        rc=$?
        sleep 0.1
    fi
    while IFS= read -r s; do skips+=("$name: $s"); done < <(awk -f tests/skips.awk "$log")
    if [ $rc -eq 0 ]; then summary+=("PASS $name ($((SECONDS - start)) s)")
    else summary+=("FAIL $name ($((SECONDS - start)) s)"); fail=1; fi
}

# The closing summary, and the exit status.
finish() {
    echo
    printf '%s\n' "${summary[@]}"
    # Every skipped test with its reason, those for want of ../shared (the
    # fixtures a clone does not have) named as such.
    n_shared=0
    for s in "${skips[@]}"; do case "$s" in *../shared*) n_shared=$((n_shared + 1)) ;; esac; done
    echo
    echo "skipped: ${#skips[@]}, of which $n_shared for want of a ../shared fixture"
    for s in "${skips[@]}"; do
        case "$s" in
            *../shared*) echo "  - $s [../shared fixture missing]" ;;
            *) echo "  - $s" ;;
        esac
    done
    echo "time: $((SECONDS - started)) s"
    local n_pass=0 n_fail=0 s
    for s in "${summary[@]}"; do
        case "$s" in PASS*) n_pass=$((n_pass + 1)) ;; FAIL*) n_fail=$((n_fail + 1)) ;; esac
    done
    # The closing line: stages passed and failed, tests skipped.
    echo "tests: $n_pass passed, $n_fail failed, ${#skips[@]} skipped"
    [ $fail -eq 0 ]
    exit
}

# skip NAME REASON: a stage not run at all.
skip() {
    summary+=("SKIP $1")
    skips+=("$1: not run: $2")
}

for t in "$build"/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done

# The library's layering (docs/ARCHITECTURE.md), and proof that the check
# catches the faults it looks for.
run "layers: includes and calls go downward, no cycles" scripts/layers.sh "$build"
run "layers: a cycle, a self-include, an upward edge (of files and of folders) and a process started by libds4ref are reported" bash -c '
    e=$(mktemp); trap "rm -f $e" EXIT
    printf "%s\n" "ref/text/json.c ref/decode/session.h" "ref/forward/a.c ref/forward/b.c" \
        "ref/forward/b.c ref/forward/a.c" "ref/api/api.c check/conform/conform.h" \
        "quant/dot.c ref/model/model.h" "ref/model/model.c quant/dot.h" > "$e"
    out=$(scripts/layers.sh --edges "$e") && exit 1
    grep -q "upward edge ref/text/json.c -> ref/decode/session.h" <<< "$out" &&
    grep -q "upward folder edge quant/ -> ref/ (quant/dot.c -> ref/model/model.h)" <<< "$out" &&
    grep -q "cycle of folders" <<< "$out" &&
    grep -q "upward edge ref/api/api.c -> check/conform/conform.h" <<< "$out" &&
    grep -q "cycle" <<< "$out" || exit 1
    printf "%s\n" "ref/format/golden.c ref/format/golden.h" "ref/format/golden.h ref/format/golden.h" > "$e"
    out=$(scripts/layers.sh --edges "$e") && exit 1
    grep -q "ref/format/golden.h depends on itself" <<< "$out" || exit 1
    d=$(mktemp -d); trap "rm -rf $e $d" EXIT
    printf "#include \"ds4ref.h\"\n#include \"ref/decode/session.h\"\n" > "$d/p.c"
    out=$(scripts/layers.sh --programs "$d") && exit 1
    grep -q "p.c includes \"ref/decode/session.h\": programs use the public headers only" <<< "$out" || exit 1
    printf "%s\n" "ref/text/hf_vocab.c posix_spawnp" "base/file.c mkstemp" "ref/api/api.c socket" > "$e"
    out=$(scripts/layers.sh --calls "$e") && exit 1
    grep -q "hf_vocab.c calls posix_spawnp: libds4ref starts no process" <<< "$out" &&
    grep -q "api.c calls socket" <<< "$out" && [ "$(grep -c calls <<< "$out")" = 2 ]'
# Symbol names (docs/ARCHITECTURE.md, Names): every global symbol of the two
# archives carries its library's prefix and its file's; and the check fails
# on a symbol without them (gguf_open, ggml's name) or in the wrong file.
run "symbols: the libraries' and the files' prefixes" scripts/symbols.sh "$build"
run "symbols: a symbol without its prefixes is reported" bash -c '
    e=$(mktemp); trap "rm -f $e" EXIT
    printf "%s\n" "libds4ref.a quant/gguf.o gguf_open" "libds4ref.a quant/gguf.o ds4_gguf_open" \
        "libds4ref.a ref/forward/moe.o ds4_attention" "libds4check.a check/diff/diff.o ds4_diff_check" > "$e"
    out=$(scripts/symbols.sh --list "$e") && exit 1
    grep -q "gguf.o defines gguf_open, outside" <<< "$out" &&
    grep -q "moe.o defines ds4_attention, which does not start with ds4_moe" <<< "$out" &&
    grep -q "diff.o defines ds4_diff_check, outside" <<< "$out" &&
    [ "$(grep -c defines <<< "$out")" = 3 ]'

# The documents: every path of this tree they name exists; the README's
# Quick start and .ci/run install through the one script.
run "docs and source comments: the paths and files they name exist" python3 tests/docs_paths.py
run "docs: the README's Quick start and .ci/run install with scripts/install-deps.sh" bash -c '
    grep -q "^scripts/install-deps.sh && make && ./ds4ref " README.md &&
    grep -q "^scripts/install-deps.sh" .ci/run && grep -q "^make test$" .ci/run'

run "ds4_test" ./ds4_test
# The --logprob-vectors code path on the default synthetic model, with an
# official.vec that ds4ref wrote for it (the real model is not available in CI).
run "ds4_test --logprob-vectors (synthetic)" env DS4_TEST_MODEL=models/tiny.gguf \
    DS4_TEST_VECTOR_FILE=vectors/tiny.vec ./ds4_test --logprob-vectors

run "cli" bash tests/cli.sh
run "server (ds4ref-server against ds4ref's goldens, batching, errors, signals)" python3 tests/server_test.py .
[ -n "$quick" ] && finish
run "conform (ds4ref-conform against its test backend and itself)" bash tests/conform.sh "$build"
run "install + example via pkg-config" bash tests/install.sh

# The Python package (python/tests): skipped, not failed, without an
# interpreter that has NumPy and pytest, and in sanitizer builds (their
# library needs its sanitizer runtime preloaded into Python).
if [ -n "${DS4REF_SANITIZER:-}" ]; then
    skip python "a $DS4REF_SANITIZER build: its library needs the sanitizer's runtime preloaded"
elif py=$(tests/python.sh --find); then
    run "python ($py)" tests/python.sh "$build"
else
    echo "SKIP python: $py"
    skip python "$py"
fi

# valgrind: the unit tests that declare themselves fast enough (tests/valgrind.list).
# valgrind runs a process's threads one at a time, so the list runs one
# process per core, in the background (each into its own log and status
# file); the stages then show them in the list's order as each ends.
vg_result() {   # vg_result PREFIX: wait for PREFIX.rc, show PREFIX.log, exit with its status
    while [ ! -e "$1.rc" ]; do
        # The scheduler gone without the status: it was killed, or the disk
        # is full; the stage fails rather than waiting forever.
        if ! kill -0 "$vg_sched" 2>/dev/null && [ ! -e "$1.rc" ]; then
            cat "$1.log" 2>/dev/null
            echo "valgrind: no exit status for this run (its scheduler ended without one)"
            return 1
        fi
        sleep 1
    done
    cat "$1.log"
    return "$(cat "$1.rc")"
}
if [ -n "${DS4REF_SANITIZER:-}" ]; then
    skip valgrind "a $DS4REF_SANITIZER build: the sanitizer does that job"
elif command -v valgrind >/dev/null 2>&1; then
    mkdir -p "$logs/valgrind"
    (
        i=0
        while read -r name args; do
            case "$name" in ''|'#'*) continue ;; esac
            while [ "$(jobs -rp | wc -l)" -ge "$(nproc 2>/dev/null || echo 2)" ]; do wait -n; done
            # GOMP_SPINCOUNT: set here, the programs do not execute themselves
            # again to set it (programs/wait_policy.h), which would leave valgrind.
            # shellcheck disable=SC2086
            ( env OMP_NUM_THREADS=2 DS4REF_VALGRIND=1 GOMP_SPINCOUNT=10000 \
                valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
                --suppressions=tests/valgrind.supp "$name" $args > "$logs/valgrind/$i.log" 2>&1
              echo $? > "$logs/valgrind/$i.tmp" && mv "$logs/valgrind/$i.tmp" "$logs/valgrind/$i.rc" ) &
            i=$((i + 1))
        done < tests/valgrind.list
        wait
    ) &
    vg_sched=$!
    trap 'kill "$vg_sched" 2>/dev/null; rm -rf "$logs"' EXIT
    i=0
    while read -r name args; do
        case "$name" in ''|'#'*) continue ;; esac
        run "valgrind $name $args" vg_result "$logs/valgrind/$i"
        i=$((i + 1))
    done < tests/valgrind.list
else
    echo "valgrind not installed: valgrind pass skipped"
    skip valgrind "not installed"
fi

# Sanitizers and fuzzing (docs/RELIABILITY.md): the whole suite again, built
# with ASan and UBSan together (make sanitize, in its own build dir: one pass
# where two took half an hour), then every fuzz target for a short while
# (make fuzz-smoke).  Not inside that run itself; DS4REF_SKIP_SANITIZERS=1
# skips it for a quick run.
if [ -n "${DS4REF_SANITIZER:-}" ]; then
    :
elif [ -n "${DS4REF_SKIP_SANITIZERS:-}" ]; then
    skip "sanitize, fuzz-smoke" "DS4REF_SKIP_SANITIZERS is set"
elif ! command -v clang >/dev/null 2>&1; then
    skip "sanitize, fuzz-smoke" "clang not installed"
else
    jobs=$(nproc 2>/dev/null || echo 2)
    for target in sanitize fuzz-smoke; do
        run "make $target" make --no-print-directory -j"$jobs" BUILD="$build" "$target"
    done
fi

# Mutation check (scripts/mutants.sh --first-kill): every one-line mutation
# of tests/mutants.txt must make a fast test fail; each mutant's tests run
# fastest first up to the first that kills it (make mutants runs them all,
# for the full kill table).  Not inside the sanitizer runs, which test the
# same sources.
if [ -z "${DS4REF_SANITIZER:-}" ]; then
    run "make mutants-quick" make --no-print-directory BUILD="$build" mutants-quick
fi

# Portable goldens (docs/PORTABILITY.md): the CI subset of make portability,
# other compilers, -O levels, targets and aarch64 under qemu when installed.
if [ -n "${DS4REF_SANITIZER:-}" ]; then
    :
else
    run "make portability-short" make --no-print-directory portability-short
fi

# A few seconds of benchmark on the tiny model: ds4ref-bench must run end to
# end (CSV, layer timing with its fork/join count, kernels, the FMA peak); its
# numbers are not checked.
run "bench (tiny, smoke)" bash -c 'set -o pipefail
    out=$(./ds4ref-bench -m models/tiny.gguf -p 8,16 -n 4 -t 2 --layers 2>&1) || { echo "$out"; exit 1; }
    grep -Eq "^fork_joins_per_step: (-1|[0-9]+)$" <<<"$out" || { echo "$out"; exit 1; }
    # Where the regions are counted (GCC), each is timed by its name.
    grep -q "^fork_joins_per_step: -1$" <<<"$out" ||
        grep -Eq "^matmul_many_plain\._omp_fn\.[0-9]+[^,]*,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+$" <<<"$out" ||
        { echo "$out"; exit 1; }
    ./ds4ref-bench --kernels --kernel-rows 16 -t 2 && ./ds4ref-bench --fma -t 2'

finish
