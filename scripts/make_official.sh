#!/usr/bin/env bash
# Rebuilds vectors/official/ from the official-model oracle folder
# (../shared/oracle/official by default): the subset the tests use,
# xz-compressed, the expert and indexer selections of the debug dumps in the
# compact text form the tests read, and SHA256SUMS of every file as the
# tests see it after decompression.  Run it only when the oracle changes;
# vectors/official/README.md says what is kept and why.
#
#   scripts/make_official.sh [ORACLE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-../shared/oracle/official}
dst=vectors/official
for tool in jq xz sha256sum; do
    command -v $tool > /dev/null || { echo "make_official.sh: $tool is needed" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Shipped as they are in the oracle (decompressed names).
files=(model.gguf model-mtp.gguf tokens.txt gguf_info.txt
       logits_prefill.qat_off.f64 logits_prefill.qat_on.f64
       mtp_logits.qat_off.f64 mtp_logits.qat_on.f64
       h_final.qat_off.f32 h_final.qat_on.f32 mtp_logits_samepos.qat_off.f32
       qat_unit/fp8_in.f32 qat_unit/fp8_out.f32 qat_unit/fp4_in.f32 qat_unit/fp4_out.f32
       qat_unit/hadamard128_in.f64 qat_unit/hadamard128_out.f64
       rope/rope_ratio0.f32 rope/rope_compressed.f32)
data=$tmp/data
for f in "${files[@]}"; do
    mkdir -p "$data/$(dirname "$f")"
    cp "$src/$f" "$data/$f"
done

# The selections of debug.qat_{off,on}.json, one line per layer and position:
#   r LAYER POS K EXPERT... WEIGHT...   routing, official order (descending
#                                       biased score; tid2eid order on hash
#                                       layers), weights with route_scale
#   i LAYER POS N BLOCK...              indexer blocks, ascending
# Numbers are the JSON's own text (jq prints them back unchanged).
for mode in qat_off qat_on; do
    {
        echo "# Expert and indexer selections of the official debug.$mode.json (scripts/make_official.sh)."
        echo "# r LAYER POS K EXPERT... WEIGHT... | i LAYER POS N BLOCK...; MTP positions are MTP rows."
        jq -r '.routing | to_entries[] | .key as $l | .value as $r
               | range(0; $r.experts | length) as $p
               | "r \($l) \($p) \($r.experts[$p] | length) \($r.experts[$p] | map(tostring) | join(" ")) \($r.weights[$p] | map(tostring) | join(" "))"' \
            "$src/debug.$mode.json"
        jq -r '.indexer | to_entries[] | .key as $l | .value.blocks | to_entries[]
               | "i \($l) \(.key) \(.value | length) \(.value | map(tostring) | join(" "))" | sub(" $"; "")' \
            "$src/debug.$mode.json"
    } > "$data/selections.$mode.txt"
done

(cd "$data" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum) > "$tmp/SHA256SUMS"

# lc/lp/pb tuned to the element size: about 6 % smaller than the preset alone.
mkdir -p "$dst"
rm -rf "${dst:?}"/*.xz "$dst"/qat_unit "$dst"/rope
while read -r _ f; do
    mkdir -p "$dst/$(dirname "$f")"
    case "$f" in
        *.f64) filt=--lzma2=preset=9e,lc=1,lp=3,pb=3 ;;
        *.f32|*.gguf) filt=--lzma2=preset=9e,lc=1,lp=2,pb=2 ;;
        *) filt=--lzma2=preset=9e ;;
    esac
    xz -c -T1 "$filt" "$data/$f" > "$dst/$f.xz"
done < "$tmp/SHA256SUMS"
cp "$tmp/SHA256SUMS" "$dst/SHA256SUMS"
du -cb "$dst"/*.xz "$dst"/*/*.xz | tail -1
