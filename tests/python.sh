#!/usr/bin/env bash
# The Python package's tests (python/tests, pytest) against this build's
# library and tools, with the first interpreter that has NumPy and pytest:
# $DS4REF_PYTHON, Debian's /usr/bin/python3 (python3-numpy, python3-pytest),
# then python3 on PATH.
#
#   tests/python.sh BUILD_DIR   run them (make python-test); without such an
#                               interpreter print a SKIP line and succeed
#   tests/python.sh --find      print the interpreter, or (status 1) why none
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

find_python() {
    local tried=()
    for py in ${DS4REF_PYTHON:-} /usr/bin/python3 python3; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c "import numpy, pytest" 2>/dev/null; then
            command -v "$py"
            return 0
        fi
        tried+=("$py")
    done
    echo "no Python interpreter with NumPy and pytest (tried ${tried[*]}; on Debian:" \
         "apt-get install python3-numpy python3-pytest)"
    return 1
}

if [ "${1:-}" = --find ]; then
    find_python
    exit
fi
build=${1:-build}
if ! py=$(find_python); then
    echo "SKIP python tests: $py"
    exit 0
fi
# The library of this build whatever BUILD is; no .pyc or pytest cache left
# in the source tree.
DS4REF_LIB=$(realpath "$build/libds4ref.so") DS4CHECK_LIB=$(realpath "$build/libds4check.so") \
    PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
    exec "$py" -m pytest -q -rs -p no:cacheprovider python/tests
