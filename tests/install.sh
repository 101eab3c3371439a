#!/usr/bin/env bash
# make install into a scratch prefix, then build the example program from the
# installed header and library through pkg-config, as a user of libds4ref
# would, and run it on the default model.
set -euo pipefail
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
make --no-print-directory -s install PREFIX="$prefix" > /dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# In a sanitizer build (make asan / make ubsan) the library needs its runtime.
cc=(cc)
case "${DS4REF_SANITIZER:-}" in
    asan) cc=(clang -fsanitize=address) ;;
    ubsan) cc=(clang -fsanitize=undefined) ;;
esac
# shellcheck disable=SC2046
"${cc[@]}" -std=c11 -O2 -Wall -Wextra examples/compare_head.c $(pkg-config --cflags --libs ds4ref) \
    -lm -o "$prefix/compare_head"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/compare_head" models/tiny.gguf "What is the capital of Italy?"
# The shared library exports the public API and nothing else.
if nm -D --defined-only "$prefix/lib/libds4ref.so.1" | awk '$2 == "T" && $3 !~ /^ds4ref_/' | grep -q .; then
    echo "libds4ref.so exports symbols outside the public API"; exit 1
fi
test -x "$prefix/bin/ds4ref"
echo "install: ok"
