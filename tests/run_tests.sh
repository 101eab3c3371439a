#!/usr/bin/env bash
# Runs the whole test suite: every cmocka unit test binary, the ds4_test runner
# on the committed goldens, then a valgrind pass over a fast subset.
# Usage: tests/run_tests.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
fail=0
summary=()

run() {
    local name=$1; shift
    echo "=== $name"
    if "$@"; then summary+=("PASS $name"); else summary+=("FAIL $name"); fail=1; fi
}

for t in "$build"/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done

run "ds4_test" ./ds4_test
# The --logprob-vectors code path on the default synthetic model, with an
# official.vec that ds4ref wrote for it (the real model is not available in CI).
run "ds4_test --logprob-vectors (synthetic)" env DS4_TEST_MODEL=models/tiny.gguf \
    DS4_TEST_VECTOR_FILE=vectors/tiny.vec ./ds4_test --logprob-vectors

run "cli" bash tests/cli.sh

# valgrind: the unit tests that declare themselves fast enough (tests/valgrind.list)
if command -v valgrind >/dev/null 2>&1; then
    while read -r name args; do
        case "$name" in ''|'#'*) continue ;; esac
        # shellcheck disable=SC2086
        run "valgrind $name $args" env OMP_NUM_THREADS=2 DS4REF_VALGRIND=1 \
            valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
            --suppressions=tests/valgrind.supp "$name" $args
    done < tests/valgrind.list
else
    echo "valgrind not installed: valgrind pass skipped"
    summary+=("SKIP valgrind (not installed)")
fi

echo
printf '%s\n' "${summary[@]}"
if [ $fail -ne 0 ]; then echo "tests: FAILED"; exit 1; fi
echo "tests: all passed"
