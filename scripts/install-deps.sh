#!/bin/sh
# The Debian 12 packages ds4ref builds and tests with, installed when
# missing: the one list that README.md's Quick start and .ci/run both use,
# so the two cannot drift.  As root it runs apt-get itself, otherwise
# through sudo; apt-get update runs first, only when something is missing.
#
#   scripts/install-deps.sh             what make and make test need
#   scripts/install-deps.sh --aarch64   also, best effort, the aarch64 cross
#                                       toolchain and qemu for the aarch64
#                                       builds of make portability-short
#                                       (skipped, and said so, without them)
set -eu

PACKAGES="build-essential clang libclang-rt-14-dev pkg-config libcmocka-dev libpcre2-dev
libomp-dev libopenblas-dev valgrind xz-utils python3-numpy python3-pytest python3-pip
python3-venv python3-wheel libmicrohttpd-dev libjansson-dev
libcurl4-openssl-dev"
AARCH64="gcc-aarch64-linux-gnu qemu-user libpcre2-dev:arm64 libcurl4-openssl-dev:arm64"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else echo "install-deps: not root and no sudo: run it as root" >&2; exit 1
    fi
}

missing() {
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

apt_install() {
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# shellcheck disable=SC2086
need=$(missing $PACKAGES)
if [ -n "$need" ]; then
    echo "install-deps: installing" $need
    # shellcheck disable=SC2086
    apt_install $need
fi

if [ "${1:-}" = --aarch64 ]; then
    # shellcheck disable=SC2086
    need=$(missing $AARCH64)
    if [ -n "$need" ] || ! command -v qemu-aarch64 >/dev/null; then
        { as_root dpkg --add-architecture arm64 && apt_install $AARCH64; } ||
            echo "install-deps: warning: no aarch64 toolchain; make portability-short will skip aarch64" >&2
    fi
fi
exit 0
