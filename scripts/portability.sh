#!/usr/bin/env bash
# Portable goldens (docs/PORTABILITY.md): rebuild ds4ref with several
# compilers, optimization levels and target CPUs, each into its own build and
# binary directory, and require every committed golden of vectors/ to come out
# bit for bit.  Each build is checked three ways:
#
#   symbols  its binaries import no libm function whose last bit could depend
#            on the C library (only the IEEE-exact ones listed below remain);
#   ds4_test its ds4_test --golden-vectors regenerates the goldens in memory
#            (chunk 13, every thread) and compares them value by value, once
#            with each kernel variant the build runs here (DS4REF_KERNELS);
#   regen    scripts/make_vectors.sh with its ds4ref-mkmodel and ds4ref, one
#            thread, rewrites the goldens into a directory of its own, and
#            each file must equal the committed one byte for byte (the golden
#            format is canonical, so bytes equal = bits equal).
#
# Usage: scripts/portability.sh [full|short|list|fetch-arm64-libomp] [BUILD...]
#   full   the whole matrix this machine can build (make portability)
#   short  the CI subset (make portability-short, run by tests/run_tests.sh)
#   list   print the matrix of the mode given next (default full)
#   BUILD  names from `list` restrict the run to those builds
#
# aarch64 builds are cross-compiled and run under qemu-user when the
# toolchain is installed (see docs/PORTABILITY.md); otherwise they are
# reported as skipped, never as passed.  Environment: DS4REF_PORT_DIR (where
# the builds go; default build/portability), DS4REF_AARCH64_LIBOMP (an arm64
# libomp.so.5 for the clang aarch64 builds; fetch-arm64-libomp extracts one).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

mode=${1:-short}
[ $# -gt 0 ] && shift
port=${DS4REF_PORT_DIR:-build/portability}
case "$port" in /*) ;; *) port="$root/$port" ;; esac
jobs=$(nproc 2>/dev/null || echo 2)
sysroot=/usr/aarch64-linux-gnu
# A make above us (make portability, make test) must not hand its jobserver
# down: these are independent builds with their own -j.
unset MAKEFLAGS MFLAGS MAKELEVEL

# ---- the matrix ----
#
# One build per line: name, compiler, -O level, target flags.  "native" is
# -march=native of this machine; on x86-64 "haswell" pins the AVX2+FMA+F16C
# kernels even where native picks AVX-512.  The aarch64 builds name a CPU with
# SVE (neoverse-v1) as their "native"; qemu's default CPU implements it.
host_archs=(generic native haswell)
matrix_full() {
    local cc opt arch
    for cc in gcc clang; do
        for opt in -O0 -O2 -O3; do
            for arch in "${host_archs[@]}"; do echo "$cc$opt-$arch $cc $opt $arch"; done
        done
    done
    for opt in -O0 -O2 -O3; do echo "aarch64-gcc$opt-generic aarch64-gcc $opt generic"; done
    for opt in -O2 -O3; do echo "aarch64-gcc$opt-neoverse-v1 aarch64-gcc $opt neoverse-v1"; done
    echo "aarch64-clang-O2-generic aarch64-clang -O2 generic"
    echo "aarch64-clang-O3-neoverse-v1 aarch64-clang -O3 neoverse-v1"
}
# CI: the most aggressive optimizer with the widest vectors, the least
# optimized build, and the other architecture.  To stay in CI's budget, under
# qemu one golden (the ds4 quant mix with QAT: every kernel and rounding) is
# regenerated and checked, and the -O0 build regenerates every golden byte
# for byte but runs ds4_test (every thread: about three minutes at -O0) on
# that one only; make portability runs them all.
matrix_short() {
    echo "gcc-O0-generic gcc -O0 generic"
    echo "aarch64-gcc-O2-generic aarch64-gcc -O2 generic"
}
qemu_subset_short="tiny-ds4-qaton-code"

# ---- libm symbols ----
#
# Functions of libm that a build may import, and why each cannot change a bit
# between C libraries: IEEE 754 defines their results exactly.
declare -A libm_ok=(
    [sqrt]="IEEE 754 square root, correctly rounded (compilers inline the instruction and call libm only to set errno for negative input)"
    [sqrtf]="IEEE 754 square root, correctly rounded"
    [floor]="exact: the result is an integer of the same format"
    [floorf]="exact: the result is an integer of the same format"
    [ceil]="exact: the result is an integer of the same format"
    [ceilf]="exact: the result is an integer of the same format"
    [trunc]="exact: the result is an integer of the same format"
    [truncf]="exact: the result is an integer of the same format"
    [round]="exact: the result is an integer of the same format"
    [roundf]="exact: the result is an integer of the same format"
    [rint]="exact: integer result, ties to even in the default rounding mode"
    [rintf]="exact: integer result, ties to even in the default rounding mode"
    [nearbyint]="exact: integer result, ties to even in the default rounding mode"
    [lrint]="exact: integer result, ties to even in the default rounding mode"
    [lrintf]="exact: integer result, ties to even in the default rounding mode"
    [fabs]="exact: clears the sign bit"
    [fabsf]="exact: clears the sign bit"
    [copysign]="exact: copies the sign bit"
    [copysignf]="exact: copies the sign bit"
    [fmin]="exact: returns one of its operands"
    [fmax]="exact: returns one of its operands"
    [fminf]="exact: returns one of its operands"
    [fmaxf]="exact: returns one of its operands"
    [frexp]="exact: splits exponent and significand"
    [ldexp]="IEEE scaleB: exact, or correctly rounded where the result is subnormal"
    [scalbn]="IEEE scaleB: exact, or correctly rounded where the result is subnormal"
    [fmod]="exact: the IEEE remainder of a division by truncation has no rounding"
)

# The libm functions the build's three golden-path binaries import.
libm_imports() { # nm libm bindir
    local nm=$1 libm=$2 bin=$3
    comm -12 <("$nm" -D --defined-only "$libm" | awk '{print $3}' | sed 's/@.*//' | sort -u) \
             <(for b in ds4ref ds4_test ds4ref-mkmodel; do "$nm" -D --undefined-only "$bin/$b"; done |
               awk '{print $2}' | sed 's/@.*//' | sort -u)
}

# Writes a line per imported libm function (with the objects that call it)
# to the build's symbols.txt; fails on any function not in libm_ok, and on a
# link against glibc's vector math library.
check_symbols() { # nm cc dir
    local nm=$1 cc=$2 dir=$3 libm sym bad=0 users
    libm=$($cc -print-file-name=libm.so.6)
    if [ ! -f "$libm" ]; then
        echo "cannot find libm.so.6 of $cc" > "$dir/symbols.txt"
        return 1
    fi
    : > "$dir/symbols.txt"
    for sym in $(libm_imports "$nm" "$libm" "$dir/bin"); do
        users=$(cd "$dir/obj" && find . -name '*.o' -exec "$nm" -A -u {} + 2>/dev/null |
                awk -v s="$sym" '$NF == s {sub(/^\.\//, "", $1); sub(/:.*/, "", $1); print $1}' |
                sort -u | tr '\n' ' ')
        if [ -n "${libm_ok[$sym]:-}" ]; then
            echo "ok  $sym (${users% }): ${libm_ok[$sym]}" >> "$dir/symbols.txt"
        else
            echo "BAD $sym (${users% }): a libm function whose rounding is the C library's" >> "$dir/symbols.txt"
            bad=1
        fi
    done
    for b in ds4ref ds4_test ds4ref-mkmodel; do
        if "$nm" -D --undefined-only "$dir/bin/$b" | grep -q ' _ZGV'; then
            echo "BAD $b imports glibc's vector math library (libmvec)" >> "$dir/symbols.txt"
            bad=1
        fi
    done
    return $bad
}

# ---- running goldens ----

# A directory that looks like the repository to ds4_test but whose manifest
# lists only the goldens named; their files are the committed ones.
subset_root() { # dir names...
    local d=$1 n
    shift
    rm -rf "$d"
    mkdir -p "$d/vectors"
    ln -s "$root/vectors/prompts" "$d/vectors/prompts"
    grep '^#' "$root/vectors/manifest.txt" > "$d/vectors/manifest.txt"
    for n in "$@"; do
        grep "^$n " "$root/vectors/manifest.txt" >> "$d/vectors/manifest.txt" || return 1
        ln -s "$root/vectors/$n.jsonl" "$d/vectors/$n.jsonl"
    done
}

# The kernel variants a build runs on this machine (ds4ref --version).
kernels_of() { # dir run...
    local dir=$1
    shift
    "$@" "$dir/bin/ds4ref" --version | sed -n 's/.*this machine runs: \(.*\))$/\1/p'
}

# ds4_test --golden-vectors once with each kernel variant forced.
check_ds4_test() { # dir threads workdir run...
    local dir=$1 threads=$2 wd=$3 k rc=0
    shift 3
    : > "$dir/ds4_test.log"
    for k in $(kernels_of "$dir" "$@"); do
        echo "--- DS4REF_KERNELS=$k" >> "$dir/ds4_test.log"
        (cd "$wd" && DS4REF_KERNELS=$k OMP_NUM_THREADS=$threads "$@" "$dir/bin/ds4_test" \
            --golden-vectors) >> "$dir/ds4_test.log" 2>&1 || rc=1
    done
    [ -n "$k" ] || { echo "no kernel variants reported" >> "$dir/ds4_test.log"; rc=1; }
    return $rc
}

# scripts/make_vectors.sh with this build's binaries, into dir/regen, and
# every file it wrote compared with vectors/ byte for byte; so is each line
# of its manifest (the model's and the golden's sha256).  names: all if empty.
check_regen() ( # dir names run...
    local dir=$1 names=$2 out=$1/regen fail=0 name line
    shift 2
    rm -rf "$out"
    export OMP_NUM_THREADS=1 DS4REF_RUN="$*"
    exec 3> "$dir/regen.log"
    if ! scripts/make_vectors.sh --bin "$dir/bin" --out "$out" ${names:+--only "$names"} >&3 2>&1; then
        echo "FAIL scripts/make_vectors.sh exited non-zero" >&3
        fail=1
    fi
    while read -r name _; do
        case "$name" in ''|'#'*) continue ;; esac
        line=$(grep "^$name " "$out/manifest.txt")
        if [ "$line" != "$(grep "^$name " vectors/manifest.txt)" ]; then
            echo "FAIL $name: its manifest line (model or golden sha256) differs" >&3
            fail=1
        elif cmp "$out/$name.jsonl" "vectors/$name.jsonl" >&3 2>&1; then
            echo "ok   $name" >&3
        else
            echo "FAIL $name: differs from vectors/$name.jsonl" >&3
            fail=1
        fi
    done < "$out/manifest.txt"
    if [ -z "$names" ]; then
        if cmp "$out/tiny.vec" vectors/tiny.vec >&3 2>&1; then echo "ok   tiny.vec" >&3
        else echo "FAIL tiny.vec: differs from vectors/tiny.vec" >&3; fail=1; fi
    fi
    exec 3>&-
    return $fail
)

# ---- toolchains ----

qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)

# Why the aarch64 builds cannot run here, or nothing.
aarch64_missing() { # compiler
    local miss=()
    [ -n "$qemu" ] || miss+=("qemu-aarch64 (apt-get install qemu-user)")
    command -v aarch64-linux-gnu-gcc > /dev/null || miss+=("aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
    [ -e /usr/lib/aarch64-linux-gnu/libpcre2-8.so ] || [ -e $sysroot/lib/libpcre2-8.so ] ||
        miss+=("arm64 libpcre2-8 (dpkg --add-architecture arm64; apt-get install libpcre2-dev:arm64)")
    [ -e /usr/include/aarch64-linux-gnu/curl/curl.h ] ||
        miss+=("arm64 libcurl (apt-get install libcurl4-openssl-dev:arm64)")
    if [ "$1" = aarch64-clang ]; then
        command -v clang > /dev/null || miss+=("clang")
        [ -n "$(arm64_libomp)" ] || miss+=("an arm64 libomp.so.5 (scripts/portability.sh fetch-arm64-libomp)")
    fi
    [ ${#miss[@]} -eq 0 ] || { local IFS=,; echo "${miss[*]}"; }
}

# Debian 12's libomp5-14:arm64 cannot be installed beside the amd64 one (both
# ship /usr/lib/llvm-14/lib/libomp.so.5), so clang's aarch64 builds link
# against a copy extracted from the package.
arm64_libomp() {
    local f
    for f in "${DS4REF_AARCH64_LIBOMP:-}" "$port/arm64-libomp/usr/lib/aarch64-linux-gnu/libomp.so.5" \
             /usr/lib/aarch64-linux-gnu/libomp.so.5; do
        [ -n "$f" ] && [ -f "$f" ] && { echo "$f"; return; }
    done
}

fetch_arm64_libomp() {
    local d="$port/arm64-libomp"
    mkdir -p "$d" && (cd "$d" && apt-get download libomp5-14:arm64 && dpkg-deb -x libomp5-14_*_arm64.deb .) &&
        echo "$d/usr/lib/aarch64-linux-gnu/libomp.so.5"
}

# Sets cc, nm, cflags, ldflags and run (the command prefix that runs a
# binary) for one build; returns 1 with a reason when it cannot be built here.
toolchain() { # compiler opt arch dir
    local compiler=$1 opt=$2 arch=$3 dir=$4
    cflags="" ldflags="" run=() omp_lib=""
    nm="nm"
    case "$compiler" in
        gcc|clang)
            command -v "$compiler" > /dev/null || { why="$compiler not installed"; return 1; }
            cc=$compiler
            case "$arch" in
                generic) ;;
                *) cflags="-march=$arch" ;;
            esac ;;
        aarch64-gcc|aarch64-clang)
            why=$(aarch64_missing "$compiler")
            [ -z "$why" ] || { why="needs $why"; return 1; }
            if [ "$compiler" = aarch64-gcc ]; then
                cc=aarch64-linux-gnu-gcc
            else
                cc="clang --target=aarch64-linux-gnu"
                omp_lib=$(arm64_libomp)   # linked as $dir/omp/libomp.so by entry()
                ldflags="-L$dir/omp -Wl,-rpath,$(dirname "$omp_lib")"
            fi
            nm=aarch64-linux-gnu-nm
            [ "$arch" = generic ] || cflags="-mcpu=$arch"
            run=("$qemu" -L "$sysroot") ;;
        *) why="unknown compiler $compiler"; return 1 ;;
    esac
}

now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

# ---- one build ----

results=()
n_pass=0 n_fail=0 n_skip=0

entry() { # name compiler opt arch
    local name=$1 compiler=$2 opt=$3 arch=$4 dir="$port/$1" why t0 tb td tr status=pass detail=""
    local cc nm cflags ldflags run omp_lib
    if ! toolchain "$compiler" "$opt" "$arch" "$dir"; then
        echo "=== $name: SKIPPED ($why)"
        results+=("| $name | skipped | | | | | $why |")
        n_skip=$((n_skip + 1))
        return
    fi
    # A build directory is reused only for the same compiler and flags.
    local stamp
    stamp="$cc|$opt|$cflags|$ldflags|$($cc --version 2>/dev/null | head -1)"
    if [ "$(cat "$dir/stamp" 2>/dev/null)" != "$stamp" ]; then rm -rf "$dir"; fi
    mkdir -p "$dir/bin"
    echo "$stamp" > "$dir/stamp"
    if [ -n "$omp_lib" ]; then
        mkdir -p "$dir/omp"
        ln -sf "$omp_lib" "$dir/omp/libomp.so"
    fi

    echo "=== $name: $cc $opt $cflags"
    t0=$(now)
    if ! make -j"$jobs" CC="$cc" OPT="$opt" ARCH="$cflags" EXTRA_LDFLAGS="$ldflags" \
            BUILD="$dir/obj" BINDIR="$dir/bin" \
            "$dir/bin/ds4ref" "$dir/bin/ds4_test" "$dir/bin/ds4ref-mkmodel" > "$dir/build.log" 2>&1; then
        tail -20 "$dir/build.log"
        results+=("| $name | **build failed** | | | | | see $dir/build.log |")
        n_fail=$((n_fail + 1))
        return
    fi
    tb=$(since "$t0")

    local sym=pass
    check_symbols "$nm" "$cc" "$dir" || { sym=FAIL; status=FAIL; }
    sed 's/^/    /' "$dir/symbols.txt"
    local imports
    imports=$(awk '{print $2}' "$dir/symbols.txt" | tr '\n' ' ')

    # Native builds: ds4_test with every thread, then the byte check with one.
    # Under qemu both run with one thread (guest threads are impractically
    # slow there, and thread invariance is checked natively), side by side.
    local dt=pass rg=pass wd=$root names=""
    if [ ${#run[@]} -eq 0 ]; then
        if [ "$mode" = short ] && [ "$opt" = -O0 ]; then
            # shellcheck disable=SC2086
            subset_root "$dir/subset" $qemu_subset_short
            wd=$dir/subset
            detail="ds4_test on: ${qemu_subset_short// /, }"
        fi
        t0=$(now)
        check_ds4_test "$dir" "$jobs" "$wd" || dt=FAIL
        td=$(since "$t0")
        t0=$(now)
        check_regen "$dir" "" || rg=FAIL
        tr=$(since "$t0")
    else
        if [ "$mode" = short ]; then
            names=$qemu_subset_short
            # shellcheck disable=SC2086
            subset_root "$dir/subset" $names
            wd=$dir/subset
            detail="qemu, 1 thread, goldens: ${names// /, }"
        else
            detail="qemu, 1 thread"
        fi
        t0=$(now)
        (check_ds4_test "$dir" 1 "$wd" "${run[@]}"; rc=$?; since "$t0" > "$dir/ds4_test.secs"; exit $rc) &
        local pid_dt=$!
        check_regen "$dir" "$names" "${run[@]}" || rg=FAIL
        tr=$(since "$t0")
        wait $pid_dt || dt=FAIL
        td=$(cat "$dir/ds4_test.secs")
    fi
    tail -3 "$dir/ds4_test.log" | sed 's/^/    /'
    grep '^FAIL' "$dir/regen.log" | sed 's/^/    /'
    echo "    regen: $(grep -c '^ok' "$dir/regen.log") files byte-identical"
    [ "$dt" = pass ] || { status=FAIL; cat "$dir/ds4_test.log"; }
    [ "$rg" = pass ] || status=FAIL
    echo "=== $name: $status (build ${tb}s, ds4_test ${td}s, regen ${tr}s)"
    results+=("| $name | $status | $sym ($imports) | $dt | $rg | ${tb}/${td}/${tr} | $detail |")
    if [ "$status" = pass ]; then n_pass=$((n_pass + 1)); else n_fail=$((n_fail + 1)); fi
}

case "$mode" in
    full|short) ;;
    list) "matrix_${1:-full}"; exit ;;
    fetch-arm64-libomp) fetch_arm64_libomp; exit ;;
    *) sed -n '2,/^set /p' "$0" | sed 's/^# \{0,1\}//; /^set /d'; exit 2 ;;
esac

mkdir -p "$port"
start=$(now)
while read -r name compiler opt arch; do
    [ $# -eq 0 ] || [[ " $* " == *" $name "* ]] || continue
    entry "$name" "$compiler" "$opt" "$arch"
done < <("matrix_$mode")

{
    echo "| build | result | libm imports | ds4_test | regen | seconds build/ds4_test/regen | notes |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${results[@]}"
} > "$port/results-$mode.md"
echo
cat "$port/results-$mode.md"
echo
echo "portability ($mode, $(since "$start")s): $n_pass builds reproduced every golden, $n_fail failed, $n_skip skipped"
[ $n_fail -eq 0 ]
