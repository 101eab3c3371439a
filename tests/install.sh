#!/usr/bin/env bash
# The README's library recipe (section "Using ds4ref as a library"), run as
# written, with HOME in a scratch folder and no LD_LIBRARY_PATH: make install
# into $HOME/.local, build examples/compare_head.c through pkg-config, run it
# on the default model.  Then what the installed tree must hold: the ds4ref
# programs and not ds4_test, and a shared library that exports the public
# API and nothing else.
set -euo pipefail
home=$(mktemp -d)
trap 'rm -rf "$home" compare_head' EXIT
# The first sh block of that section, taken from the README itself so the
# two cannot drift apart.
recipe=$(awk '/^## / { on = /^## Using ds4ref as a library/ } on && /^```sh$/ { body = 1; next }
              body && /^```$/ { exit } body' README.md)
[ -n "$recipe" ] || { echo "install: no recipe in README.md's library section"; exit 1; }
# In a sanitizer build (make asan / ubsan / sanitize) the program needs the
# sanitizer's runtime, as the library does: cc is the sanitizing compiler.
case "${DS4REF_SANITIZER:-}" in
    asan) cc() { clang -fsanitize=address "$@"; } && export -f cc ;;
    ubsan) cc() { clang -fsanitize=undefined "$@"; } && export -f cc ;;
    sanitize) cc() { clang -fsanitize=address,undefined "$@"; } && export -f cc ;;
esac
# A shell of its own, where -e stops at the first failing line.
if ! env -u LD_LIBRARY_PATH HOME="$home" bash -e -c "$recipe" > "$home/log" 2>&1; then
    cat "$home/log"
    echo "install: the README's recipe failed"
    exit 1
fi
grep "max |dlogit|" "$home/log"
prefix=$home/.local
# Each shared library exports its public API and nothing else, and the
# checking library installs with its header and pkg-config file.
for l in ds4ref ds4check; do
    if nm -D --defined-only "$prefix/lib/lib$l.so.1" | awk -v p="^${l}_" '$2 == "T" && $3 !~ p' | grep -q .; then
        echo "lib$l.so exports symbols outside the public API"; exit 1
    fi
    test -f "$prefix/include/$l.h"
    env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exists "$l" ||
        { echo "install: pkg-config does not find $l"; exit 1; }
done
test -x "$prefix/bin/ds4ref"
test -x "$prefix/bin/ds4ref-conform"
# The installed programs find the synthetic models make install put beside
# them, from any folder.
(cd "$home" && "$prefix/bin/ds4ref" -p hi -n 2 > /dev/null 2> "$home/err") ||
    { cat "$home/err"; echo "install: the installed ds4ref runs without -m"; exit 1; }
grep -q "share/ds4ref/models/tiny.gguf" "$home/err" ||
    { cat "$home/err"; echo "install: the installed ds4ref did not use the installed model"; exit 1; }
if ls "$prefix/bin" | grep -v '^ds4ref' | grep -q .; then
    echo "install: bin/ holds programs without the ds4ref name: $(ls "$prefix/bin" | tr '\n' ' ')"
    exit 1
fi
echo "install: ok"
