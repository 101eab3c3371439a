#!/usr/bin/env bash
# End-to-end checks of the command-line tools on the default synthetic model:
# outputs that must be bit-identical across threads and chunk sizes, the
# tokenizer modes, file formats and error exit statuses.
set -uo pipefail
model=models/tiny.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/checks.sh
. tests/checks.sh

# Goldens: bit-identical whatever the threads and chunk size.
./ds4ref -m $model -p "Hello there" -n 40 --ignore-eos -t 1 --chunk 1 --golden-out "$tmp/a.jsonl" > /dev/null
./ds4ref -m $model -p "Hello there" -n 40 --ignore-eos -t 2 --chunk 64 --golden-out "$tmp/b.jsonl" > /dev/null
# The header records the chunk size, which never changes a number: compare the steps.
check "golden identical across threads and chunks" cmp -s <(tail -n +2 "$tmp/a.jsonl") <(tail -n +2 "$tmp/b.jsonl")
check "ds4ref-diff --exact accepts them" quiet ./ds4ref-diff --exact "$tmp/a.jsonl" "$tmp/b.jsonl"
check "golden ends complete" grep -q '"complete":true' "$tmp/a.jsonl"
# The unquantized twin gives the model's numbers bit for bit: ds4ref-diff
# --exact says the models differ, --ignore-model compares the numbers alone
# (and still fails numbers that differ: another seed's model).
./ds4ref-gguf twin $model "$tmp/twin.gguf"
./ds4ref -m "$tmp/twin.gguf" -p "Hello there" -n 40 --ignore-eos --golden-out "$tmp/twin.jsonl" > /dev/null
check "a golden of the twin, --exact -> 1 (another model)" status_is 1 ./ds4ref-diff --exact "$tmp/a.jsonl" "$tmp/twin.jsonl"
check "... with --ignore-model: bit-identical -> 0" status_is 0 ./ds4ref-diff --exact --ignore-model \
    "$tmp/a.jsonl" "$tmp/twin.jsonl"
check "... the models' difference still noted" grep -q '^note: models differ (.*), ignored (--ignore-model)' "$tmp/out.txt"
./ds4ref-mkmodel --config tiny --seed 9 --no-mtp -o "$tmp/seed9.gguf" > /dev/null
./ds4ref -m "$tmp/seed9.gguf" -p "Hello there" -n 40 --ignore-eos --golden-out "$tmp/seed9.jsonl" > /dev/null
check "... another seed's model with --ignore-model -> 1" status_is 1 ./ds4ref-diff --exact --ignore-model \
    "$tmp/a.jsonl" "$tmp/seed9.jsonl"

# Speculative decoding with the MTP head: the same records as plain greedy.
./ds4ref -m $model --mtp models/tiny-mtp.gguf --mtp-draft 3 -p "Hello there" -n 40 --ignore-eos \
    --chunk 2 --spec-report --golden-out "$tmp/s.jsonl" > /dev/null 2> "$tmp/report.txt"
check "speculative golden --exact equal to plain" quiet ./ds4ref-diff --exact "$tmp/a.jsonl" "$tmp/s.jsonl"
check "--spec-report prints the acceptance line" grep -q '^mtp accept: iters=[0-9]* proposed=' "$tmp/report.txt"
printf 'Hello there\nWhat is the capital of Italy?\n' > "$tmp/batch.txt"
./ds4ref -m $model --mtp models/tiny-mtp.gguf --mtp-draft 2 --batch-prompts "$tmp/batch.txt" -n 12 \
    --ignore-eos > "$tmp/batch.out"
./ds4ref -m $model -p "What is the capital of Italy?" -n 12 --ignore-eos > "$tmp/single.out"
check "a batched row prints what the prompt alone prints" \
    test "$(sed -n 4p "$tmp/batch.out")" = "$(head -1 "$tmp/single.out")"
./ds4ref -m $model -p "Hello there" --temp 0.9 --seed 7 -n 20 --ignore-eos > "$tmp/t1.out"
./ds4ref -m $model -p "Hello there" --temp 0.9 --seed 7 -n 20 --ignore-eos -t 1 --chunk 3 > "$tmp/t2.out"
check "sampling is reproducible from its seed" cmp -s "$tmp/t1.out" "$tmp/t2.out"
check "--temp > 0 refuses --golden-out" status_is 2 ./ds4ref -m $model -p hi --temp 1 --golden-out "$tmp/x"

# On a terminal (a pseudo-terminal, through script(1)): the prompt's progress
# and nothing else on stderr before the text, the line erased when the prompt
# is done, the text made safe to show, and the speed line at the end.
story=(-m $model -p "Tell me a story" -n 200 --ignore-eos --chunk 4)
./ds4ref "${story[@]}" --golden-out "$tmp/raw.jsonl" > "$tmp/raw.txt" 2> "$tmp/raw.err"
check "the speed line ends a run" \
    grep -q '^ds4ref: prefill: [0-9.]* t/s (32 tokens), generation: [0-9.]* t/s (200 tokens)$' "$tmp/raw.err"
check "(the raw text holds ESC and invalid UTF-8)" \
    bash -c 'grep -q $'"'"'\033'"'"' "$1" && ! iconv -f UTF-8 -t UTF-8 "$1" > /dev/null 2>&1' _ "$tmp/raw.txt"
on_tty() {   # on_tty OUT ARGS...: ds4ref ARGS on a pseudo-terminal, all it shows into OUT
    local out=$1; shift
    script -q -c "$(printf '%q ' ./ds4ref "$@")" /dev/null < /dev/null > "$out"
}
# Plain, speculative, recorded as a golden while speculating, and with the
# prompt's logits written too (evaluated twice, shown once).
tty_what=("" " with --mtp" " with --mtp and --golden-out" " with --logits-out")
tty_args=("" "--mtp models/tiny-mtp.gguf --mtp-draft 2"
          "--mtp models/tiny-mtp.gguf --mtp-draft 2 --golden-out $tmp/tty.jsonl"
          "--logits-out $tmp/tty.f32")
for i in "${!tty_args[@]}"; do
    # shellcheck disable=SC2086
    on_tty "$tmp/tty.txt" "${story[@]}" ${tty_args[$i]}
    # What follows the erased progress line: the text, then the speed line.
    LC_ALL=C awk 'BEGIN { RS = "\033\\[K" } NR == 2' "$tmp/tty.txt" > "$tmp/tty.text"
    what="on a terminal${tty_what[$i]}"
    check "$what: progress counts the prompt only, once" \
        test "$(grep -ao 'prefill: [0-9]*/[0-9]* tokens' "$tmp/tty.txt" | tr '\n' ' ')" = \
            "$(for n in 0 4 8 12 16 20 24 28; do echo "prefill: $n/32 tokens"; done | tr '\n' ' ')"
    check "$what: no progress line after the prompt" \
        bash -c '! grep -aq "prefill: [0-9]*/" "$1"' _ "$tmp/tty.text"
    check "$what: the text is all there" test "$(sed '/^ds4ref: prefill:/,$d' "$tmp/tty.text" |
        LC_ALL=C tr -cd 'a-z0-9')" = "$(LC_ALL=C tr -cd 'a-z0-9' < "$tmp/raw.txt")"
    check "$what: no escape byte in the text, all of it UTF-8" \
        bash -c '! grep -aq $'"'"'\033'"'"' "$1" && iconv -f UTF-8 -t UTF-8 "$2" > /dev/null' \
        _ "$tmp/tty.text" "$tmp/tty.txt"
done
check "on a terminal with --mtp and --golden-out: the golden is the plain one" \
    quiet ./ds4ref-diff --exact "$tmp/raw.jsonl" "$tmp/tty.jsonl"
check "on a terminal with --logits-out: the logits are written" \
    test "$(stat -c %s "$tmp/tty.f32")" -eq $((32 * 512 * 4))

# The OpenMP spin the programs set for themselves (programs/wait_policy.h), as
# the OpenMP runtime of a running ds4ref reports it (OMP_DISPLAY_ENV, on
# stderr when the runtime starts, so no timing is involved): libgomp (gcc
# builds, which execute themselves again to set it: the last report is the
# one of the program that runs) reports GOMP_SPINCOUNT, libomp (clang builds,
# the sanitizer runs: set in main, read at the runtime's first use)
# KMP_BLOCKTIME.  A user's own policy is kept.
omp_spin() {   # omp_spin VAR=VALUE...: "GOMP_SPINCOUNT=N" or "KMP_BLOCKTIME=N", as ds4ref runs
    env -u GOMP_SPINCOUNT -u KMP_BLOCKTIME -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$@" \
        ./ds4ref -m $model -t 2 -p hi -n 1 2>&1 > /dev/null |
        sed -n "s/^ *\(\[host\] \)\{0,1\}\(GOMP_SPINCOUNT\|KMP_BLOCKTIME\) \{0,1\}= \{0,1\}'\([0-9]*\)'$/\2=\3/p" |
        tail -n 1
}
short_spin() { [ "$1" = GOMP_SPINCOUNT=10000 ] || [ "$1" = KMP_BLOCKTIME=1 ]; }
other_spin() { [ -n "$1" ] && ! short_spin "$1"; }
spin=$(omp_spin)
check "ds4ref sets a short OpenMP spin (${spin:-none reported})" short_spin "$spin"
spin=$(omp_spin OMP_WAIT_POLICY=active)
check "ds4ref keeps the user's OpenMP wait policy (${spin:-none reported})" other_spin "$spin"

# A batch of token rows: a golden and a dump per row, each row's steps those
# its prompt gets alone; no official.vec case from a batch.
printf '256 258 72 101 108 108 111 259 261\n256 258 87 104 97 116 259 261\n' > "$tmp/rows.txt"
./ds4ref -m $model --batch-tokens "$tmp/rows.txt" -n 12 --ignore-eos --chunk 3 \
    --golden-out "$tmp/rows.jsonl" --dump-logprobs "$tmp/rows.json" > /dev/null 2>&1
for r in 0 1; do
    sed -n "$((r + 1))p" "$tmp/rows.txt" > "$tmp/row$r.txt"
    ./ds4ref -m $model --tokens-file "$tmp/row$r.txt" -n 12 --ignore-eos --golden-out "$tmp/one$r.jsonl" \
        > /dev/null 2>&1
    check "--batch-tokens: row $r's golden holds its prompt's steps" \
        cmp -s <(tail -n +2 "$tmp/rows.jsonl.$r") <(tail -n +2 "$tmp/one$r.jsonl")
    check "--batch-tokens: row $r's dump is its golden's" \
        quiet ./ds4ref-diff --exact "$tmp/one$r.jsonl" "$tmp/rows.json.$r"
done
check "--batch-tokens with --vec-out -> 2" status_is 2 ./ds4ref -m $model --batch-tokens "$tmp/rows.txt" \
    --vec-out "$tmp/rows.vec"

# Teacher-forced logits: [n_tokens][n_vocab] f32.
printf '256 258 72 101 108 108 111 259 261' > "$tmp/toks.txt"
./ds4ref -m $model --tokens-file "$tmp/toks.txt" -n 0 --logits-out "$tmp/l1.f32" 2> "$tmp/l1.err"
./ds4ref -m $model --tokens-file "$tmp/toks.txt" -n 0 --chunk 2 -t 1 --logits-out "$tmp/l2.f32"
check "logits-out size is 9 x 512 x 4" test "$(stat -c %s "$tmp/l1.f32")" -eq $((9 * 512 * 4))
check "logits-out identical across chunks" cmp -s "$tmp/l1.f32" "$tmp/l2.f32"
check "-n 0 --logits-out ends with the speed line, no token generated" \
    grep -q '^ds4ref: prefill: [0-9.]* t/s (9 tokens), generation: - t/s (0 tokens)$' "$tmp/l1.err"
./ds4ref -m $model --tokens-file "$tmp/toks.txt" -n 6 --ignore-eos --logits-out "$tmp/l3.f32" \
    --golden-out "$tmp/l3.jsonl" > /dev/null
check "logits-out with generation: the same logits" cmp -s "$tmp/l1.f32" "$tmp/l3.f32"

# Tokenizer modes.
printf 'Hello world' > "$tmp/text.txt"
ids=$(./ds4ref -m $model --tokenize-file "$tmp/text.txt")
check "--tokenize-file prints ids" test -n "$ids"
./ds4ref -m $model -p "hi" --nothink -sys "" --dump-tokens > "$tmp/dump.txt"
check "--nothink -sys \"\" renders BOS User ... Assistant </think>" \
    grep -q '^\[256, 258, .*, 259, 261\]$' "$tmp/dump.txt"

# Reasoning efforts: 0731's high is the first release's max text, its max
# another; the first release's encoder refuses low.
./ds4ref -m $model -p hi -sys "" --think-max --dump-tokens > "$tmp/e_v4max.txt"
./ds4ref -m $model -p hi -sys "" --chat-release 0731 --reasoning-effort high --dump-tokens \
    > "$tmp/e_high.txt"
./ds4ref -m $model -p hi -sys "" --chat-release 0731 --reasoning-effort max --dump-tokens \
    > "$tmp/e_max.txt"
check "--chat-release 0731 --reasoning-effort high renders --think-max's text" \
    cmp -s "$tmp/e_v4max.txt" "$tmp/e_high.txt"
check "... and max another" bash -c '! cmp -s "$1" "$2"' _ "$tmp/e_high.txt" "$tmp/e_max.txt"
check "--reasoning-effort low with the first release -> 2" \
    status_is 2 ./ds4ref -m $model -p hi --reasoning-effort low --dump-tokens
check "... saying it is 0731's" grep -q "low is 0731's" "$tmp/stderr"
check "--chat-release 0732 -> 2" status_is 2 ./ds4ref -m $model -p hi --chat-release 0732
check "--reasoning-effort medium -> 2" status_is 2 ./ds4ref -m $model -p hi --reasoning-effort medium

# Dump and vec outputs parse back (ds4ref-diff reads both).
./ds4ref -m $model -p "Hello there" -n 16 --ignore-eos --golden-out "$tmp/c.jsonl" \
    --dump-logprobs "$tmp/d.json" > /dev/null
./ds4ref -m $model -p "Hello there" -sys "" --nothink -n 40 --ignore-eos --golden-out "$tmp/cv.jsonl" \
    --vec-out "$tmp/v.vec" --vec-id t > /dev/null
check "dump-logprobs agrees with the golden" quiet ./ds4ref-diff "$tmp/c.jsonl" "$tmp/d.json" --min-top1 1 --max-dlogprob 1e-6
check "vec case agrees with the golden" quiet ./ds4ref-diff "$tmp/cv.jsonl" "$tmp/v.vec" --min-top1 1 --max-dlogprob 1e-6
# A vec case is one ds4_test can replay: made with no system prompt and
# thinking off, and named (-p has no file name to give it).
check "--vec-out without -sys \"\" --nothink -> 2" \
    status_is 2 ./ds4ref -m $model -p "Hello there" -n 4 --vec-out "$tmp/v3.vec" --vec-id t
check "... saying which flags it needs" grep -q 'add -sys "" --nothink' "$tmp/stderr"
check "--vec-out with -p and no --vec-id -> 2" \
    status_is 2 ./ds4ref -m $model -p "Hello there" -sys "" --nothink -n 4 --vec-out "$tmp/v3.vec"
check "... asking for one" grep -q 'needs --vec-id ID' "$tmp/stderr"
check "... and nothing written" test ! -e "$tmp/v3.vec"
check "the first 16 steps of a longer run are the same" quiet ./ds4ref-diff "$tmp/c.jsonl" "$tmp/a.jsonl" --all-steps --min-top1 1 --max-dlogprob 0
# Verdicts as a user reads them: the README's thresholds against a 16-step
# official.vec pass (top1 is over the compared steps); a divergence with no
# threshold fails; a file of none of the three kinds says so.
check "a 40-step golden against its 16-step vec: the README's thresholds pass" \
    quiet ./ds4ref-diff "$tmp/cv.jsonl" "$tmp/v.vec" --max-dlogprob 0.05 --min-top1 1.0
check "a divergence without thresholds fails -> 1" status_is 1 ./ds4ref-diff \
    vectors/tiny-ds4-qaton-capital.jsonl vectors/tiny-ds4-qatoff-capital.jsonl
check "... and says why" grep -q '^  violated: --min-top1 1 (the default when no threshold is given)' "$tmp/out.txt"
check "a file of none of the kinds -> 4, said so" status_is 4 ./ds4ref-diff "$tmp/a.jsonl" $model
check "... said so" grep -q "tiny.gguf: not a golden, ds4 dump or official.vec" "$tmp/stderr"

# Outputs are opened before the first token: a path that cannot be written
# fails at once (nothing generated), naming the path the user gave.
for out in --golden-out --dump-logprobs --vec-out --logits-out; do
    check "$out into a missing folder -> 3" \
        status_is 3 ./ds4ref -m $model -p "Hello there" -sys "" --nothink --vec-id t -n 8 $out "$tmp/missing/x"
    check "$out: ... before the first token, naming the path" \
        bash -c '[ ! -s "$1" ] && grep -q "^ds4ref: $2: cannot be created" "$3" && ! grep -q "\.tmp\." "$3"' \
        _ "$tmp/out.txt" "$tmp/missing/x" "$tmp/stderr"
done
# With --logits-out as well: a generation output that cannot be written
# fails before the prompt is evaluated (no progress shown on a terminal) and
# leaves no logits file; nor does a logits file that cannot be, a golden.
for out in --golden-out --dump-logprobs --vec-out; do
    mkdir -p "$tmp/lg"
    check "--logits-out with $out into a missing folder -> 3" status_is 3 \
        ./ds4ref "${story[@]}" -sys "" --nothink --vec-id t --logits-out "$tmp/lg/l.f32" $out "$tmp/missing/x"
    check "--logits-out with $out: ... no logits file, nothing left behind" \
        bash -c '[ -z "$(ls -A "$1")" ] && grep -q "^ds4ref: $2: cannot be created" "$3"' \
        _ "$tmp/lg" "$tmp/missing/x" "$tmp/stderr"
    on_tty "$tmp/tty.txt" "${story[@]}" -sys "" --nothink --vec-id t --logits-out "$tmp/lg/l.f32" \
        $out "$tmp/missing/x"
    check "--logits-out with $out: ... before any work" \
        bash -c '! grep -aq "prefill:" "$1" && grep -aq "cannot be created" "$1"' _ "$tmp/tty.txt"
    rm -rf "$tmp/lg"
done
check "--logits-out into a missing folder with --golden-out -> 3" \
    status_is 3 ./ds4ref "${story[@]}" --logits-out "$tmp/missing/x" --golden-out "$tmp/lg.jsonl"
check "... no golden written" test ! -e "$tmp/lg.jsonl"
# A vec case: its id must be new to the file, and its prompt is written where
# ds4_test --logprob-vectors finds it, whichever folder the .vec goes to.
mkdir -p "$tmp/p" "$tmp/v1" "$tmp/v2"
printf 'What is the capital of Italy?' > "$tmp/p/italy.txt"
vec_run() { ./ds4ref -m $model -sys "" --nothink -n 16 --ignore-eos "$@" > "$tmp/out.txt"; }
vec_run --prompt-file "$tmp/p/italy.txt" --vec-out "$tmp/v1/x.vec"
cp "$tmp/v1/x.vec" "$tmp/v1/x.before"
check "--vec-out with an id already there -> 2" \
    status_is 2 vec_run --prompt-file "$tmp/p/italy.txt" --vec-out "$tmp/v1/x.vec"
check "... said before the first token, the file unchanged" bash -c '[ ! -s "$1" ] &&
    grep -q "case italy already exists" "$2" && cmp -s "$3" "$4"' \
    _ "$tmp/out.txt" "$tmp/stderr" "$tmp/v1/x.vec" "$tmp/v1/x.before"
check "--vec-out copies --prompt-file beside the .vec" cmp -s "$tmp/p/italy.txt" "$tmp/v1/prompts/italy.txt"
vec_run -p "Hello there" --vec-id hello --vec-out "$tmp/v2/y.vec"
check "--vec-out with -p records prompts/ID.txt" grep -q '^case hello [0-9]* 16 prompts/hello.txt$' "$tmp/v2/y.vec"
check "... and writes it there" test "$(cat "$tmp/v2/prompts/hello.txt")" = "Hello there"
for v in "$tmp/v1/x.vec" "$tmp/v2/y.vec"; do
    check "ds4_test --logprob-vectors runs a .vec written elsewhere ($(basename "$v"))" \
        quiet env DS4_TEST_MODEL=$model DS4_TEST_VECTOR_FILE="$v" ./ds4_test --logprob-vectors
done
# A file the user named and that is not there fails the test (a CI job with
# a mistyped path must not pass by skipping); the default absent skips it.
# The tolerance can be tightened (a .vec ds4ref wrote holds its own
# logprobs), not loosened past ds4's 4.
check "ds4_test: DS4_TEST_LOGPROB_TOLERANCE=1e-6 on ds4ref's own .vec passes" \
    quiet env DS4_TEST_MODEL=$model DS4_TEST_VECTOR_FILE="$tmp/v1/x.vec" DS4_TEST_LOGPROB_TOLERANCE=1e-6 \
    ./ds4_test --logprob-vectors
awk '!done && $1 == "top" { $3 = $3 + 0.01; done = 1 } { print }' "$tmp/v1/x.vec" > "$tmp/v1/off.vec"
check "... one logprob 0.01 off: fails at 1e-3" status_is 1 env DS4_TEST_MODEL=$model \
    DS4_TEST_VECTOR_FILE="$tmp/v1/off.vec" DS4_TEST_LOGPROB_TOLERANCE=1e-3 ./ds4_test --logprob-vectors
check "... passes at ds4's 4" quiet env DS4_TEST_MODEL=$model DS4_TEST_VECTOR_FILE="$tmp/v1/off.vec" \
    ./ds4_test --logprob-vectors
for bad in "DS4_TEST_MODEL=$tmp/nope.gguf" "DS4_TEST_VECTOR_FILE=$tmp/nope.vec" \
           "DS4_TEST_LOGPROB_TOLERANCE=5" "DS4_TEST_MTP=$tmp/nope-mtp.gguf"; do
    test=--logprob-vectors
    [ "${bad%%=*}" = DS4_TEST_MTP ] && test=--mtp-verify-depth
    check "ds4_test $test with $bad -> 1" status_is 1 env DS4_TEST_MODEL=$model \
        DS4_TEST_VECTOR_FILE="$tmp/v1/x.vec" "$bad" ./ds4_test $test
    check "... naming it" grep -q -e "${bad%%=*}" -e "${bad#*=}" "$tmp/stderr"
done
check "ds4_test --logprob-vectors without a model named or found: a skip, 0" \
    status_is 0 env -u DS4_TEST_MODEL DS4_TEST_VECTOR_FILE="$tmp/v1/x.vec" ./ds4_test --logprob-vectors
check "... saying so" grep -q "skipped: a DeepSeek V4 Flash model ds4flash.gguf not found (set DS4_TEST_MODEL)" "$tmp/out.txt"
check "--vec-out with --tokens-file (no prompt text) -> 2" \
    status_is 2 ./ds4ref -m $model --tokens-file "$tmp/toks.txt" -n 4 --vec-out "$tmp/v2/z.vec"

# A model the official code runs with QAT off only (heads of 64, RoPE on 16)
# loads; QAT on is refused with the reason and the way out.
./ds4ref-mkmodel --config tiny-k64 -o "$tmp/k64.gguf"
check "a QAT-off-only model with QAT on -> 8" status_is 8 ./ds4ref -m "$tmp/k64.gguf" -p hi -n 4
check "... saying why, and --qat off" grep -q "not a multiple of 64: run it with QAT off (--qat off)" "$tmp/stderr"
check "... runs with --qat off (and its MTP head)" status_is 0 ./ds4ref -m "$tmp/k64.gguf" --qat off \
    --mtp "$tmp/k64-mtp.gguf" -p hi -n 4 --ignore-eos
check "ds4ref-bench --qat on with that model -> 8" \
    status_is 8 ./ds4ref-bench -m "$tmp/k64.gguf" -p 8 -n 2 --qat on
check "... saying why, and --qat off" grep -q "not a multiple of 64: run it with QAT off (--qat off)" "$tmp/stderr"
check "ds4ref-bench runs it with --qat off" status_is 0 ./ds4ref-bench -m "$tmp/k64.gguf" -p 8 -n 2 --qat off

# Errors: one line on stderr, distinct statuses.
check "unknown option -> 2" status_is 2 ./ds4ref --bogus

# Every program: --version, and an unknown option named as one wherever it
# stands (last on the line too, where a value would be).
declare -A valid=([ds4ref]="-m $model" [ds4ref-diff]="a.jsonl b.jsonl" [ds4ref-gguf]="info $model"
                  [ds4ref-mkmodel]="--config tiny" [ds4ref-bench]="-m $model" [ds4_test]="--all"
                  [ds4ref-server]="-m $model")
for prog in ds4ref ds4ref-diff ds4ref-gguf ds4ref-mkmodel ds4ref-bench ds4_test ds4ref-server; do
    check "$prog --version" grep -q "^$prog [0-9][0-9.]*" <(./$prog --version 2>&1)
    # shellcheck disable=SC2086
    check "$prog: a last unknown option -> 2" status_is 2 ./$prog ${valid[$prog]} --bogus
    check "$prog: ... named as unknown" grep -q "unknown option.*--bogus" "$tmp/stderr"
done
status_is 2 ./ds4ref -p hi --ctx
check "an option without its value says so" grep -q -- "--ctx needs a value" "$tmp/stderr"
./ds4ref -m $model -p "Hello there" -n 12 --ignore-eos --prefill-chunk 2 --golden-out "$tmp/pc.jsonl" > /dev/null
check "--prefill-chunk is --chunk" grep -q '"chunk":2,' "$tmp/pc.jsonl"
# --mtp alone speculates one draft deep, as ds4 does.
./ds4ref -m $model --mtp models/tiny-mtp.gguf -p "Hello there" -n 12 --ignore-eos --spec-report \
    --golden-out "$tmp/m1.jsonl" > /dev/null 2> "$tmp/m1.err"
check "--mtp without --mtp-draft drafts at depth 1" grep -q '"mtp_draft":1,' "$tmp/m1.jsonl"
check "--mtp without --mtp-draft proposes drafts" grep -q 'proposed=[1-9]' "$tmp/m1.err"
check "missing model -> 3" status_is 3 ./ds4ref -m "$tmp/none.gguf" -p hi
printf 'GGUFxxxx' > "$tmp/bad.gguf"
check "malformed model -> 4" status_is 4 ./ds4ref -m "$tmp/bad.gguf" -p hi
printf '1 2 999999' > "$tmp/badtok.txt"
check "token id out of range -> 7" status_is 7 ./ds4ref -m $model --tokens-file "$tmp/badtok.txt" -n 1
check "context too small for the prompt -> 7" status_is 7 ./ds4ref -m $model -p "Hello there" --ctx 3 -n 1
check "... suggesting the --ctx that holds it" grep -q -- "give --ctx 28 or more" "$tmp/stderr"
check "-n cut short by --ctx" status_is 0 ./ds4ref -m $model -p "Hello there" --ctx 40 -n 50 --ignore-eos
check "... says so on stderr" grep -q -- "^ds4ref: -n 50 cut to 13 tokens: .* context of 40" "$tmp/stderr"
check "--help -> 0" status_is 0 ./ds4ref --help

# Smaller things a first user meets: a context past the model's is said;
# with stdout and stderr in one file the speed line follows the text on a
# line of its own.
check "--ctx past the model's context_length -> a note" bash -c \
    './ds4ref -m "$1" -p hi -n 1 --ctx 100000 2>&1 >/dev/null | grep -q "past the model.s context_length 4096"' _ $model
./ds4ref -m $model -p "Hello there" -n 8 --ignore-eos > "$tmp/both.txt" 2>&1
check "stdout and stderr in one file: the speed line on its own line, last" \
    bash -c 'tail -1 "$1" | grep -q "^ds4ref: prefill: "' _ "$tmp/both.txt"
# A numerics profile: named in the golden's settings (a golden of the
# official numerics does not name one), told apart by ds4ref-diff, refused
# by name when unknown.
./ds4ref -m $model -p "Hello there" -n 4 --numerics ggml-act,f16-kv --golden-out "$tmp/prof.jsonl" \
    > /dev/null 2>&1
check "--numerics: the golden names its profile" grep -q '"settings":{"qat":true,"numerics":"ggml-act,f16-kv",' "$tmp/prof.jsonl"
check "... and an official one names none" bash -c '! grep -q numerics "$1"' _ "$tmp/c.jsonl"
check "... ds4ref-diff says they differ" bash -c \
    './ds4ref-diff "$1" "$2" | grep -q "settings differ: numerics official vs ggml-act,f16-kv"' _ "$tmp/c.jsonl" "$tmp/prof.jsonl"
check "--numerics bogus -> 2" status_is 2 ./ds4ref -m $model -p hi -n 1 --numerics bogus
check "... naming the profiles" grep -q 'expected official, ggml-act, ds4-act, f16-kv, jitter or ds4' "$tmp/stderr"
# The unquantized twin: every float tensor in F32, and ds4ref's numbers on
# it the model's own, step for step.
check "ds4ref-gguf twin" quiet ./ds4ref-gguf twin $model "$tmp/twin.gguf"
check "... its tensors are F32 (and I32)" bash -c \
    '! ./ds4ref-gguf info "$1" | grep -E "^ +[a-z_0-9.]+ +(f16|bf16|q8_0|q2_K|q4_K|iq2_xxs) "' _ "$tmp/twin.gguf"
./ds4ref -m "$tmp/twin.gguf" -p "Hello there" -n 16 --ignore-eos --golden-out "$tmp/twin.jsonl" > /dev/null 2>&1
check "... and a golden on it has the model's logprobs, bit for bit" quiet ./ds4ref-diff \
    "$tmp/c.jsonl" "$tmp/twin.jsonl" --min-top1 1 --max-dlogprob 0
# The official checkpoint's layout: ds4ref-mkmodel --format hf writes one
# in the release's formats and its F32 twin; with QAT off the two give the
# same steps (the header's model identity aside); with QAT on speculative
# decoding from the checkpoint's own MTP layer gives plain decoding's steps.
ck=(-p "The capital of Italy is" -n 8 --ignore-eos)
# same_checkpoint A B [FILE...]: two checkpoint folders' config.json, index,
# shards (and FILEs) byte for byte.
same_checkpoint() {
    local a=$1 b=$2 f
    shift 2
    for f in config.json model.safetensors.index.json model-00001-of-00002.safetensors \
             model-00002-of-00002.safetensors "$@"; do
        cmp -s "$a/$f" "$b/$f" || return 1
    done
}
check "mkmodel --format hf (release, then --types f32)" bash -c \
    './ds4ref-mkmodel --config tiny-ckpt --format hf -o "$1/ck" && ./ds4ref-mkmodel --config tiny-ckpt --format hf --types f32 -o "$1/ckf"' _ "$tmp"
check "... a folder with config.json, the index, two shards and tokenizer.json" test -s "$tmp/ck/model-00002-of-00002.safetensors" -a -s "$tmp/ck/model.safetensors.index.json" -a -s "$tmp/ck/tokenizer.json"
check "... its tokenizer.json in the release's shape: the official splits, bytes, BPE's and added tokens' fields" \
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); p = t["pre_tokenizer"]["pretokenizers"]
assert [x["type"] for x in p] == ["Split"] * 3 + ["ByteLevel"] and p[0]["pattern"]["Regex"] == "\\p{N}{1,3}"
assert t["decoder"]["type"] == "ByteLevel" and t["model"]["byte_fallback"] is False
assert all({"single_word", "lstrip", "rstrip", "normalized", "special"} <= a.keys() for a in t["added_tokens"])' "$tmp/ck/tokenizer.json"
./ds4ref -m "$tmp/ck" "${ck[@]}" --qat off --golden-out "$tmp/ck.jsonl" > /dev/null 2>&1
./ds4ref -m "$tmp/ckf" "${ck[@]}" --qat off --golden-out "$tmp/ckf.jsonl" > /dev/null 2>&1
check "... QAT off: the checkpoint and its twin give the same steps" \
    cmp <(tail -n +2 "$tmp/ck.jsonl") <(tail -n +2 "$tmp/ckf.jsonl")
check "... which are 8 steps" test "$(wc -l < "$tmp/ck.jsonl")" -ge 9
# ds4ref-gguf checkpoint on the same model as an all-F32 GGUF writes the
# very files mkmodel --format hf does (its blocks quantized in parallel).
quiet ./ds4ref-mkmodel --config tiny-ckpt --types f32 -o "$tmp/ckg.gguf"
check "ds4ref-gguf checkpoint FILE MTP DIR" quiet ./ds4ref-gguf checkpoint "$tmp/ckg.gguf" "$tmp/ckg-mtp.gguf" "$tmp/ckc"
check "... the files mkmodel --format hf writes, byte for byte" same_checkpoint "$tmp/ck" "$tmp/ckc" tokenizer.json
check "ds4ref-gguf checkpoint with no folder -> 2" status_is 2 ./ds4ref-gguf checkpoint "$tmp/ckg.gguf"
./ds4ref -m "$tmp/ck" "${ck[@]}" --golden-out "$tmp/ckq.jsonl" > /dev/null 2>&1
./ds4ref -m "$tmp/ck" --mtp "$tmp/ck" --mtp-draft 3 "${ck[@]}" --golden-out "$tmp/cks.jsonl" > /dev/null 2>&1
check "... QAT on: drafts of 3 from its MTP layer give plain decoding's steps" \
    cmp <(tail -n +2 "$tmp/ckq.jsonl") <(tail -n +2 "$tmp/cks.jsonl")
check "... and not QAT off's" bash -c '! cmp -s <(tail -n +2 "$1") <(tail -n +2 "$2")' _ "$tmp/ckq.jsonl" "$tmp/ck.jsonl"
check "ds4_test --mtp-verify-depth on a checkpoint, its MTP layer inside" quiet \
    env DS4_TEST_MODEL="$tmp/ck" DS4_TEST_MTP="$tmp/ck" DS4_TEST_MTP_STEPS=4 ./ds4_test --mtp-verify-depth
# DeepSeek-V4-Flash-0731's configuration (tiny-0731: a DSpark drafter, no
# MTP layer): its trunk from GGUF and from a checkpoint.
check "tiny-0731 without --no-mtp -> 2" status_is 2 ./ds4ref-mkmodel --config tiny-0731 -o "$tmp/0731.gguf"
check "... saying it drafts with DSpark" grep -q "drafts with DSpark.*--no-mtp" "$tmp/stderr"
quiet ./ds4ref-mkmodel --config tiny-0731 --no-mtp -o "$tmp/0731.gguf"
check "tiny-0731: a GGUF with the DSpark keys and its stages' ratios" bash -c \
    './ds4ref-gguf info "$1" > "$2" && grep -q "dspark.target_layer_ids = arr\[u32; 3\] \[1, 2, 3\]" "$2" &&
     grep -q "compress_ratios = arr\[u32; 7\] \[0, 0, 4, 128, 0, 0, 0\]" "$2"' _ \
    "$tmp/0731.gguf" "$tmp/0731.txt"
check "... its trunk decodes" quiet ./ds4ref -m "$tmp/0731.gguf" "${ck[@]}"
quiet ./ds4ref-mkmodel --config tiny-0731 --no-mtp --format hf -o "$tmp/0731h"
quiet ./ds4ref-mkmodel --config tiny-0731 --no-mtp --format hf --types f32 -o "$tmp/0731hf"
check "... as a checkpoint, config.json with 0731's DSpark keys" bash -c \
    'grep -q "\"dspark_block_size\": 5" "$1" && grep -q "\"compress_ratios\": \[0, 0, 4, 128, 0, 0, 0\]" "$1"' \
    _ "$tmp/0731h/config.json"
check "... its DSpark stages named, typed and shaped as 0731's checkpoint has them" python3 -c '
import json, struct, sys
d = sys.argv[1]
heads = {}
for shard in set(json.load(open(d + "/model.safetensors.index.json"))["weight_map"].values()):
    with open(d + "/" + shard, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        heads.update(json.loads(f.read(n)))
def has(name, dtype, shape):
    assert heads[name]["dtype"] == dtype and heads[name]["shape"] == shape, (name, heads[name])
has("mtp.0.main_proj.weight", "F8_E4M3", [256, 768]); has("mtp.0.main_proj.scale", "F8_E8M0", [2, 6])
has("mtp.0.main_norm.weight", "BF16", [256]); has("mtp.2.norm.weight", "BF16", [256])
has("mtp.2.hc_head_fn", "F32", [4, 1024]); has("mtp.2.hc_head_scale", "F32", [1])
has("mtp.2.markov_head.markov_w1.weight", "BF16", [512, 16])
has("mtp.2.markov_head.markov_w2.weight", "BF16", [512, 16])
has("mtp.2.confidence_head.proj.weight", "BF16", [1, 272])
has("mtp.1.ffn.gate.bias", "F32", [8]); has("mtp.1.ffn.experts.7.w2.weight", "I8", [256, 128])
# 0731 per stage: 13 attention, 2 norms, 6 hyper-connection, 2 gate, 3 x 2 per expert, 6 shared
per = [sum(k.startswith("mtp.%d." % s) for k in heads) for s in range(3)]
assert per == [77 + 3, 77, 77 + 7] and "mtp.3.attn_norm.weight" not in heads, per
assert not any(".compressor." in k or ".indexer." in k or "tid2eid" in k for k in heads if k.startswith("mtp."))' "$tmp/0731h"
quiet ./ds4ref-mkmodel --config tiny-0731 --no-mtp --types f32 -o "$tmp/0731f.gguf"
quiet ./ds4ref-gguf checkpoint "$tmp/0731f.gguf" "$tmp/0731c"
check "... its F32 GGUF as a checkpoint: the files mkmodel --format hf writes" same_checkpoint "$tmp/0731h" "$tmp/0731c"
./ds4ref -m "$tmp/0731h" "${ck[@]}" --qat off --golden-out "$tmp/0731h.jsonl" > /dev/null 2>&1
./ds4ref -m "$tmp/0731hf" "${ck[@]}" --qat off --golden-out "$tmp/0731hf.jsonl" > /dev/null 2>&1
check "... QAT off: the checkpoint and its twin give the same 8 steps" bash -c \
    'cmp <(tail -n +2 "$1") <(tail -n +2 "$2") && test "$(wc -l < "$1")" -ge 9' _ "$tmp/0731h.jsonl" "$tmp/0731hf.jsonl"

# The DSpark drafter: tiny-dspark drafts with it (--mtp-draft without
# --mtp), and split as llama.cpp ships it (ds4ref-gguf dspark-split: the
# trunk, and the drafter as an architecture-dflash file, read back with
# --dspark) it drafts the same, the same stream as plain decoding.
quiet ./ds4ref-mkmodel --config tiny-dspark --no-mtp -o "$tmp/dspark.gguf"
check "ds4ref-gguf dspark-split: the trunk and llama.cpp's drafter file" quiet ./ds4ref-gguf dspark-split \
    "$tmp/dspark.gguf" "$tmp/dspark-trunk.gguf" "$tmp/dspark-draft.gguf"
check "... the drafter file: architecture dflash, its target layers' inputs" bash -c \
    './ds4ref-gguf info "$1" > "$2" && grep -q "general.architecture = str \"dflash\"" "$2" &&
     grep -q "dflash.target_layers = arr\[u32; 3\] \[2, 3, 4\]" "$2" && grep -q "^  conf_proj.weight " "$2"' \
    _ "$tmp/dspark-draft.gguf" "$tmp/dspark-draft.txt"
./ds4ref -m "$tmp/dspark.gguf" "${ck[@]}" -n 24 --golden-out "$tmp/dspark-plain.jsonl" > /dev/null 2>&1
./ds4ref -m "$tmp/dspark.gguf" "${ck[@]}" -n 24 --mtp-draft 5 --spec-report --golden-out "$tmp/dspark-one.jsonl" \
    > /dev/null 2> "$tmp/dspark-one.txt"
./ds4ref -m "$tmp/dspark-trunk.gguf" --dspark "$tmp/dspark-draft.gguf" "${ck[@]}" -n 24 --mtp-draft 5 \
    --spec-report --golden-out "$tmp/dspark-two.jsonl" > /dev/null 2> "$tmp/dspark-two.txt"
check "... one file or two: the same drafts accepted" bash -c \
    'grep "^mtp accept:" "$1" > /dev/null && cmp <(grep accept "$1") <(grep accept "$2")' _ \
    "$tmp/dspark-one.txt" "$tmp/dspark-two.txt"
check "... and the stream of plain decoding" bash -c \
    'cmp <(tail -n +2 "$1") <(tail -n +2 "$2") && cmp <(tail -n +2 "$1") <(tail -n +2 "$3")' _ \
    "$tmp/dspark-plain.jsonl" "$tmp/dspark-one.jsonl" "$tmp/dspark-two.jsonl"
check "... its golden names the drafter" grep -q '"mtp_draft":5,"drafter":"dspark"' "$tmp/dspark-one.jsonl"
check "... with --chunk 1 (the engine holds a block all the same): the same stream" bash -c \
    './ds4ref -m "$1" -p "The capital of Italy is" --ignore-eos -n 24 --chunk 1 --mtp-draft 3 \
         --golden-out "$3" > /dev/null 2>&1 && cmp <(tail -n +2 "$2") <(tail -n +2 "$3")' _ \
    "$tmp/dspark.gguf" "$tmp/dspark-plain.jsonl" "$tmp/dspark-c1.jsonl"
check "--dspark on a model with a drafter of its own -> 2" status_is 2 ./ds4ref -m "$tmp/dspark.gguf" \
    --dspark "$tmp/dspark-draft.gguf" "${ck[@]}"

# DeepSeek-V4-Pro's shape (tiny-pro: hash-routed layers at ratio 128, 4
# output groups, route scale 2.5) from GGUF and from a checkpoint.
quiet ./ds4ref-mkmodel --config tiny-pro -o "$tmp/pro.gguf"
check "tiny-pro: a GGUF with Pro's ratios and route scale" bash -c \
    './ds4ref-gguf info "$1" > "$2" && grep -q "compress_ratios = arr\[u32; 4\] \[128, 128, 4, 4\]" "$2" &&
     grep -q "expert_weights_scale = f32 2.5" "$2" && grep -q "hash_layer_count = u32 3" "$2"' _ \
    "$tmp/pro.gguf" "$tmp/pro.txt"
check "... decodes" quiet ./ds4ref -m "$tmp/pro.gguf" "${ck[@]}"
quiet ./ds4ref-mkmodel --config tiny-pro --types f32 -o "$tmp/prof.gguf"
quiet ./ds4ref-mkmodel --config tiny-pro --format hf -o "$tmp/proh"
quiet ./ds4ref-mkmodel --config tiny-pro --format hf --types f32 -o "$tmp/prohf"
quiet ./ds4ref-gguf checkpoint "$tmp/prof.gguf" "$tmp/prof-mtp.gguf" "$tmp/proc"
check "... its F32 GGUF as a checkpoint: the files mkmodel --format hf writes" same_checkpoint "$tmp/proh" "$tmp/proc"
./ds4ref -m "$tmp/proh" "${ck[@]}" --qat off --golden-out "$tmp/proh.jsonl" > /dev/null 2>&1
./ds4ref -m "$tmp/prohf" "${ck[@]}" --qat off --golden-out "$tmp/prohf.jsonl" > /dev/null 2>&1
check "... QAT off: the release checkpoint and its twin give the same 8 steps" bash -c \
    'cmp <(tail -n +2 "$1") <(tail -n +2 "$2") && test "$(wc -l < "$1")" -ge 9' _ "$tmp/proh.jsonl" "$tmp/prohf.jsonl"
check "... QAT on, with drafts of 2 from its MTP layer" quiet ./ds4ref -m "$tmp/proh" --mtp "$tmp/proh" \
    --mtp-draft 2 "${ck[@]}"
t4=(env DS4_TEST_MODEL=$model DS4_TEST_MTP=models/tiny-mtp.gguf DS4_TEST_MTP_STEPS=2 ./ds4_test --mtp-verify-depth)
"${t4[@]}" 2>&1 | grep "plain greedy" > "$tmp/t4.txt"
DS4_TEST_NUMERICS=ggml-act "${t4[@]}" 2>&1 | grep "plain greedy" >> "$tmp/t4.txt"
check "ds4_test's DS4_TEST_NUMERICS rounds the products' inputs (other first logits)" \
    test "$(awk '{print $9}' "$tmp/t4.txt" | sort -u | wc -l)" -eq 2 -a "$(wc -l < "$tmp/t4.txt")" -eq 2
check "a checkpoint with a numerics profile -> 2" status_is 2 ./ds4ref -m "$tmp/ck" --numerics ggml-act "${ck[@]}"
check "... saying why" grep -q "a checkpoint runs the official numerics only" "$tmp/stderr"
check "a checkpoint with another --mtp -> 2" status_is 2 ./ds4ref -m "$tmp/ck" --mtp "$tmp/k64-mtp.gguf" "${ck[@]}"
check "... saying so" grep -q "holds its MTP layer" "$tmp/stderr"
quiet ./ds4ref-mkmodel --config tiny --format hf -o "$tmp/ckt"
check "tiny as a checkpoint with QAT on -> 8" status_is 8 ./ds4ref -m "$tmp/ckt" -p x -n 1
check "... naming its input of 64" grep -q "layers.0.attn.wq_b.weight has an input of 64, not whole blocks of 128" "$tmp/stderr"
# ds4ref-llama without llama.cpp (make peers runs it with): clear errors.
printf '1 2 3\n' > "$tmp/rows.txt"
llama_args=(-m $model --batch-tokens "$tmp/rows.txt" -n 2 --chunk 2 -c 64 --out "$tmp/l.json")
check "ds4ref-llama with no library -> 1" status_is 1 env -u DS4REF_LLAMA_LIB ./ds4ref-llama "${llama_args[@]}"
check "... saying where llama.cpp comes from" grep -q 'set DS4REF_LLAMA_LIB.*@node-llama-cpp/linux-x64@3.22.1' "$tmp/stderr"
check "ds4ref-llama --lib on a folder without it -> 1" status_is 1 ./ds4ref-llama --lib "$tmp" "${llama_args[@]}"
check "... naming the file" grep -q "cannot load $tmp/libggml-base.so" "$tmp/stderr"
printf '1 x 3\n' > "$tmp/rows.txt"
check "ds4ref-llama on a bad token row -> 1" status_is 1 ./ds4ref-llama --lib "$tmp" "${llama_args[@]}"
check "... naming the row" grep -q 'rows.txt: row 0: expected token ids separated by spaces, at "x 3' "$tmp/stderr"
# A golden suite in shards (scripts/golden-suite.sh; make peers runs it on
# Slurm): two shards merged are byte for byte the suite run as one, with the
# prompts beside it, and ds4_test --logprob-vectors holds the model to it; a
# merge without a slice, or of shards run with other arguments, is refused
# by name.
# (Case ids other than the prompts' file names: ds4ref keeps a prompt by its file's name.)
for p in chat code copy; do echo "q-$p $PWD/vectors/conform/$p.txt"; done > "$tmp/suite.txt"
gs=scripts/golden-suite.sh
suite_args=(-m "$PWD/$model" -n 4)
quiet $gs shard "$tmp/suite.txt" 0/2 "$tmp/gs/s0.vec" "${suite_args[@]}"
quiet $gs shard "$tmp/suite.txt" 1/2 "$tmp/gs/s1.vec" "${suite_args[@]}"
quiet $gs shard "$tmp/suite.txt" 0/1 "$tmp/gs1/all.vec" "${suite_args[@]}"
check "golden suite: two shards merge" status_is 0 $gs merge "$tmp/suite.txt" "$tmp/gsm/suite.vec" \
    "$tmp/gs/s1.vec" "$tmp/gs/s0.vec"
quiet $gs merge "$tmp/suite.txt" "$tmp/gsm1/suite.vec" "$tmp/gs1/all.vec"
check "... byte for byte the suite run as one shard, prompts too" bash -c \
    'cmp "$1/gsm/suite.vec" "$1/gsm1/suite.vec" && diff -r "$1/gsm/prompts" "$1/gsm1/prompts"' _ "$tmp"
check "... which ds4_test --logprob-vectors holds the model to" status_is 0 env DS4_TEST_MODEL="$model" \
    DS4_TEST_VECTOR_FILE="$tmp/gsm/suite.vec" ./ds4_test --logprob-vectors
check "... its three cases each" bash -c '[ "$(grep -c ": ok$" "$1")" -eq 3 ]' _ "$tmp/out.txt"
check "a merge without slice 1 -> 2" status_is 2 $gs merge "$tmp/suite.txt" "$tmp/x.vec" "$tmp/gs/s0.vec"
check "... naming it and its cases" grep -q 'shard 1/2 (cases q-code,q-copy) is missing' "$tmp/stderr"
quiet $gs shard "$tmp/suite.txt" 1/2 "$tmp/gs/n5.vec" -m "$PWD/$model" -n 5
check "shards run with other arguments -> 2" status_is 2 $gs merge "$tmp/suite.txt" "$tmp/x.vec" \
    "$tmp/gs/s0.vec" "$tmp/gs/n5.vec"
check "... saying so" grep -q 'n5.vec: ds4ref ran with other arguments' "$tmp/stderr"

[ $fails -eq 0 ] && echo "cli: all passed" || echo "cli: $fails failed"
exit $((fails != 0))
