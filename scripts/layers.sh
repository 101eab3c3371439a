#!/usr/bin/env bash
# Checks the library's layering (docs/ARCHITECTURE.md): every dependency
# goes downward, and nothing depends on itself in a circle.
#
#   scripts/layers.sh [BUILD_DIR]     (default build; run by make test)
#   scripts/layers.sh --edges FILE    check one "from to" edge list (the
#                                   test that the check can fail uses it)
#   scripts/layers.sh --programs DIR  check the includes of DIR's programs
#   scripts/layers.sh --calls FILE    check one "object symbol" list of the
#                                   model library's outside calls (likewise)
#
# The layers, lowest first, and the top-level folders that hold them:
#   base/        0 base/
#   quant/       1 quant/
#   ref/         2 text/  3 ckpt/  4 model/  5 format/  6 forward/  7 decode/
#                8 run/  9 api/ (and include/ds4ref.h)          -- libds4ref
#   check/       10 diff/  11 conform/  12 api/ (and include/ds4check.h)
#                                                              -- libds4check
# Programs (programs/*.c, *.h) may include the public headers and their own
# helpers beside them only; bench/bench.c is the one exception, because it
# measures what the API hides.
#
# Two graphs are checked, because either can go wrong without the other:
#   - includes: each library source or header and the project headers it
#     includes ("folder/name.h");
#   - objects: each library object and the objects that define the symbols
#     it leaves undefined (nm), i.e. who calls whom at link time.
# An edge from a lower layer to a higher one is an error, and so is a cycle
# (tsort finds them), within a layer as well as across layers, and a file
# that includes itself.  The same holds between the top-level folders
# (base/ < quant/ < ref/ < check/): each edge is checked as a folder edge
# too, so the folders' order is stated here once and cannot drift from the
# layers'.  Prints the
# two graphs' sizes and exits 0 when both are clean, 1 otherwise.
#
# And libds4ref (layers 0-9) is the model: it starts no process, opens no
# socket and makes no temporary folder (those are the checking layer's), so
# none of its objects may call the C library's functions that do.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

rank() {
    case "$1" in
        base/*) echo 0 ;;
        quant/*) echo 1 ;;
        ref/text/*) echo 2 ;;
        ref/ckpt/*) echo 3 ;;
        ref/model/*) echo 4 ;;
        ref/format/*) echo 5 ;;
        ref/forward/*) echo 6 ;;
        ref/decode/*) echo 7 ;;
        ref/run/*) echo 8 ;;
        ref/api/* | include/ds4ref.h) echo 9 ;;
        check/diff/*) echo 10 ;;
        check/conform/*) echo 11 ;;
        check/api/* | include/ds4check.h) echo 12 ;;
        *) echo -1 ;;
    esac
}

# folder FILE: its top-level folder and that folder's place, lowest first
# (a public header belongs to its library's folder).
folder() {
    case "$1" in
        base/*) echo "base/ 0" ;;
        quant/*) echo "quant/ 1" ;;
        ref/* | include/ds4ref.h) echo "ref/ 2" ;;
        check/* | include/ds4check.h) echo "check/ 3" ;;
        *) echo "? -1" ;;
    esac
}

fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_calls FILE: "object symbol" lines; a call that starts a process,
# opens a socket or makes a temporary folder is an error.
forbidden_calls=" fork vfork execv execve execvp execvpe execl execlp execle posix_spawn posix_spawnp popen system socket connect bind listen accept mkdtemp "
check_calls() {
    local obj sym
    while read -r obj sym; do
        case "$forbidden_calls" in
            *" $sym "*)
                echo "layers: $obj calls $sym: libds4ref starts no process, opens no socket and makes no temporary folder"
                fail=1 ;;
        esac
    done < "$1"
}

# check_graph NAME EDGES: upward edges and cycles of a "from to" edge list,
# between files and between their top-level folders.
check_graph() {
    local name=$1 edges=$2 from to rf rt ff ft fr_ ft_
    : > "$tmp/folders"
    while read -r from to; do
        rf=$(rank "$from")
        rt=$(rank "$to")
        read -r ff fr_ <<< "$(folder "$from")"
        read -r ft ft_ <<< "$(folder "$to")"
        [ "$ff" = "$ft" ] || echo "$ff $ft" >> "$tmp/folders"
        if [ "$ft_" -gt "$fr_" ]; then
            echo "layers: $name: upward folder edge $ff -> $ft ($from -> $to)"
            fail=1
        fi
        if [ "$from" = "$to" ]; then
            # A cycle of length one, which tsort takes for a lone node.
            # (a.c including a.h is no such edge: those are two files.)
            echo "layers: $name: $from depends on itself"
            fail=1
        elif [ "$rf" -lt 0 ] || [ "$rt" -lt 0 ]; then
            echo "layers: $name: $from -> $to: outside the known layers"
            fail=1
        elif [ "$rt" -gt "$rf" ]; then
            echo "layers: $name: upward edge $from -> $to"
            fail=1
        fi
    done < "$edges"
    # Longer cycles, of files and of folders.
    if ! tsort "$edges" > /dev/null 2> "$tmp/tsort.err"; then
        echo "layers: $name: cycle:"
        sed 's/^tsort: /  /' "$tmp/tsort.err"
        fail=1
    fi
    if ! sort -u "$tmp/folders" | tsort > /dev/null 2> "$tmp/tsort.err"; then
        echo "layers: $name: cycle of folders:"
        sed 's/^tsort: /  /' "$tmp/tsort.err"
        fail=1
    fi
    echo "layers: $name graph: $(cut -d' ' -f1 "$edges" | sort -u | wc -l) nodes with edges," \
         "$(wc -l < "$edges") edges"
}

# check_programs DIR: DIR's programs include the public headers and their
# own helpers beside them only.
check_programs() {
    local f inc
    for f in "$1"/*.[ch]; do
        while read -r inc; do
            case "$inc" in
                ds4ref.h | ds4check.h) ;;
                */*) echo "layers: $f includes \"$inc\": programs use the public headers only"
                     fail=1 ;;
                *) [ -f "$1/$inc" ] || { echo "layers: $f includes \"$inc\", which is not beside it"
                                         fail=1; } ;;
            esac
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
    echo "layers: programs: $(ls "$1"/*.c | wc -l) programs checked"
}

if [ "${1:-}" = --programs ]; then
    check_programs "$2"
    exit $fail
fi

if [ "${1:-}" = --calls ]; then
    check_calls "$2"
    exit $fail
fi

if [ "${1:-}" = --edges ]; then
    check_graph edges "$2"
    [ $fail -eq 0 ] && echo "layers: OK"
    exit $fail
fi

# ---- includes
sources=$(ls base/*.[ch] quant/*.[ch] ref/*/*.[ch] check/*/*.[ch])
: > "$tmp/inc"
for f in $sources; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
    while read -r inc; do
        case "$inc" in
            ds4ref.h | ds4check.h) to=include/$inc ;;
            */*) to=$inc ;;
            *) echo "layers: $f includes \"$inc\": name its folder" >&2; to=unknown/$inc ;;
        esac
        if [ ! -f "$to" ]; then
            echo "layers: $f includes \"$inc\", which is not a library header" >&2
        fi
        echo "$f $to"
    done >> "$tmp/inc"
done
check_graph includes "$tmp/inc"

# ---- objects
objs=$(cd "$build" 2>/dev/null && ls base/*.o quant/*.o ref/*/*.o check/*/*.o 2>/dev/null)
if [ -z "$objs" ]; then
    echo "layers: no library objects under $build (build first)"
    exit 1
fi
: > "$tmp/defs"
for o in $objs; do
    nm -g --defined-only "$build/$o" | awk -v o="${o%.o}.c" 'NF == 3 { print $3, o }' >> "$tmp/defs"
done
sort -k1,1 "$tmp/defs" > "$tmp/defs.sorted"
: > "$tmp/calls"
for o in $objs; do
    nm -u "$build/$o" | awk '{ print $NF }' | sort -u |
        join - "$tmp/defs.sorted" | awk -v o="${o%.o}.c" '{ print o, $2 }' >> "$tmp/calls"
done
sort -u "$tmp/calls" -o "$tmp/calls"
check_graph objects "$tmp/calls"

# ---- the model library calls no process, socket or temporary-folder function
nm_calls() {
    for o in $objs; do
        [ "$(rank "${o%.o}.c")" -le 9 ] || continue
        nm -u "$build/$o" | awk -v o="${o%.o}.c" '{ print o, $NF }'
    done
}
nm_calls > "$tmp/libcalls"
check_calls "$tmp/libcalls"

# ---- programs: the public headers and their own helpers only
check_programs programs

if [ $fail -ne 0 ]; then
    echo "layers: FAILED (docs/ARCHITECTURE.md says what may depend on what)"
    exit 1
fi
echo "layers: OK: every include and every call goes downward, no cycles"
