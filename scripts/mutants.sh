#!/usr/bin/env bash
# Mutation check (make mutants): applies each one-line mutation of
# tests/mutants.txt to the math sources in a scratch copy of the tree (the
# working tree is never touched), rebuilds, runs the fast tests (those that
# need nothing outside the repository) and prints which tests killed it.
# Fails when an entry no longer applies or a mutant survives.
#
#   scripts/mutants.sh [WORK_DIR]               (default build/mutants)
#   scripts/mutants.sh --first-kill [WORK_DIR]  (make test's run)
#
# The full run (make mutants) runs every test on every mutant, so its table
# says which tests kill each one.  --first-kill runs the tests one at a
# time, fastest first, and stops at the first that fails: the same verdict
# (killed or survived) for a fraction of the time, its table marking the
# tests it did not need to run with "-".  An entry's optional "first: TEST"
# line names the test that kills it, tried before the others.
#
# The scratch tree is WORK_DIR/tree; its build directory is kept between
# runs, so only what a mutation touches is recompiled.  Tests run with one
# OpenMP thread: the bits do not depend on it, and the run stays quick on a
# machine that is busy with something else.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
first_kill=0
if [ "${1:-}" = --first-kill ]; then
    first_kill=1
    shift
fi
work=${1:-build/mutants}
case "$work" in /*) ;; *) work="$root/$work" ;; esac
list=$root/tests/mutants.txt
tree=$work/tree
# Fastest first (about 0.01 s to 6 s each): --first-kill tries them in this order.
tests=(test_blockfp test_qat test_formats test_actround test_rope test_dspark test_dot test_model test_ops test_mtp test_oracle test_hfbind)
jobs=$(nproc 2>/dev/null || echo 2)
test_timeout=300
unset MAKEFLAGS MFLAGS MAKELEVEL

# ---- the list ----
titles=() files=() froms=() tos=() firsts=()
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
        '== '*) titles+=("${line#== }"); firsts+=("") ;;
        'first: '*) firsts[${#titles[@]} - 1]=${line#first: } ;;
        'file: '*) files+=("${line#file: }") ;;
        'from: '*) froms+=("${line#from: }") ;;
        'to: '*) tos+=("${line#to: }") ;;
        ''|'#'*) ;;
        *) echo "mutants: $list: unexpected line: $line" >&2; exit 1 ;;
    esac
done < "$list"
n=${#titles[@]}
if [ "$n" -eq 0 ] || [ ${#files[@]} -ne "$n" ] || [ ${#froms[@]} -ne "$n" ] || [ ${#tos[@]} -ne "$n" ]; then
    echo "mutants: $list: every entry needs a title, file:, from: and to:" >&2
    exit 1
fi

# Every entry must apply to the sources as they are now, before anything is
# built: exactly one occurrence of the original text; its first: names one
# of the tests.
bad=0
for ((i = 0; i < n; i++)); do
    f=${files[i]} from=${froms[i]}
    if [ -n "${firsts[i]}" ] && [[ " ${tests[*]} " != *" ${firsts[i]} "* ]]; then
        echo "mutation $((i + 1)): first: ${firsts[i]} is not one of the tests (${titles[i]})" >&2
        bad=1
    fi
    if [ ! -f "$f" ]; then
        echo "mutation $((i + 1)) no longer applies: $f does not exist (${titles[i]})" >&2
        bad=1
        continue
    fi
    content=$(< "$f")
    rest=${content#*"$from"}
    if [ "$rest" = "$content" ]; then
        echo "mutation $((i + 1)) no longer applies: $f has no '$from' (${titles[i]})" >&2
        bad=1
    elif [[ $rest == *"$from"* ]]; then
        echo "mutation $((i + 1)) is ambiguous: '$from' occurs more than once in $f (${titles[i]})" >&2
        bad=1
    fi
done
[ $bad -eq 0 ] || exit 1

# ---- the scratch tree ----
# A run interrupted while a mutation was applied may have left objects built
# from it, newer than the pristine sources copied below: start over then.
[ -e "$tree/.mutated" ] && rm -rf "$tree"
mkdir -p "$tree" "$work/logs"
find "$tree" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
# The sources: what git tracks or would track; outside a git checkout,
# everything but the build outputs (.gitignore's list).
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard
else
    find . -mindepth 1 -maxdepth 1 ! -name build ! -name models ! -name ds4ref ! -name ds4_test \
        ! -name 'ds4ref-*' ! -name tmp -printf '%P\0'
fi | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp -a --parents -t "$tree"

build() { # LOG [TEST...]: the tests named, or every one
    local log=$1
    shift
    local want=("$@")
    [ ${#want[@]} -gt 0 ] || want=("${tests[@]}")
    make -C "$tree" -j"$jobs" BUILD=build "${want[@]/#/build/}" > "$log" 2>&1
}

# run_tests LABEL: one result per test in results[] ("pass" or "FAIL"); the
# tests run one thread each, one per core at a time, each writing its exit
# status to a file.
run_tests() {
    local label=$1 t
    results=()
    for t in "${tests[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
        ( (cd "$tree" && OMP_NUM_THREADS=1 timeout "$test_timeout" "build/$t") \
              > "$work/logs/$label-$t.log" 2>&1
          echo $? > "$work/logs/$label-$t.rc" ) &
    done
    wait
    for t in "${tests[@]}"; do
        if [ "$(cat "$work/logs/$label-$t.rc" 2>/dev/null)" = 0 ]; then results+=(pass)
        else results+=(FAIL); fi
    done
}

# run_until_kill LABEL [FIRST]: the tests one at a time with every core,
# test FIRST first (the one the entry names as its killer), then the others
# in order, until one fails; results[] as run_tests', "-" for those not run.
# When only FIRST was built (built_only), the others are built before they
# run.
run_until_kill() {
    local label=$1 first=${2:-} k rc order=()
    results=()
    for ((k = 0; k < ${#tests[@]}; k++)); do
        results+=(-)
        if [ "${tests[k]}" = "$first" ]; then order=("$k" "${order[@]}"); else order+=("$k"); fi
    done
    for k in "${order[@]}"; do
        (cd "$tree" && OMP_NUM_THREADS=$jobs timeout "$test_timeout" "build/${tests[k]}") \
            > "$work/logs/$label-${tests[k]}.log" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then results[k]=pass; else results[k]=FAIL; return; fi
        if [ -n "$built_only" ]; then
            built_only=
            if ! build "$work/logs/$label-build-rest.log"; then
                tail -20 "$work/logs/$label-build-rest.log"
                echo "mutation $label: the other tests do not build" >&2
                exit 1
            fi
        fi
    done
}

t0=$(date +%s)
if ! build "$work/logs/baseline-build.log"; then
    tail -20 "$work/logs/baseline-build.log"
    echo "mutants: the unmutated tree does not build" >&2
    exit 1
fi
run_tests baseline
for ((k = 0; k < ${#tests[@]}; k++)); do
    if [ "${results[k]}" != pass ]; then
        echo "mutants: ${tests[k]} fails on the unmutated tree (see $work/logs/baseline-${tests[k]}.log)" >&2
        exit 1
    fi
done
echo "baseline: built and passed in $(($(date +%s) - t0)) s"

# ---- the mutants ----
table=() survived=0
for ((i = 0; i < n; i++)); do
    t1=$(date +%s)
    f=$tree/${files[i]}
    cp -p "$f" "$work/original"
    touch "$tree/.mutated"
    content=$(< "$f")
    printf '%s\n' "${content/"${froms[i]}"/"${tos[i]}"}" > "$f"
    # --first-kill builds the entry's first: test alone, and the others only
    # if that one lets the mutant live.
    built_only=
    [ $first_kill -eq 1 ] && built_only=${firsts[i]}
    if ! build "$work/logs/$((i + 1))-build.log" ${built_only:+"$built_only"}; then
        tail -20 "$work/logs/$((i + 1))-build.log"
        echo "mutation $((i + 1)) does not compile (${titles[i]}): fix its to: text" >&2
        cp -p "$work/original" "$f" && touch "$f" && rm -f "$tree/.mutated"
        exit 1
    fi
    if [ $first_kill -eq 1 ]; then run_until_kill "$((i + 1))" "${firsts[i]}"; else run_tests "$((i + 1))"; fi
    # The restored file is newer than the mutant's objects: the next build
    # recompiles it.
    cp -p "$work/original" "$f" && touch "$f" && rm -f "$tree/.mutated"
    row=$(printf '%2d %-62s' $((i + 1)) "${titles[i]}")
    killed=0
    for ((k = 0; k < ${#tests[@]}; k++)); do
        if [ "${results[k]}" = FAIL ]; then
            row+=$(printf ' %-8s' kill)
            killed=1
        elif [ "${results[k]}" = - ]; then
            row+=$(printf ' %-8s' -)
        else
            row+=$(printf ' %-8s' .)
        fi
    done
    if [ $killed -eq 1 ]; then row+=" killed"; else row+=" SURVIVED"; survived=$((survived + 1)); fi
    table+=("$row ($(($(date +%s) - t1)) s)")
done
# Leave the scratch build matching the pristine sources.
build "$work/logs/final-build.log" || true

echo
header=$(printf '%2s %-62s' '#' mutation)
for t in "${tests[@]}"; do header+=$(printf ' %-8s' "${t#test_}"); done
echo "$header"
printf '%s\n' "${table[@]}"
echo
echo "$n mutants, $((n - survived)) killed, $survived survived, $(($(date +%s) - t0)) s (logs in $work/logs)"
[ $survived -eq 0 ]
