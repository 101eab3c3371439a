#!/usr/bin/env bash
# Regenerates every golden of vectors/manifest.txt with ./ds4ref and rewrites
# the manifest's sha256 columns.  A change of numerics shows up as a diff of
# the committed goldens: review it, then commit it with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
new="$tmp/manifest.txt"
while IFS= read -r line; do
    case "$line" in ''|'#'*) printf '%s\n' "$line" >> "$new"; continue ;; esac
    read -r name config types seed qat steps prompt _ <<< "$line"
    model="$tmp/$config-$types-$seed.gguf"
    [ -f "$model" ] || ./ds4ref-mkmodel --config "$config" --types "$types" --seed "$seed" --no-mtp -o "$model"
    ./ds4ref -m "$model" --prompt-file "vectors/$prompt" -sys "" --nothink --qat "$qat" \
        -n "$steps" --ignore-eos --logprobs-top-k 8 --golden-out "vectors/$name.jsonl" > /dev/null
    msha=$(sha256sum "$model" | cut -d' ' -f1)
    gsha=$(sha256sum "vectors/$name.jsonl" | cut -d' ' -f1)
    echo "$name $config $types $seed $qat $steps $prompt $msha $gsha" >> "$new"
    echo "vectors/$name.jsonl"
done < vectors/manifest.txt
cp "$new" vectors/manifest.txt

# An official.vec made by ds4ref on the default tiny model, so that the
# --logprob-vectors code path of ds4_test runs in CI without the real model.
model="$tmp/tiny-ds4-1.gguf"
[ -f "$model" ] || ./ds4ref-mkmodel --config tiny --types ds4 --seed 1 --no-mtp -o "$model"
rm -f vectors/tiny.vec
for p in capital code story; do
    ./ds4ref -m "$model" --prompt-file "vectors/prompts/$p.txt" -sys "" --nothink -n 16 \
        --ignore-eos --vec-out vectors/tiny.vec --vec-id "$p" > /dev/null
done
echo vectors/tiny.vec
