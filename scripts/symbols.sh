#!/usr/bin/env bash
# Checks the global symbols of the two static libraries (docs/ARCHITECTURE.md,
# "Names"): every symbol an object defines carries its library's prefix and
# its file's, as redis names sds.c's functions sds*.
#
#   scripts/symbols.sh [BUILD_DIR]     the archives of a build (make test)
#   scripts/symbols.sh --list FILE     check a listing of "library object
#                                      symbol" lines (the test that the
#                                      check can fail uses it)
#
# A file's prefix is its library's internal prefix (ds4_ for libds4ref,
# ds4chk_ for libds4check) and the file's name: ref/forward/moe.c defines
# ds4_moe*.  The public API files define the public prefixes (ds4ref_,
# ds4check_), and five files use the short name their functions have always
# had, listed in file_prefix.  Prints the count checked; exits 1 on a symbol
# that breaks the rule.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

# file_prefix LIBRARY OBJECT: the prefix OBJECT's symbols must start with.
file_prefix() {
    local stem
    stem=$(basename "$2" .o)
    case "$2" in
        ref/api/*) echo ds4ref_ ;;
        check/api/*) echo ds4check_ ;;
        base/detmath.o) echo ds4_det_ ;;
        ref/forward/hyperconn.o) echo ds4_hc_ ;;
        ref/forward/kvstate.o) echo ds4_kv_ ;;
        ref/text/tokenizer.o) echo ds4_tok ;;
        ref/decode/speculative.o) echo ds4_spec_ ;;
        *) if [ "$1" = libds4check.a ]; then echo "ds4chk_$stem"; else echo "ds4_$stem"; fi ;;
    esac
}

# lib_ok LIBRARY SYMBOL: the library's own prefixes.
lib_ok() {
    case "$1:$2" in
        libds4ref.a:ds4_* | libds4ref.a:ds4ref_*) return 0 ;;
        libds4check.a:ds4chk_* | libds4check.a:ds4check_*) return 0 ;;
        *) return 1 ;;
    esac
}

check_list() {
    local lib obj sym want n=0 bad=0
    while read -r lib obj sym; do
        n=$((n + 1))
        want=$(file_prefix "$lib" "$obj")
        if ! lib_ok "$lib" "$sym"; then
            echo "symbols: $lib: $obj defines $sym, outside the library's prefixes"
            bad=1
        elif [ "${sym#"$want"}" = "$sym" ]; then
            echo "symbols: $lib: $obj defines $sym, which does not start with $want"
            bad=1
        fi
    done
    echo "symbols: $n global symbols checked"
    return $bad
}

if [ "${1:-}" = --list ]; then
    check_list < "$2" && echo "symbols: OK"
    exit
fi

for lib in libds4ref.a libds4check.a; do
    [ -f "$build/$lib" ] || { echo "symbols: no $build/$lib (build first)"; exit 1; }
done
listing=$(for lib in libds4ref.a libds4check.a; do
    # The archive's member names lose their folders; the objects under
    # $build/ name them, and the archive says which belong to it.
    for m in $(ar t "$build/$lib"); do
        o=$(cd "$build" && ls base/"$m" quant/"$m" ref/*/"$m" check/*/"$m" 2>/dev/null)
        [ "$(wc -w <<< "$o")" = 1 ] || { echo "symbols: $m: $(wc -w <<< "$o") objects of that name" >&2; o=; }
        nm -g --defined-only "$build/$o" | awk -v l="$lib" -v o="$o" 'NF == 3 { print l, o, $3 }'
    done
done)
if check_list <<< "$listing"; then
    echo "symbols: OK: every global symbol carries its library's and its file's prefix"
else
    echo "symbols: FAILED (docs/ARCHITECTURE.md, Names)"
    exit 1
fi
