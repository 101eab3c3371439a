#!/bin/bash
# A golden suite -- many prompts, each a case of an official.vec file, what
# ds4_test --logprob-vectors reads -- cut into shards that run apart (on a
# cluster: scripts/slurm-goldens.sh) and merged into one file
# (docs/CONFORM.md, "On a cluster").
#
#   scripts/golden-suite.sh shard SUITE K/N OUT.vec [ds4ref ARGS...]
#   scripts/golden-suite.sh merge SUITE OUT.vec SHARD.vec...
#
# SUITE holds a case a line, "ID PROMPT-FILE" (the path relative to SUITE's
# folder; '#' comments and blank lines skipped).  shard runs the cases of
# slice K of N (cases K*n/N to (K+1)*n/N-1, in the suite's order), each
# `ds4ref ARGS -sys "" --nothink --prompt-file PROMPT --vec-out OUT.vec
# --vec-id ID` (ARGS: -m MODEL, -n, -c, ...), and marks OUT.vec with the
# suite's and ARGS' digests and the slice; the file appears only when every
# case of the slice is in it.  merge checks that the shards are of one suite,
# one ARGS and one split, every slice once with exactly its cases, and
# writes OUT.vec: the cases in the suite's order, their prompts beside it
# (in prompts/, by the prompt file's name, as ds4ref keeps them), which is
# what an unsharded run writes.  Refusals name the
# file or the slice; exit status 2.  DS4REF names the program (default:
# ds4ref beside this script's folder, else on the PATH).
set -uo pipefail

die() { echo "golden-suite: $*" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
ds4ref=${DS4REF:-}
[ -n "$ds4ref" ] || { [ -x "$here/ds4ref" ] && ds4ref=$here/ds4ref; } || ds4ref=$(command -v ds4ref)
sha() { sha256sum | cut -d' ' -f1; }

# The suite's cases: "ID PATH" lines, PATH made relative to the caller.
cases() {
    local dir
    dir=$(dirname "$1")
    awk -v dir="$dir" '/^[ \t]*(#|$)/ { next }
        NF != 2 { printf "%s:%d: expected \"ID PROMPT-FILE\"\n", FILENAME, FNR > "/dev/stderr"; bad = 1; next }
        seen[$1]++ { printf "%s:%d: case %s twice\n", FILENAME, FNR, $1 > "/dev/stderr"; bad = 1; next }
        { print $1, ($2 ~ /^\// ? $2 : dir "/" $2) }
        END { exit bad }' "$1"
}

# The cases of slice k of n, of a list of cases on stdin.
slice() {
    awk -v k="$1" -v n="$2" '{ line[NR] = $0 } END {
        lo = int(NR * k / n); hi = int(NR * (k + 1) / n)
        for (i = lo + 1; i <= hi; i++) print line[i] }'
}

# A shard's mark: "# ds4ref-suite shard K/N suite SHA args SHA".
mark() { head -1 "$1" | awk '$1 == "#" && $2 == "ds4ref-suite" && $3 == "shard" { print $4, $6, $8 }'; }

cmd=${1:-}
case "$cmd" in
shard)
    [ $# -ge 4 ] || die "usage: $0 shard SUITE K/N OUT.vec [ds4ref ARGS...]"
    suite=$2 kn=$3 out=$4
    shift 4
    [[ $kn =~ ^([0-9]+)/([1-9][0-9]*)$ ]] && [ "${BASH_REMATCH[1]}" -lt "${BASH_REMATCH[2]}" ] ||
        die "shard: expected K/N with 0 <= K < N, got '$kn'"
    k=${BASH_REMATCH[1]} n=${BASH_REMATCH[2]}
    list=$(cases "$suite") || exit 2
    suite_sha=$(sha < "$suite")
    args_sha=$(printf '%s\n' "$@" | sha)
    [ ! -e "$out" ] || die "$out exists: a shard writes a new file"
    part=$out.part
    trap 'rm -f "$part" "$part.head" "$part.log" "$out.tmp"' EXIT
    rm -f "$part"
    mkdir -p "$(dirname "$out")"
    echo "# ds4ref-suite shard $k/$n suite $suite_sha args $args_sha" > "$part.head"
    while read -r id prompt; do
        [ -n "$id" ] || continue
        "$ds4ref" "$@" -sys "" --nothink --prompt-file "$prompt" --vec-out "$part" --vec-id "$id" \
            < /dev/null > "$part.log" 2>&1 || die "case $id: ds4ref failed: $(tail -1 "$part.log")"
    done < <(printf '%s\n' "$list" | slice "$k" "$n")
    [ -e "$part" ] || : > "$part"
    cat "$part.head" "$part" > "$out.tmp" && mv "$out.tmp" "$out"
    # ds4ref wrote each prompt into prompts/ beside the part file: the same folder.
    echo "golden-suite: shard $k/$n: $(grep -c '^case ' "$out") cases in $out"
    ;;
merge)
    [ $# -ge 4 ] || die "usage: $0 merge SUITE OUT.vec SHARD.vec..."
    suite=$2 out=$3
    shift 3
    list=$(cases "$suite") || exit 2
    suite_sha=$(sha < "$suite")
    n= args=
    tmp=$out.tmp
    trap 'rm -f "$tmp"' EXIT
    declare -A file_of=()
    for f in "$@"; do
        [ -r "$f" ] || die "$f: not readable"
        read -r kn s a <<< "$(mark "$f")"
        [ -n "${kn:-}" ] || die "$f: not a shard of golden-suite.sh (no '# ds4ref-suite shard' line first)"
        # The slice as numbers, K < N, before any arithmetic reads them.
        [[ $kn =~ ^([0-9]{1,9})/([1-9][0-9]{0,8})$ ]] && [ "${BASH_REMATCH[1]}" -lt "${BASH_REMATCH[2]}" ] ||
            die "$f: its mark names no slice K/N with K < N"
        [ "$s" = "$suite_sha" ] || die "$f: a shard of another suite (its digest ${s:0:16}..., $suite's ${suite_sha:0:16}...)"
        [ -z "$args" ] || [ "$a" = "$args" ] || die "$f: ds4ref ran with other arguments than ${file_of[*]}'s"
        args=$a
        [ -z "$n" ] || [ "${kn#*/}" = "$n" ] || die "$f is a shard of ${kn#*/}, the others of $n: shards of one split only"
        n=${kn#*/}
        k=${kn%/*}
        [ -z "${file_of[$k]:-}" ] || die "${file_of[$k]} and $f are both shard $kn"
        file_of[$k]=$f
    done
    for ((k = 0; k < n; k++)); do
        want=$(printf '%s\n' "$list" | slice "$k" "$n" | cut -d' ' -f1)
        [ -n "${file_of[$k]:-}" ] ||
            die "shard $k/$n (cases $(printf '%s' "$want" | tr '\n' ,)) is missing: run it (shard SUITE $k/$n) and merge again"
        got=$(grep '^case ' "${file_of[$k]}" | cut -d' ' -f2)
        [ "$got" = "$want" ] ||
            die "${file_of[$k]}: shard $k/$n holds cases $(printf '%s' "$got" | tr '\n' ,), not its slice's $(printf '%s' "$want" | tr '\n' ,)"
    done
    mkdir -p "$(dirname "$out")/prompts"
    printf '# ds4-official-logprob-vectors-v1\n# case <id> <ctx> <steps> <prompt-file>\n# step <index> <selected-hex> <top-count>\n# top <token-hex> <official-logprob>\n' > "$tmp"
    for ((k = 0; k < n; k++)); do
        f=${file_of[$k]}
        # Its cases as ds4ref appends them: a blank line, then "case" to "end".
        awk '/^case / { on = 1; print "" } on { print } /^end$/ { on = 0 }' "$f" >> "$tmp"
        # Each case's prompt, which ds4ref kept in prompts/ under its file's name.
        while read -r _ id _ _ path; do
            name=$(basename "$path")
            src=$(dirname "$f")/prompts/$name dst=$(dirname "$out")/prompts/$name
            [ -r "$src" ] || die "$f: case $id's prompt $src is missing"
            if [ -e "$dst" ] && ! cmp -s "$src" "$dst"; then die "$dst exists with other bytes than $src"; fi
            [ "$src" -ef "$dst" ] || cp "$src" "$dst"
        done < <(grep '^case ' "$f")
    done
    mv "$tmp" "$out"
    echo "golden-suite: $(grep -c '^case ' "$out") cases from $n shards in $out"
    ;;
*)
    die "usage: $0 shard SUITE K/N OUT.vec [ds4ref ARGS...] | merge SUITE OUT.vec SHARD.vec..."
    ;;
esac
