#!/usr/bin/env bash
# Regenerates every golden of vectors/manifest.txt with ./ds4ref and rewrites
# the manifest's sha256 columns.  A change of numerics shows up as a diff of
# the committed goldens: review it, then commit it with the reason.
#
#   scripts/make_vectors.sh [--bin DIR] [--out DIR] [--only "NAME..."]
#
# --bin  where ds4ref and ds4ref-mkmodel are (default .); $DS4REF_RUN, if
#        set, prefixes them (e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu")
# --out  write the goldens, tiny.vec and a manifest of what was written there
#        instead of into vectors/ (scripts/portability.sh compares them)
# --only regenerate just these goldens, and not tiny.vec
set -euo pipefail
cd "$(dirname "$0")/.."
bin=. out=vectors only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2 ;;
        --out) out=$2 ;;
        --only) only=$2 ;;
        *) echo "usage: $0 [--bin DIR] [--out DIR] [--only \"NAME...\"]" >&2; exit 2 ;;
    esac
    shift 2
done
# shellcheck disable=SC2206
run=(${DS4REF_RUN:-})
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
new="$tmp/manifest.txt"
while IFS= read -r line; do
    case "$line" in ''|'#'*) printf '%s\n' "$line" >> "$new"; continue ;; esac
    read -r name config types seed qat steps prompt _ <<< "$line"
    [ -z "$only" ] || [[ " $only " == *" $name "* ]] || continue
    model="$tmp/$config-$types-$seed.gguf"
    [ -f "$model" ] || "${run[@]}" "$bin/ds4ref-mkmodel" --config "$config" --types "$types" \
        --seed "$seed" --no-mtp -o "$model"
    "${run[@]}" "$bin/ds4ref" -m "$model" --prompt-file "vectors/$prompt" -sys "" --nothink \
        --qat "$qat" -n "$steps" --ignore-eos --logprobs-top-k 8 --golden-out "$out/$name.jsonl" \
        > /dev/null
    msha=$(sha256sum "$model" | cut -d' ' -f1)
    gsha=$(sha256sum "$out/$name.jsonl" | cut -d' ' -f1)
    echo "$name $config $types $seed $qat $steps $prompt $msha $gsha" >> "$new"
    echo "$out/$name.jsonl"
done < vectors/manifest.txt
cp "$new" "$out/manifest.txt"
[ -z "$only" ] || exit 0

# An official.vec made by ds4ref on the default tiny model, so that the
# --logprob-vectors code path of ds4_test runs in CI without the real model.
model="$tmp/tiny-ds4-1.gguf"
[ -f "$model" ] || "${run[@]}" "$bin/ds4ref-mkmodel" --config tiny --types ds4 --seed 1 --no-mtp \
    -o "$model"
rm -f "$out/tiny.vec"
for p in capital code story; do
    "${run[@]}" "$bin/ds4ref" -m "$model" --prompt-file "vectors/prompts/$p.txt" -sys "" --nothink \
        -n 16 --ignore-eos --vec-out "$out/tiny.vec" --vec-id "$p" > /dev/null
done
echo "$out/tiny.vec"
