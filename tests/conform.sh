#!/usr/bin/env bash
# ds4ref-conform end to end (docs/CONFORM.md):
#   - the test backend (tests/conform_backend.c, on the public API) without a
#     bug passes every cell, in both modes; with each of the four injected
#     bugs, exactly the cells the bug lives in fail;
#   - the self-check (--backend ds4ref) passes on the tiny-spec model, every
#     speculative cell exercised: the full default matrix with --full (make
#     conform-full), a sample of it otherwise, a narrower one in the
#     sanitizer builds and in exact mode;
#   - the ds4 preset, through a stand-in `ds4` that maps its flags to ds4ref;
#   - the cache, the exit statuses, errors before work, the progress line.
# Usage: tests/conform.sh [--full] BUILD_DIR (run from the repository root).
set -uo pipefail
full=
if [ "${1:-}" = --full ]; then full=1; shift; fi
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/checks.sh
. tests/checks.sh

conform() { ./ds4ref-conform -q --no-cache "$@"; }

# The cells of a --json report, one "draft chunk batch prompt status" line each.
cells() {
    grep '^{"draft"' "$1" |
        sed -E 's/^\{"draft":([0-9]+),"chunk":"?([a-z0-9]+)"?,"chunk_tokens":[0-9]+,"batch":([0-9]+),"prompt":"([^"]*)","status":"([^"]*)".*/\1 \2 \3 \4 \5/'
}

# flagged_exactly JSON 'AWK-CONDITION': the cells that fail are exactly those
# where the condition (over d, c, b; c is 0 for the whole prompt) holds, and
# every other cell passes.
flagged_exactly() {
    local json=$1 cond=$2
    [ "$(cells "$json" | wc -l)" -gt 0 ] || return 1
    cells "$json" | awk -v cond="$cond" '
        { d = $1; c = ($2 == "whole") ? 0 : $2; b = $3 }
        { want = '"$2"' ? "fail" : "pass" }
        $5 != want { print "  " $0 " (expected " want ")"; bad = 1 }
        END { exit bad }'
}

# flagged_exactly_as STATUS JSON 'AWK-CONDITION': the same with STATUS for
# the cells the condition holds for.
flagged_exactly_as() {
    local status=$1 json=$2 cond=$3
    [ "$(cells "$json" | wc -l)" -gt 0 ] || return 1
    cells "$json" | awk -v st="$status" '
        { d = $1; c = ($2 == "whole") ? 0 : $2; b = $3 }
        { want = '"$cond"' ? st : "pass" }
        $5 != want { print "  " $0 " (expected " want ")"; bad = 1 }
        END { exit bad }'
}

all_pass() {   # all_pass JSON: every cell passed (none n/a, tie or not exercised)
    [ "$(cells "$1" | wc -l)" -gt 0 ] && ! cells "$1" | awk '$5 != "pass" { print "  " $0; bad = 1 } END { exit !bad }'
}

# preset_with NAME PROGRAM: preset NAME's template (--backend-help) with
# {ds4ref} replaced by PROGRAM.
preset_with() {
    ./ds4ref-conform --backend-help |
        awk -v name="  $1:" 'found { sub(/^ +/, ""); print; exit } index($0, name) == 1 { found = 1 }' |
        sed "s|{ds4ref}|'$2'|"
}

# The backends' programs.  In a sanitizer build the code under test is
# ds4ref-conform and the references it computes; the backends it runs are
# the plain build's programs (DS4REF_PLAIN_BUILD and DS4REF_PLAIN_BIN, set
# by make sanitize), the same numbers in a fifth of the time.  The first
# check runs the sanitized test backend and the narrow self-check the
# sanitized ds4ref, so both still run under the sanitizer.
backend_args="-m {model} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} \
--draft {draft} --top-k {top_k} -c {ctx} --out {out}"
sanitized_backend="$build/conform-backend $backend_args"
backend=$sanitized_backend
self=ds4ref self_f32=ds4ref-f32 self_bin=$PWD/ds4ref
if [ -n "${DS4REF_SANITIZER:-}" ] && [ -x "${DS4REF_PLAIN_BUILD:-}/conform-backend" ] &&
    [ -x "${DS4REF_PLAIN_BIN:-}/ds4ref" ]; then
    backend="$DS4REF_PLAIN_BUILD/conform-backend $backend_args"
    self_bin=$DS4REF_PLAIN_BIN/ds4ref
    self=$(preset_with ds4ref "$self_bin")
    self_f32=$(preset_with ds4ref-f32 "$self_bin")
    echo "(a $DS4REF_SANITIZER build: the backends are the plain build's programs but in two checks)"
fi

# Two short prompts of the corpus keep the bug matrix quick.
mkdir -p "$tmp/prompts"
cp vectors/conform/chat.txt vectors/conform/code.txt "$tmp/prompts/"
# The plain tiny model: its context moves the logits a lot, so a state that
# holds a wrong token shows in the logprobs within a few steps.  The test
# backend drafts from its own greedy continuation, so the MTP head is not
# what makes its drafts accepted.
# Every bug has cells in and out of it either way, at its boundary: depth 3
# against 1 for verify-rows' d > 2, depth 3 over chunk 3 for stale-verify's
# d + 1 > c beyond chunk 1; --full adds depth 2, depth 8 and chunk 7.
# The sanitizer build, ten times slower, runs whole-prompt cells only (a
# prefill of one token at a time is most of a cell's time there) and two of
# the bugs: there it looks for memory faults, not verdicts, and every code
# path still runs.  The runs take two cells at a time, except the one
# --jobs 3 is compared with.  `small` is the matrix of the later self-checks
# in the sanitizer build.
bug_matrix="draft=0,1,3 chunk=1,3,whole batch=1,2"
[ -n "$full" ] && bug_matrix="draft=0,1,2,3,8 chunk=1,3,7,whole batch=1,2"
bugs=(verify-rows:'d > 2' stale-verify:'d + 1 > c && c > 0' batch-holes:'b > 1 && d >= 1' skip-bonus:'d == 1'
      row-pad:'b > 1' no-draft:'d > 0' verify-flip:'d > 0')
small=
if [ -n "${DS4REF_SANITIZER:-}" ]; then
    bug_matrix="draft=0,3 chunk=whole batch=1,2"
    bugs=(verify-rows:'d > 2' batch-holes:'b > 1 && d >= 1')
    small="draft=0,2 chunk=whole batch=1,2"
fi
bug_args=(-m models/tiny.gguf --mtp models/tiny-mtp.gguf --prompts "$tmp/prompts" --matrix "$bug_matrix")

check "the test backend without a bug: exit status 0" status_is 0 conform --jobs 2 --backend "$sanitized_backend" \
    "${bug_args[@]}" --json "$tmp/clean.json"
check "... every cell passes" all_pass "$tmp/clean.json"
# Exact mode (in the sanitizer build, the exact self-check below runs it).
if [ -z "${DS4REF_SANITIZER:-}" ]; then
    check "... and in exact mode" status_is 0 conform --jobs 2 --backend "$backend" "${bug_args[@]}" \
        --exact --json "$tmp/clean-exact.json"
    check "... every cell passes" all_pass "$tmp/clean-exact.json"
fi

for bug in "${bugs[@]}"; do
    name=${bug%%:*}
    cond=${bug#*:}
    jobs=2
    [ "$name" = batch-holes ] && jobs=1
    check "bug $name: exit status 1" status_is 1 conform --jobs $jobs --backend "$backend --bug $name" \
        "${bug_args[@]}" --json "$tmp/$name.json"
    cp "$tmp/out.txt" "$tmp/$name.txt"
    check "bug $name: fails exactly where $cond" flagged_exactly "$tmp/$name.json" "$cond"
    check "bug $name: the report names the smallest failing cell" \
        grep -q '^smallest failing cell:' "$tmp/$name.txt"
done
# --jobs: the commands of several cells at once, the same verdicts.
check "--jobs 3: the same verdicts as one at a time" bash -c '
    ./ds4ref-conform -q --no-cache --jobs 3 --backend "$1 --bug batch-holes" "${@:3}" --json "$2.j3" \
        > /dev/null 2>&1
    [ $? -eq 1 ] && diff <(grep "^{\"draft\"" "$2" | sed "s/\"seconds\":[^,]*,//") \
                         <(grep "^{\"draft\"" "$2.j3" | sed "s/\"seconds\":[^,]*,//")' \
    _ "$backend" "$tmp/batch-holes.json" "${bug_args[@]}"
# Shards (docs/CONFORM.md, "On a cluster"): a run with failing cells cut into
# three slices, each run apart, merges to the unsharded run's report and JSON
# (less the seconds).  Merges of a missing, doubled or foreign slice, or of a
# slice stopped midway (SIGTERM, as scancel sends), are refused by name, and
# the slice run again completes it.  The backend is a wrapper that can be
# slowed from the environment, so that one template serves every run.
slow="$tmp/slow-backend"
printf '#!/bin/sh\n[ -n "${CONFORM_SLOW:-}" ] && sleep "$CONFORM_SLOW"\nexec %s "$@"\n' \
    "${backend%% *}" > "$slow"
chmod +x "$slow"
shard_args=(--backend "$slow ${backend#* } --bug batch-holes" -m models/tiny.gguf
            --mtp models/tiny-mtp.gguf --prompts "$tmp/prompts" --matrix "draft=0,1 chunk=3,whole batch=1,2")
no_seconds() { grep -v '^$' "$1" | sed 's/"seconds":[^,]*,//g'; }
check "shards: the unsharded run fails (exit 1)" status_is 1 conform "${shard_args[@]}" \
    --json "$tmp/sh-all.json"
cp "$tmp/out.txt" "$tmp/sh-all.txt"
for k in 0 1 2; do
    check "shard $k/3 runs its slice (exit 0)" status_is 0 conform "${shard_args[@]}" --shard $k/3 \
        --json "$tmp/sh-$k.json"
done
check "... the merge fails as the unsharded run (exit 1)" status_is 1 conform "${shard_args[@]}" \
    --merge "$tmp/sh-0.json" "$tmp/sh-1.json" "$tmp/sh-2.json" --json "$tmp/sh-merged.json"
check "... with its report, byte for byte" diff "$tmp/sh-all.txt" "$tmp/out.txt"
check "... and its JSON, less the seconds" diff <(no_seconds "$tmp/sh-all.json") \
    <(no_seconds "$tmp/sh-merged.json")
check "a merge without slice 1 -> 2, naming it" status_is 2 conform "${shard_args[@]}" \
    --merge "$tmp/sh-0.json" "$tmp/sh-2.json"
check "... (its cells and the option to run it)" grep -q 'shard 1/3 (cells [0-9]* to [0-9]*) is missing: run it (--shard 1/3)' "$tmp/stderr"
check "a slice given twice -> 2" status_is 2 conform "${shard_args[@]}" \
    --merge "$tmp/sh-0.json" "$tmp/sh-1.json" "$tmp/sh-1.json" "$tmp/sh-2.json"
check "... naming both files" grep -q 'sh-1.json and .*sh-1.json are both shard 1/3' "$tmp/stderr"
check "a shard of another run (-n 9) -> 2" status_is 2 conform "${shard_args[@]}" -n 9 \
    --merge "$tmp/sh-0.json" "$tmp/sh-1.json" "$tmp/sh-2.json"
check "... naming what differs" grep -q "sh-0.json: a shard of another run: its 'steps 32 .*' is 'steps 9 " "$tmp/stderr"
CONFORM_SLOW=3 ./ds4ref-conform -q --no-cache "${shard_args[@]}" --shard 1/3 --json "$tmp/sh-1b.json" \
    > /dev/null 2>&1 &
shard_pid=$!
sleep 1.5
kill -TERM $shard_pid
wait $shard_pid
check "a shard stopped by SIGTERM exits 10" test $? -eq 10
check "... and a merge with it -> 2, naming the slice to run again" status_is 2 conform "${shard_args[@]}" \
    --merge "$tmp/sh-0.json" "$tmp/sh-1b.json" "$tmp/sh-2.json"
check "... (it did not finish)" grep -q 'sh-1b.json: shard 1/3 did not finish: cell [0-9]* (.*) did not run; run that shard again' "$tmp/stderr"
# A command that is not found: the unsharded run stops at its first cell
# (the others n/a, exit 13); each shard runs its own cells, and the merge
# replays the run's rule, giving the same report.
nf_args=(--backend "/nonexistent/backend {batch_tokens} {batch} {out}" -m models/tiny.gguf --prompts "$tmp/prompts"
         --matrix "draft=0 chunk=whole batch=1,2")
check "a command not found, unsharded: exit 13" status_is 13 conform "${nf_args[@]}"
cp "$tmp/out.txt" "$tmp/nf-all.txt"
quiet conform "${nf_args[@]}" --shard 0/2 --json "$tmp/nf-0.json"
quiet conform "${nf_args[@]}" --shard 1/2 --json "$tmp/nf-1.json"
check "... merged from two shards: exit 13, the same report" bash -c '
    ./ds4ref-conform -q --no-cache "${@:3}" --merge "$1/nf-0.json" "$1/nf-1.json" > "$1/nf-m.txt" 2>/dev/null
    [ $? -eq 13 ] && diff "$2" "$1/nf-m.txt"' _ "$tmp" "$tmp/nf-all.txt" "${nf_args[@]}"
check "... run again, the slice completes the merge" bash -c '
    ./ds4ref-conform -q --no-cache "${@:3}" --shard 1/3 --json "$1/sh-1c.json" > /dev/null 2>&1 &&
    ./ds4ref-conform -q --no-cache "${@:3}" --merge "$1/sh-0.json" "$1/sh-1c.json" "$1/sh-2.json" \
        > "$1/sh-merged2.txt" 2>/dev/null; [ $? -eq 1 ] && diff "$2" "$1/sh-merged2.txt"' \
    _ "$tmp" "$tmp/sh-all.txt" "${shard_args[@]}"

# Every finding of a row is in the JSON: a row that failed its own check
# (a token far below the argmax) is still compared with the base cell's
# stream, and that finding is there too.
check "verify-rows: a failed row also gets the cross-cell finding" bash -c \
    'grep "^{\"draft\":3" "$1" | head -1 | grep -q "\"findings\":\[{\"status\":\"fail\",.*nats below.*},{\"status\":\"fail\",.*in the draft=0 chunk=whole batch=1 stream"' \
    _ "$tmp/verify-rows.json"
check "verify-rows: the table names the row of a batch" grep -q 'FAIL@[0-9]*:r[01]' "$tmp/verify-rows.txt"
check "verify-rows: the failure says how far below the argmax the token was" \
    grep -q 'nats below the reference.s argmax' "$tmp/verify-rows.txt"

# Calibration: a backend with an intended approximation (the test backend
# under ggml-act, without the FP8/FP4 simulation) is judged under those
# numerics, found on its base cells with a floor of 0, and passes at the
# tightest thresholds; a plain one is judged under the official numerics.
cal_args=(-m models/tiny.gguf --prompts "$tmp/prompts" --matrix "draft=0 chunk=7,whole batch=1,2")
check "calibration: a ggml-act backend, exit status 0" status_is 0 conform \
    --backend "$backend --numerics ggml-act --qat off" "${cal_args[@]}" --json "$tmp/cal.json"
check "... judged under ggml-act without the simulation" \
    grep -q '^numerics: ggml-act, qat off, chosen on 2 base rows' "$tmp/out.txt"
check "... every cell passes" all_pass "$tmp/cal.json"
# Its floor is the f32 rounding of the logprobs its dump stores, and the
# thresholds are the least the floor allows.
check "... its floor below 1e-6, the least thresholds" bash -c '
    grep -q "\"max_gap\":0.01,\"tie_eps\":0.05[0-9]*,\"max_dlogprob\":0.01,\"limits\":\"limits from the calibration\"," "$1" &&
    grep -q "\"unexplained\":false,\"calibration\":{\"numerics\":\"ggml-act\",\"qat\":false" "$1" &&
    grep -o "\"calibration\":{\"numerics\":\"[^\"]*\",\"qat\":[a-z]*,\"floor\":[^,]*" "$1" |
        sed "s/.*://" | awk "{ exit !(\$1 < 1e-6) }"' \
    _ "$tmp/cal.json"
check "... and given the official numerics, it fails" status_is 1 conform \
    --backend "$backend --numerics ggml-act --qat off" "${cal_args[@]}" --numerics official
check "a plain backend is judged under the official numerics" bash -c \
    "./ds4ref-conform -q --no-cache --backend \"\$1\" \"\${@:2}\" | grep -q '^numerics: official, chosen'" \
    _ "$backend" "${cal_args[@]}"

# Calibration that cannot absorb a bug (docs/CONFORM.md §3.6): a backend
# that runs another model -- another seed of the same config, or a copy of
# the model with two routed experts of the top-k layer swapped -- fails,
# whatever numerics it runs under and though its outputs name no model; one
# whose only departure is the order of its sums (the test backend under
# ggml-act with every product jittered) passes, explained by the profile's
# own roundings.  With the limits given, the user's judge the cells and the
# run is not failed for it.
./ds4ref-mkmodel --config tiny --seed 7 --no-mtp -o "$tmp/seed7.gguf" > /dev/null
python3 tests/swap_experts.py ./ds4ref-gguf models/tiny.gguf "$tmp/swap.gguf" 3 0 1
wrong_args=(-m models/tiny.gguf --prompts "$tmp/prompts" --matrix "draft=0 chunk=whole batch=1")
check "another seed's model: exit status 1" status_is 1 conform \
    --backend "${backend/-m \{model\}/-m $tmp/seed7.gguf}" "${wrong_args[@]}" --json "$tmp/seed7.json"
check "... no numerics profile explains it" \
    grep -q '^FAIL: no numerics profile explains this backend: its base rows depart from the nearest, .* It computes something else' "$tmp/out.txt"
check "... naming where its base rows part from the reference" \
    grep -q 'Its base rows part from the reference first at chat step 0: token ' "$tmp/out.txt"
check "... the JSON says so" grep -q '"unexplained":true,.*"explains":false,.*"part":{"prompt":"chat","step":0,' "$tmp/seed7.json"
check "two experts swapped: exit status 1" status_is 1 conform \
    --backend "${backend/-m \{model\}/-m $tmp/swap.gguf}" "${wrong_args[@]}"
check "... no numerics profile explains it" grep -q '^FAIL: no numerics profile explains' "$tmp/out.txt"
check "... nor under ggml-act: exit status 1" status_is 1 conform \
    --backend "${backend/-m \{model\}/-m $tmp/swap.gguf} --numerics ggml-act --qat off" "${wrong_args[@]}"
check "... no numerics profile explains it" grep -q '^FAIL: no numerics profile explains' "$tmp/out.txt"
check "the right model, its products jittered under ggml-act: exit status 0" status_is 0 conform \
    --backend "$backend --numerics ggml-act,jitter --qat off" "${wrong_args[@]}"
check "... explained by the profile's roundings" \
    grep -q '^numerics: ggml-act, qat off, chosen on 2 base rows: .* where its own roundings under another order of sums leave' "$tmp/out.txt"
check "two experts swapped, the limits given: the user's judge" status_is 0 conform \
    --backend "${backend/-m \{model\}/-m $tmp/swap.gguf}" "${wrong_args[@]}" --max-gap 50 --max-dlogprob 50
check "... the report still says no profile explains it" \
    grep -q "^warning: no numerics profile explains .* judged under the user's limits" "$tmp/out.txt"

# Model identity (docs/CONFORM.md §1): a dump that carries "model_sha256"
# (here added by a wrapper, as a user would wrap a backend) is held to the
# reference's model file, so a backend on another file is a setup error
# before any verdict; {model_sha256} is that file's digest; a dump that
# names none says so in the report.
cat > "$tmp/add_sha.sh" <<'EOF'
# add_sha.sh MODEL DUMP: DUMP's object gets "model_sha256", MODEL's SHA-256.
sed -i "1s/^{/{\"model_sha256\":\"$(sha256sum "$1" | cut -c1-64)\",/" "$2"
EOF
with_sha() {   # with_sha FILE: the backend on FILE, its dump given FILE's SHA-256
    printf '%s' "${backend/-m \{model\}/-m $1} && sh $tmp/add_sha.sh $1 {out}"
}
check "a dump naming the reference's model_sha256: exit status 0" status_is 0 conform \
    --backend "$(with_sha models/tiny.gguf)" "${wrong_args[@]}"
check "... the report says whose" grep -q "^model identity: the reference's (2 outputs' model_sha256)" "$tmp/out.txt"
check "a dump naming another model's -> 2, before any verdict" status_is 2 conform \
    --backend "$(with_sha "$tmp/seed7.gguf")" "${wrong_args[@]}"
check "... naming both" grep -q "the backend ran another model: its model_sha256 is [0-9a-f]*\.\.\., the reference's models/tiny.gguf is" "$tmp/stderr"
check "... and no report" test ! -s "$tmp/out.txt"
check "{model_sha256} is the model file's" status_is 0 conform \
    --backend "test \"\$(sha256sum {model} | cut -c1-64)\" = {model_sha256} && $backend" "${wrong_args[@]}"
check "a dump that names no model: the report says identity is not available" \
    grep -q "^model identity: not available: the outputs name no model" "$tmp/out.txt"

# Ties that mean ties (docs/CONFORM.md §3.3): a noisy backend (ggml-act with
# every product jittered, whose calibrated floor makes wide limits) with a
# small error in every row after the first of a batch passes each row's own
# checks, and its batched streams part from their base streams only at
# near-ties: every batch-2 cell ties while no batch-1 cell does, and the run
# fails for that pattern.  Without the error it passes.
tie_args=(-m models/tiny.gguf --prompts "$tmp/prompts" --matrix "draft=0 chunk=1,7,whole batch=1,2")
check "a small error in batched rows under wide limits: exit status 1" status_is 1 conform --jobs 2 \
    --backend "$backend --numerics ggml-act,jitter --qat off --bug batch-drift" "${tie_args[@]}" \
    --json "$tmp/drift.json"
check "... every batch-2 cell a tie, no other cell anything but a pass" flagged_exactly_as tie \
    "$tmp/drift.json" 'b > 1'
check "... the ties counted and explained" \
    grep -q '^6 ties: 6 where the reference puts the two tokens within .* nats, 0 where only the backend' "$tmp/out.txt"
check "... and the pattern fails the run" grep -q '^FAIL: the ties hide a systematic difference: every cell with batch=2 departs from its prompt.s base stream (6 of 6 tie or fail), against 0 of 4' "$tmp/out.txt"
check "... the JSON says so" grep -q '"ties":{"cells":6,"reference":6,"own":0,.*"pattern":{"dim":"batch","value":"2","cells":6,"base_ties":0,"base_cells":4}}' "$tmp/drift.json"
check "the same backend without the error: exit status 0" status_is 0 conform --jobs 2 \
    --backend "$backend --numerics ggml-act,jitter --qat off" "${tie_args[@]}"

# The backend against itself (the spread): the test backend without a bug
# gives every row of every cell, batch rows included, the bits of its
# prompt's base row, so the spread is exactly 0; with its chunk-7 cells under
# ggml-act and its whole-prompt cells not, it is the largest |dlogprob|
# between those outputs, which tests/dump_dlogprob.py computes on its own.
check "spread: the test backend without a bug departs from itself by 0" \
    grep -q '"spread":{"rows":[1-9][0-9]*,"dlogprob":0,' "$tmp/clean.json"
check "spread: chunk-7 cells under other numerics, exit status 1" status_is 1 conform \
    --backend "$backend \$(test {chunk} = 7 && echo --numerics ggml-act --qat off)" -m models/tiny.gguf \
    --prompts "$tmp/prompts" --matrix "draft=0 chunk=7,whole batch=1" --work "$tmp/spread" \
    --json "$tmp/spread.json"
check "... the spread is the largest |dlogprob| between those outputs" bash -c '
    want=$(for p in chat code; do
        python3 tests/dump_dlogprob.py "$2"/*-cwhole-b1-$p/out "$2"/*-c7-b1-$p/out; done | sort -g | tail -1)
    got=$(grep -o "\"spread\":{\"rows\":2,\"dlogprob\":[0-9.e-]*" "$1" | sed "s/.*://")
    awk -v a="$got" -v b="$want" "BEGIN { exit !(a != \"\" && b > 0.01 && (a - b) ^ 2 < (1e-6 * b) ^ 2) }" ||
        { echo "  spread $got, computed $want"; exit 1; }' \
    _ "$tmp/spread.json" "$tmp/spread"
check "... and the report says so" grep -q '^backend against itself: 2 rows of its other cells depart' "$tmp/out.txt"

# A model the FP8 simulation cannot block (heads of 64, RoPE on 16): the
# candidates with it are not measured, and the run goes on without them.
./ds4ref-mkmodel --config tiny-k64 -o "$tmp/k64.gguf" > /dev/null
mkdir -p "$tmp/one"
cp vectors/conform/chat.txt "$tmp/one/"
check "calibration on tiny-k64 (no FP8 simulation): exit status 0" status_is 0 conform \
    --backend "$backend --qat off" -m "$tmp/k64.gguf" --prompts "$tmp/one" --matrix "draft=0 chunk=whole batch=1"
check "... the candidates with the simulation not measured" \
    grep -q '^numerics: official, qat off, chosen on 1 base rows: .*(official n/a, .*ds4-act,f16-kv n/a)' "$tmp/out.txt"

# The self-check on tiny-spec, whose MTP head drafts what it decodes, so
# every speculative cell accepts deep drafts: the full default matrix with
# --full (nine minutes on 2 cores); otherwise a sample of it: the default
# prompts, depths 0, 3 and 8, chunks 7 and whole, batches of 1 and 4 (the
# bug runs have batches of 2).
if [ -n "$full" ]; then
    check "self-check: the default matrix and model, exit status 0" \
        status_is 0 ./ds4ref-conform -q --no-cache --jobs 2 --backend ds4ref --json "$tmp/self.json"
    check "self-check: the full default matrix runs (336 cells)" test "$(cells "$tmp/self.json" | wc -l)" -eq 336
    check "self-check: every cell passes, every speculative one exercised" all_pass "$tmp/self.json"
elif [ -z "${DS4REF_SANITIZER:-}" ]; then
    check "self-check: a sample of the default matrix, exit status 0" \
        status_is 0 ./ds4ref-conform -q --no-cache --jobs 2 --backend ds4ref \
        --matrix "draft=0,3,8 chunk=7,whole batch=1,4" --json "$tmp/self.json"
    check "self-check: the sample runs (48 cells)" test "$(cells "$tmp/self.json" | wc -l)" -eq 48
    check "self-check: every cell passes, every speculative one exercised" all_pass "$tmp/self.json"
else
    echo "(a $DS4REF_SANITIZER build: the self-check runs a narrower matrix)"
    check "self-check (narrow): exit status 0" status_is 0 conform --jobs 2 --backend ds4ref \
        --prompts "$tmp/prompts" --matrix "draft=0,3 chunk=7 batch=1,2" --json "$tmp/self.json"
    check "self-check (narrow): every cell passes" all_pass "$tmp/self.json"
fi
check "self-check in exact mode: exit status 0" status_is 0 conform --jobs 2 --backend "$self" --exact \
    --prompts "$tmp/prompts" --matrix "${small:-draft=0,2,4 chunk=1,whole batch=1,2}" \
    --json "$tmp/self-exact.json"
check "self-check in exact mode: every cell passes" all_pass "$tmp/self-exact.json"

# DSpark: tiny-dspark drafts with the drafter in its own file (no --mtp),
# through the ds4ref-dspark preset, across the confidence dimension: conf=0
# drafts every block whole (every speculative cell passes, exercised);
# conf=50 cuts blocks where the confidence head says so (passes, or not
# exercised when it cut every deep draft); a threshold without drafts, or a
# template without {conf}, is n/a.
./ds4ref-mkmodel --config tiny-dspark --no-mtp -o "$tmp/dspark.gguf" > /dev/null
check "DSpark self-check (ds4ref-dspark, conf=0,50): exit status 0" status_is 0 conform --jobs 2 \
    --backend ds4ref-dspark --exact -m "$tmp/dspark.gguf" --prompts "$tmp/one" -n 12 \
    --matrix "draft=0,3,5 chunk=7,whole batch=1,2 conf=0,50" --json "$tmp/dspark.json"
check "... its drafter drafts without --mtp: the 8 speculative conf=0 cells pass" bash -c \
    "test \$(grep -c '^{\"draft\":[35],.*\"status\":\"pass\",\"cache\":\"cold\",\"conf\":0,' '$tmp/dspark.json') -eq 8"
check "... and fail none, with no error" bash -c "! grep -q '\"status\":\"\\(fail\\|error\\|tie\\)\"' '$tmp/dspark.json'"
check "... the table has the confidence column" grep -q '^draft chunk batch conf ' "$tmp/out.txt"
check "... a threshold without drafts is n/a" \
    grep -q '^{"draft":0,.*"status":"n/a","cache":"cold","conf":50,' "$tmp/dspark.json"
check "... and so is every conf cell of a template without {conf}" status_is 0 conform \
    --backend ds4ref --exact -m "$tmp/dspark.gguf" --prompts "$tmp/one" -n 4 \
    --matrix "draft=3 chunk=whole batch=1 conf=0,50" --json "$tmp/noconf.json"
check "... (its conf=50 cell: n/a)" \
    grep -q '^{"draft":3,.*"status":"n/a","cache":"cold","conf":50,.*the backend template has no {conf}' "$tmp/noconf.json"

# The ds4 preset, through a stand-in: ds4's flags are ds4ref's, its prefill
# chunk comes from DS4_METAL_PREFILL_CHUNK, and it prints no accept counts,
# so its speculative cells are "not exercised"; it has no batch mode.
mkdir -p "$tmp/bin"
cat > "$tmp/bin/ds4" <<EOF
#!/bin/sh
echo "\$@" >> "$tmp/ds4.args"
exec "$self_bin" --chunk "\$DS4_METAL_PREFILL_CHUNK" "\$@"
EOF
chmod +x "$tmp/bin/ds4"
check "ds4 preset: exit status 0" status_is 0 env PATH="$tmp/bin:$PATH" ./ds4ref-conform -q \
    --no-cache --backend ds4 --prompts "$tmp/prompts" --matrix "draft=0,2 chunk=7 batch=1,2" \
    --json "$tmp/ds4.json"
check "ds4 preset: one row, no speculation: pass" \
    test "$(cells "$tmp/ds4.json" | awk '$1 == 0 && $3 == 1' | grep -c ' pass$')" -eq 2
check "ds4 preset: speculative cells are not exercised (no accept counts)" \
    test "$(cells "$tmp/ds4.json" | awk '$1 == 2 && $3 == 1' | grep -c ' not exercised$')" -eq 2
check "ds4 preset: batches are n/a" test "$(cells "$tmp/ds4.json" | awk '$3 == 2' | grep -c ' n/a$')" -eq 4
check "ds4 preset: ds4's flags, --mtp-draft only with drafts" \
    grep -q -- '^-m [^ ]*/tiny-spec.gguf --mtp [^ ]*/tiny-spec-mtp.gguf --mtp-draft 2 --prompt-file [^ ]* -n 32 -c 4096 --temp 0 --seed 1 --logprobs-top-k 20 --dump-logprobs [^ ]*$' "$tmp/ds4.args"
check "ds4 preset: no --mtp without drafts" grep -q -- '^-m [^ ]*/tiny-spec.gguf --prompt-file' "$tmp/ds4.args"

# The cache: a second run computes no reference; a damaged entry is
# computed again.
narrow=(--backend "$self" --prompts "$tmp/prompts" --matrix "draft=0 chunk=whole batch=1")
./ds4ref-conform -q --cache "$tmp/cache" "${narrow[@]}" > "$tmp/c1.txt" 2> /dev/null
./ds4ref-conform -q --cache "$tmp/cache" "${narrow[@]}" > "$tmp/c2.txt" 2> /dev/null
check "cache: the first run computes both references" grep -q 'references: 2 computed, 0 from the cache' "$tmp/c1.txt"
check "cache: the second takes both from the cache" grep -q 'references: 0 computed, 2 from the cache' "$tmp/c2.txt"
printf 'not a golden\n' > "$(ls "$tmp"/cache/ref-*.jsonl | head -1)"
./ds4ref-conform -q --cache "$tmp/cache" "${narrow[@]}" > "$tmp/c3.txt" 2> /dev/null
check "cache: a damaged entry is computed again" grep -q 'references: 1 computed, 1 from the cache' "$tmp/c3.txt"

# The unquantized twins: ds4ref on {model_f32} and {mtp_f32} gives the
# models' own numbers, so the twin preset passes in exact mode.
check "ds4ref-f32 (the twins) passes in exact mode" status_is 0 conform --jobs 2 --backend "$self_f32" --exact \
    --prompts "$tmp/prompts" --matrix "${small:-draft=0,2 chunk=7,whole batch=1,2}" --json "$tmp/f32.json"
check "... every cell" all_pass "$tmp/f32.json"

# Against a server (docs/CONFORM.md, "Against a server"): ds4ref-server
# started for each cell passes every cell exactly, a batch cell being its
# rows' requests in flight together; so does one already running
# (--server URL); a proxy that perturbs an answer only while another
# request is in flight fails exactly the cells of several rows, and one that
# perturbs a prompt it has seen before exactly the warm-cache cells.
server_bin=$(dirname "$self_bin")/ds4ref-server
mkdir -p "$tmp/one"
cp vectors/conform/chat.txt "$tmp/one/"
srv_args=(-m models/tiny.gguf --prompts "$tmp/one" -n 8 --exact --matrix "draft=0 chunk=whole batch=1,3")
conform --server-cmd "'$server_bin' -m {model} --port {port} --ctx {ctx}" "${srv_args[@]}" \
    --json "$tmp/srv.json" > "$tmp/srv.txt" 2>&1
check "--server-cmd ds4ref-server: every cell exact (batch 1, 3)" all_pass "$tmp/srv.json"
check "... its /v1/models names the reference's model file" \
    grep -q "^model identity: the reference's (2 cells' /v1/models)" "$tmp/srv.txt"
check "a server's default matrix with cache=cold,warm: batches 1, 2, 4, cold and warm, no n/a" \
    status_is 0 conform --server-cmd "'$server_bin' -m {model} --port {port} --ctx {ctx} --chunk {chunk}" \
    -m models/tiny.gguf --prompts "$tmp/one" -n 4 --exact --matrix "cache=cold,warm" --json "$tmp/srv0.json"
check "... (6 cells, all pass)" bash -c '[ "$(grep -c "^{\"draft\":0,\"chunk\":\"whole\"" "$1")" -eq 6 ] &&
    [ "$(grep -c "\"status\":\"pass\"" "$1")" -eq 6 ]' _ "$tmp/srv0.json"
check "a server on another model -> 2" status_is 2 conform \
    --server-cmd "'$server_bin' -m models/tiny-spec.gguf --port {port}" "${srv_args[@]}"
# ds4ref-server's entry gives the file's SHA-256 once its digest thread has it.
check "... naming both" grep -Eq 'the engine serves another model \(.*/models/tiny-spec.gguf(, model_sha256 [0-9a-f]{16}\.\.\.)?, the reference models/tiny.gguf\)' "$tmp/stderr"
"$server_bin" -m models/tiny.gguf --port 0 2> "$tmp/srv.log" &
srv_pid=$!
for _ in $(seq 100); do grep -q listening "$tmp/srv.log" && break; sleep 0.1; done
conform --server "$(grep -o 'http://[0-9.:]*' "$tmp/srv.log")" "${srv_args[@]}" --json "$tmp/srv2.json" \
    > "$tmp/srv2.txt" 2>&1
kill -TERM $srv_pid
wait $srv_pid
check "--server URL (one running): every cell exact" all_pass "$tmp/srv2.json"
conform --server-cmd "'$server_bin' -m {model} --port {port}" --server-dialect text "${srv_args[@]}" \
    --json "$tmp/srv5.json" > "$tmp/srv5.txt" 2>&1
check "--server-dialect text (tokens named by text, matched by bytes): every cell exact" all_pass "$tmp/srv5.json"
# Text prompts go out less their BOS, which an engine such as llama.cpp adds;
# ds4ref-server adds nothing, so its count says the prompt was not read as
# the reference's: an error, not a verdict.
check "--server-prompt text to an engine that adds no BOS -> 13" status_is 13 conform \
    --server-cmd "'$server_bin' -m {model} --port {port}" --server-prompt text -m models/tiny.gguf \
    --prompts "$tmp/one" -n 4 --exact --matrix "draft=0 chunk=whole batch=1"
check "... naming both counts" grep -q "the engine read the prompt as 72 tokens, the reference's has 73" "$tmp/out.txt"
# ds4's dialect: chat completions answered with text alone, read as the
# reference's tokens while they explain it and judged by teacher forcing;
# ds4ref-server's chat answers pass, and the proxy's text fault (a "Q" put
# into the answer) fails exactly the cells of several rows.
ds4_args=(--server-dialect ds4 -m models/tiny-spec.gguf --prompts "$tmp/one" -n 8 --matrix "draft=0 chunk=whole batch=1,3")
conform --server-cmd "'$server_bin' -m {model} --port {port}" "${ds4_args[@]}" --json "$tmp/srv6.json" \
    > "$tmp/srv6.txt" 2>&1
check "--server-dialect ds4 (text only, teacher forcing): every cell passes" all_pass "$tmp/srv6.json"
check "... saying that logprobs were not available" grep -q "^logprobs: not available" "$tmp/srv6.txt"
conform --server-cmd "python3 tests/faulty_proxy.py --mode batch --port {port} -- '$server_bin' -m {model} --port 0" \
    "${ds4_args[@]}" --json "$tmp/srv7.json" > "$tmp/srv7.txt" 2>&1
check "--server-dialect ds4, a wrong token only with another request in flight: exactly the batch > 1 cells fail" \
    flagged_exactly "$tmp/srv7.json" 'b > 1'
conform --server-cmd "python3 tests/faulty_proxy.py --mode batch --port {port} -- '$server_bin' -m {model} --port 0" \
    "${srv_args[@]}" --json "$tmp/srv3.json" > "$tmp/srv3.txt" 2>&1
check "a server wrong only with another request in flight: exactly the batch > 1 cells fail" \
    flagged_exactly "$tmp/srv3.json" 'b > 1'
conform --server-cmd "python3 tests/faulty_proxy.py --mode cache --port {port} -- '$server_bin' -m {model} --port 0" \
    -m models/tiny.gguf --prompts "$tmp/one" -n 8 --exact --matrix "draft=0 chunk=whole batch=1 cache=cold,warm" \
    --json "$tmp/srv4.json" > "$tmp/srv4.txt" 2>&1
check "a server wrong only on a prompt it has seen: exactly the warm cells fail" \
    bash -c '[ "$(grep -c "\"status\":\"fail\",\"cache\":\"warm\"" "$1")" = 1 ] &&
             [ "$(grep -c "\"status\":\"pass\",\"cache\":\"cold\"" "$1")" = 1 ]' _ "$tmp/srv4.json"
check "--server-cmd without {port} -> 2" status_is 2 ./ds4ref-conform --server-cmd "'$server_bin' -m {model}" -m models/tiny.gguf
check "... said so" grep -q "no {port}" "$tmp/stderr"

# The default matrix holds only what the backend can set: a template without
# {draft} runs depth 0 alone, with no n/a cell; depths named in --matrix
# that it cannot run are n/a.
nodraft="${backend/ --draft \{draft\}/}"
check "a template without {draft}, the default depths: exit status 0" status_is 0 conform \
    --backend "$nodraft" -m models/tiny.gguf --prompts "$tmp/prompts" --matrix "batch=1" --json "$tmp/nodraft.json"
check "... 8 cells (4 chunks, 2 prompts), none n/a" \
    test "$(cells "$tmp/nodraft.json" | wc -l)/$(cells "$tmp/nodraft.json" | grep -vc ' n/a$')" = 8/8
check "... depths named in --matrix that it cannot run are n/a" status_is 0 conform \
    --backend "$nodraft" -m models/tiny.gguf --prompts "$tmp/prompts" --matrix "draft=0,2 chunk=whole batch=1" \
    --json "$tmp/nodraft2.json"
check "... (2 of 4)" test "$(cells "$tmp/nodraft2.json" | grep -c '^2 .* n/a$')" -eq 2

# Exit statuses and errors.
one=(--prompts "$tmp/prompts" --matrix "draft=0 chunk=whole batch=1")
check "a backend that never runs -> 13" status_is 13 conform --backend 'false {out} {tokens_file}' "${one[@]}"
check "... and each cell says why" grep -q 'the backend exited with status 1' "$tmp/out.txt"
check "a backend that fails in some cells -> 1, those cells in error" status_is 1 conform \
    --backend "test {draft} -lt 3 || {{ echo broken at depth {draft}; exit 3; }; $backend" \
    "${bug_args[@]}" --matrix "draft=0,3 chunk=whole batch=1"
check "... with the end of its log" grep -q 'exited with status 3; its log ends: broken at depth 3' "$tmp/out.txt"
# --timeout counts the backend's CPU time: a busy one is stopped, one that
# only waits (a machine busy with other work) is not, until ten times the
# limit in wall time.
check "a cell past --timeout of CPU is killed and in error" status_is 13 conform --timeout 0.3 \
    --backend 'while :; do :; done; echo {out} {tokens_file}' "${one[@]}"
check "... said so" grep -q 'ran past the 0.3 s timeout' "$tmp/out.txt"
check "a backend that waits 1 s under a 0.3 s --timeout is not killed" status_is 13 conform \
    --timeout 0.3 --backend 'sleep 1; echo {out} {tokens_file}' "${one[@]}"
check "... its cell fails for its missing output, not the time" bash -c \
    'grep -q "no usable output" "$1" && ! grep -q "timeout" "$1"' _ "$tmp/out.txt"
check "one that hangs is stopped after 10 x --timeout of wall time" status_is 13 conform \
    --timeout 0.2 --backend 'sleep 30; echo {out} {tokens_file}' "${one[@]}"
check "... said so" grep -q 'ran past the 0.2 s timeout' "$tmp/out.txt"
# An output that names another model than the reference's is a setup error.
check "a backend run on another model -> 2" status_is 2 conform "${one[@]}" \
    --backend "'$self_bin' -m models/tiny.gguf --batch-tokens {batch_tokens} -n {n} --golden-out {out}"
check "... saying so" grep -q 'the backend ran another model (tiny.gguf, the reference tiny-spec.gguf)' "$tmp/stderr"
check "an unknown placeholder -> 2" status_is 2 conform --backend 'x {model} {nope} {out} {tokens_file}'
check "... named" grep -q 'unknown placeholder {nope}' "$tmp/stderr"
check "a bad --matrix -> 2" status_is 2 conform --backend ds4ref --matrix 'draft=99'
check "no --backend -> 2" status_is 2 ./ds4ref-conform
check "--json into a missing folder -> 3, before any cell" status_is 3 conform --backend ds4ref \
    "${one[@]}" --json "$tmp/missing/r.json"
check "... nothing ran" test ! -s "$tmp/out.txt"
check "--backend-help lists the placeholders and the presets" bash -c \
    './ds4ref-conform --backend-help | grep -q "{batch_tokens}" && ./ds4ref-conform --backend-help | grep -q "^  ds4:"'
check "... every placeholder, each one CONFORM.md's table documents" bash -c '
    names=$(./ds4ref-conform --backend-help | sed -n "s/^  \({[a-z_0-9]*}\) .*/\1/p")
    [ "$(echo "$names" | wc -l)" -ge 21 ] || exit 1
    for n in $names; do grep -q "^| \`$n\`\|^| .*\`$n\`.* |" docs/CONFORM.md || { echo "  $n"; exit 1; }; done'
check "--help names every preset" bash -c './ds4ref-conform --help |
    grep -q "^presets (--backend): ds4ref, ds4ref-f32, ds4, ds4-dspark, ds4ref-dspark, llama.cpp$" &&
    ./ds4ref-conform --help | grep -q "^server presets (--server-cmd): ds4ref-server, vllm, llama-cpp-python, llama-server, llama-server-dspark, ds4-server, sglang$"'

# Ctrl-C: the cell's command is killed, the run stops with 10, no work
# folder is left behind, and the cells that finished are checked and
# reported: here the first (chat) passes and the second (code, whose
# backend sleeps) did not run.
TMPDIR=$tmp/tmpdir
mkdir -p "$TMPDIR"
export TMPDIR
./ds4ref-conform -q --no-cache --backend "[ \$(wc -l < {tokens_file}) -lt 100 ] || sleep 30; $backend" \
    -m models/tiny.gguf --prompts "$tmp/prompts" --matrix "draft=0 chunk=whole batch=1" \
    --json "$tmp/int.json" > "$tmp/int.out" 2> "$tmp/int.err" &
pid=$!
# Interrupt once the cell's command has run for a while (the reference
# comes first, and on a loaded machine takes more than a second): the
# shell ds4ref-conform starts for it is its child (its own command line,
# which holds the template too, is not).
for _ in $(seq 300); do pgrep -P $pid -f "sleep 3[0]" > /dev/null && break; sleep 0.1; done
sleep 1
kill -INT $pid
wait $pid
check "Ctrl-C -> 10" test $? -eq 10
check "... said so" grep -q 'interrupted: the report holds the cells that finished' "$tmp/int.err"
check "... the report: the finished cell checked, the other n/a" bash -c '
    grep -q "^    0 whole    1   pass  *n/a" "$1" && grep -q "^INTERRUPTED: interrupted in cell 2 of 2" "$1"' \
    _ "$tmp/int.out"
check "... and the JSON" bash -c 'grep -q "\"interrupted\":true" "$1" &&
    grep -q "\"prompt\":\"code\",\"status\":\"n/a\",.*\"detail\":\"not run: interrupted\"" "$1"' \
    _ "$tmp/int.json"
check "... and the temporary work folder is gone" test -z "$(ls "$TMPDIR")"
check "... and so is the backend" bash -c '! pgrep -f "sleep 3[0]; echo .?$1" > /dev/null' _ "$TMPDIR"
unset TMPDIR

# A backend's command that is not there: the first cell says so, no other
# runs (not a line for each of them), 13.
check "a command not found -> 13" status_is 13 conform \
    --backend "nosuch-backend-$$ {out} {tokens_file} {draft} {chunk} {batch}" "${bug_args[@]}"
check "... one cell in error, the others n/a, said once" bash -c '
    grep -q "^STOPPED: the backend.s command was not found (exit status 127) before any cell ran" "$1" &&
    grep -q "^[0-9]* cells: 0 pass, 0 fail, 1 error, 0 tie, 0 not exercised, [0-9]* n/a" "$1"' \
    _ "$tmp/out.txt"

# Progress into a file (as in CI): a line for each cell started.
check "progress into a file: a line a cell" status_is 0 ./ds4ref-conform --no-cache --backend "$self" \
    --prompts "$tmp/prompts" --matrix 'draft=0 chunk=whole batch=1,2'
check "... [k/N] and the cell, no terminal codes" bash -c '
    grep -q "^ds4ref-conform: \[4/4\] draft=0 chunk=whole batch=2 code$" "$1" && ! grep -q $'"'"'\033'"'"' "$1"' \
    _ "$tmp/stderr"

# The progress line, on a pseudo-terminal: one per cell, erased at the end.
script -q -c "./ds4ref-conform --no-cache --backend \"$self\" --prompts $tmp/prompts --matrix 'draft=0 chunk=whole batch=1,2' 2>&1 >/dev/null" /dev/null < /dev/null > "$tmp/tty.txt"
check "progress on a terminal: [k/N] and the cell" grep -aq '\[4/4\] draft=0 chunk=whole batch=2 code' "$tmp/tty.txt"
check "progress on a terminal: erased at the end" bash -c 'tail -c 8 "$1" | grep -aq $'"'"'\r\033\[K'"'" _ "$tmp/tty.txt"

if [ $fails -ne 0 ]; then
    echo "conform: $fails failed"
    exit 1
fi
echo "conform: all passed"
