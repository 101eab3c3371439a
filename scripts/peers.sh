#!/usr/bin/env bash
# make peers: ds4ref-conform against real software nobody here wrote.
#
# llama.cpp's CPU backend, the prebuilt libraries of the npm package
# @node-llama-cpp/linux-x64@3.22.1 (installed into $DS4REF_PEERS, default
# ~/.cache/ds4ref/peers, unless DS4REF_LLAMA_LIB already names them), driven
# by ds4ref-llama (docs/CONFORM.md, "Against llama.cpp"):
#   1. the documented invocation, `ds4ref-conform --backend llama.cpp` on
#      the default model: no failing cell, judged under ggml-act without
#      the FP8/FP4 simulation, which the calibration must find by itself;
#   2. the unquantized twin of models/tiny.gguf under the official
#      numerics without the simulation, at |dlogprob| and gap <= 1e-3;
#   3. llama.cpp with an injected bug confined to one cell class (rows of a
#      batch read one row late): exactly the cells with several rows fail;
#   4. llama.cpp on another seed's model, and on a copy with two experts
#      swapped: no numerics profile explains it, and the run fails;
#   5. llama.cpp on tiny.gguf: no failing cell, every tie one the reference
#      itself puts within the threshold, no tie pattern;
#   6. llama.cpp with the positions of the rows after the first of a batch
#      one late (RoPE, compressor blocks, window): only cells with several
#      rows fail.
#
# The safetensors library (huggingface/safetensors from PyPI, installed into
# $DS4REF_PEERS/pylib) writes a two-shard checkpoint in the official layout
# (FP8 and FP4 weights with their E8M0 scales, BF16, I64, F32, the index):
# ds4ref's reader must see every tensor as written and dequantize the
# weights exactly (scripts/peers_safetensors.py, with BUILD/ckpt-dump).
#
# transformers' DeepseekV4 on the unquantized twin of the tiny checkpoint
# (scripts/peer_transformers.py), against the official logits and ds4ref's,
# where a Python with torch and transformers is at hand.
#
# The openai client (PyPI, into $DS4REF_PEERS/pylib) against ds4ref-server
# (scripts/peers_server.py): completions and chat with logprobs equal to
# ds4ref's goldens, streaming, errors as the client's exceptions.
# lm-evaluation-harness 0.4.13 with its API extra and transformers (into
# $DS4REF_PEERS/lmeval, no torch) runs a loglikelihood task against it, and
# every loglikelihood it reports is ds4ref's own (scripts/peers_lmeval.py).
#
# llama.cpp's llama-server, when one is on the PATH, behind its preset.
#
# A soak of ds4ref-server (scripts/peers_soak.py): whole, streamed, leaving
# and slow clients together for three minutes, every completed answer the
# CLI's, nothing left in flight, memory flat.
#
# Slurm (Debian's slurmctld, slurmd, slurm-client and munge, installed with
# apt-get when missing and this is root): tests/slurm.sh starts a one-node
# Slurm on the loopback and runs a sharded ds4ref-conform through
# scripts/slurm-conform.sh; the merge equals the unsharded run, and a shard
# cancelled with scancel leaves a merge that names it.
#
# llama-cpp-python 0.3.36's OpenAI server (its [server] extra, which pip
# builds from source with its vendored llama.cpp, into $DS4REF_PEERS/llamacpp)
# behind ds4ref-conform --server-cmd llama-cpp-python: at 16 tokens every
# cell passes, cold and warm; at the default 32, the cells that fail are
# exactly those where it answers with more tokens than max_tokens (its
# multibyte_fix), and for nothing else (docs/CONFORM.md, "llama-cpp-python's
# server").
#
# What cannot run (no npm, no pip or network, not x86-64 Linux) is skipped
# with the reason.  Run from the repository root after make.
# Usage: scripts/peers.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/checks.sh
. tests/checks.sh
fails=0
cache=${DS4REF_PEERS:-${HOME:-/tmp}/.cache/ds4ref/peers}

# A soak of ds4ref-server: whole, streamed, leaving and slow clients for
# three minutes, every answer the CLI's (scripts/peers_soak.py).
check "ds4ref-server soak: mixed clients for 180 s, every answer the CLI's" \
    python3 scripts/peers_soak.py . models/tiny.gguf 180

# The safetensors library: skipped, not failed, without it.
py=/usr/bin/python3
command -v "$py" > /dev/null || py=python3
if ! "$py" -c 'import numpy' 2> /dev/null; then
    echo "peers: safetensors skipped: no Python with NumPy (scripts/install-deps.sh installs it)"
elif ! PYTHONPATH=$cache/pylib "$py" -c 'from safetensors import TensorSpec, serialize_file' 2> /dev/null &&
     ! { echo "peers: pip install safetensors==0.8.0 into $cache/pylib" &&
         "$py" -m pip install -q --upgrade --target "$cache/pylib" safetensors==0.8.0 > "$tmp/pip.log" 2>&1; }; then
    echo "peers: safetensors skipped: pip install failed (offline?): $(tail -1 "$tmp/pip.log")"
else
    mkdir -p "$tmp/ckpt"
    check "safetensors $(PYTHONPATH=$cache/pylib "$py" -c 'import safetensors; print(safetensors.__version__)'): ds4ref reads its checkpoint as written" \
        env PYTHONPATH="$cache/pylib" "$py" scripts/peers_safetensors.py "$build/ckpt-dump" "$tmp/ckpt"
fi

# The openai client against ds4ref-server: skipped, not failed, without it.
if ! PYTHONPATH=$cache/pylib "$py" -c 'import openai, prometheus_client' 2> /dev/null &&
     ! { echo "peers: pip install openai prometheus_client into $cache/pylib" &&
         "$py" -m pip install -q --upgrade --target "$cache/pylib" openai prometheus_client \
             > "$tmp/pip-openai.log" 2>&1; }; then
    echo "peers: openai skipped: pip install failed (offline?): $(tail -1 "$tmp/pip-openai.log")"
else
    check "the openai client $(PYTHONPATH=$cache/pylib "$py" -c 'import openai; print(openai.__version__)') against ds4ref-server" \
        env PYTHONPATH="$cache/pylib" "$py" scripts/peers_server.py . models/tiny.gguf
fi

# lm-evaluation-harness against ds4ref-server: skipped, not failed, without it.
if ! PYTHONPATH=$cache/lmeval "$py" -c 'import lm_eval, tenacity, transformers' 2> /dev/null &&
     ! { echo "peers: pip install lm-eval[api]==0.4.13 transformers into $cache/lmeval" &&
         "$py" -m pip install -q --upgrade --target "$cache/lmeval" "lm-eval[api]==0.4.13" transformers \
             > "$tmp/pip-lmeval.log" 2>&1; }; then
    echo "peers: lm-evaluation-harness skipped: pip install failed (offline?): $(tail -1 "$tmp/pip-lmeval.log")"
else
    check "lm-evaluation-harness $(PYTHONPATH=$cache/lmeval "$py" -c 'import importlib.metadata as m; print(m.version("lm_eval"))' 2>/dev/null) against ds4ref-server" \
        env PYTHONPATH="$cache/lmeval" "$py" scripts/peers_lmeval.py . models/tiny.gguf "$tmp/lmeval"
fi

# llama-cpp-python's server behind ds4ref-conform: skipped, not failed,
# when pip cannot install (build) it.
lcp="llama-cpp-python[server]==0.3.36"
if ! PYTHONPATH=$cache/llamacpp "$py" -c 'import llama_cpp.server.app' 2> /dev/null &&
     ! { echo "peers: pip install $lcp into $cache/llamacpp (it builds llama.cpp: minutes)" &&
         "$py" -m pip install -q --upgrade --target "$cache/llamacpp" "$lcp" > "$tmp/pip-lcp.log" 2>&1; }; then
    echo "peers: llama-cpp-python skipped: pip install failed (offline, or no C++ compiler?): $(tail -1 "$tmp/pip-lcp.log")"
else
    check "llama-cpp-python's server at 16 tokens, batch 1, 2, 4, cold and warm: exit status 0" status_is 0 \
        env PYTHONPATH="$cache/llamacpp" ./ds4ref-conform -q --no-cache --server-cmd llama-cpp-python \
        -n 16 --matrix "draft=0 chunk=whole batch=1,2,4 cache=cold,warm" --json "$tmp/lcp16.json"
    check "... every cell passes" bash -c 'grep -q "\"status\":\"pass\"" "$1" &&
        ! grep "^{\"draft\"" "$1" | grep -qv "^{\"draft\":[0-9]*,\"chunk\":[^{]*\"status\":\"pass\""' \
        _ "$tmp/lcp16.json"
    env PYTHONPATH="$cache/llamacpp" ./ds4ref-conform -q --no-cache --server-cmd llama-cpp-python \
        --json "$tmp/lcp.json" > "$tmp/lcp.txt" 2>&1
    check "... the documented invocation (32 tokens) finds its answers longer than max_tokens, and nothing else" \
        bash -c 'grep -q "steps written, 32 asked for" "$1" &&
                 ! grep -o "\"detail\":\"[^\"]*\"" "$1" | grep -v "\"detail\":\"\"" |
                   grep -qv "steps written, 32 asked for"' _ "$tmp/lcp.json"
fi

# llama.cpp's own server behind ds4ref-conform --server-cmd llama-server,
# when one is on the PATH (docs/CONFORM.md, "llama.cpp's server"): every
# cell passes.
if ! command -v llama-server > /dev/null; then
    echo "peers: llama-server skipped: none on the PATH (build llama.cpp with -DLLAMA_BUILD_SERVER=ON; docs/CONFORM.md)"
else
    check "llama-server ($(llama-server --version 2>&1 | grep -m1 version)) behind the preset: exit status 0" \
        status_is 0 ./ds4ref-conform -q --no-cache --server-cmd llama-server \
        --matrix "draft=0 chunk=whole batch=1,2 cache=cold,warm" --json "$tmp/ls.json"
fi

# Hugging Face transformers' DeepseekV4 (>= 5.8) in float64 on the
# unquantized twin of the tiny checkpoint whose official logits ship in
# vectors/official/ckpt: it must agree with the official model.py and with
# ds4ref (QAT off; transformers has no QAT simulation and no MTP layer).
# torch and transformers are not installed here (about a gigabyte with
# torch's CUDA libraries): skipped, with what is missing, unless the
# Python of DS4REF_TORCH_PYTHON (default python3) already has them.
tpy=${DS4REF_TORCH_PYTHON:-python3}
if ! missing=$("$tpy" -c '
import importlib.util as u
print(" ".join(m for m in ("torch", "transformers", "safetensors") if not u.find_spec(m)))' 2>&1) ||
   [ -n "$missing" ]; then
    echo "peers: transformers skipped: $tpy lacks ${missing:-a working interpreter} (set DS4REF_TORCH_PYTHON to a Python with torch >= 2.7, transformers >= 5.8 and safetensors)"
else
    ./ds4ref-mkmodel --config tiny-ckpt --format hf --types f32 -o "$tmp/twin" > /dev/null
    toks=$build/official/ckpt/tokens.txt
    check "transformers' DeepseekV4 loads the twin and runs (float64)" \
        "$tpy" scripts/peer_transformers.py --ckpt "$tmp/twin" --tokens "$toks" --out "$tmp/tf"
    check "... agrees with the official model.py (QAT off) to 1e-6, every argmax" \
        python3 scripts/logits_agree.py "$tmp/tf.logits.f64" "$build/official/ckpt/logits_prefill.qat_off.f64" 512 1e-6
    ./ds4ref -m "$tmp/twin" --tokens-file "$toks" --qat off -n 0 --logits-out "$tmp/ds4ref.f32" > /dev/null 2>&1
    check "... and with ds4ref (QAT off) to 2e-6, every argmax" \
        python3 scripts/logits_agree.py "$tmp/ds4ref.f32" "$tmp/tf.logits.f64" 512 2e-6
fi

# Slurm: skipped, not failed, when it cannot be installed or started.
if ! command -v slurmctld > /dev/null && ! [ -x /usr/sbin/slurmctld ] && [ "$(id -u)" = 0 ] &&
     command -v apt-get > /dev/null; then
    echo "peers: apt-get install slurmctld slurmd slurm-client munge"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge \
        > "$tmp/apt-slurm.log" 2>&1 || echo "peers: apt-get failed: $(tail -1 "$tmp/apt-slurm.log")"
fi
tests/slurm.sh "$build" > "$tmp/slurm.txt" 2>&1
slurm_status=$?
cat "$tmp/slurm.txt"
if [ $slurm_status -eq 77 ]; then
    echo "peers: Slurm skipped (above)"
else
    check "Slurm: a sharded ds4ref-conform merges to the unsharded run; scancel's slice is named" \
        test $slurm_status -eq 0
fi

skip_all() {
    echo "peers: skipped: $1"
    [ $fails -eq 0 ] || { echo "peers: $fails failed"; exit 1; }
    exit 0
}

lib=${DS4REF_LLAMA_LIB:-}
if [ -z "$lib" ]; then
    [ "$(uname -sm)" = "Linux x86_64" ] || skip_all "llama.cpp's npm prebuilt is for x86-64 Linux, this is $(uname -sm)"
    command -v npm > /dev/null || skip_all "no npm to install @node-llama-cpp/linux-x64 (apt install npm)"
    lib=$cache/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
    if [ ! -e "$lib/libllama.v0.5.0.so" ]; then
        echo "peers: npm install @node-llama-cpp/linux-x64@3.22.1 into $cache/npm"
        mkdir -p "$cache" &&
            npm install --silent --no-audit --no-fund --prefix "$cache/npm" \
                @node-llama-cpp/linux-x64@3.22.1 > "$tmp/npm.log" 2>&1 ||
            skip_all "npm install failed (offline?): $(tail -1 "$tmp/npm.log")"
    fi
fi
[ -e "$lib/libllama.v0.5.0.so" ] || skip_all "$lib holds no libllama.v0.5.0.so"
export DS4REF_LLAMA_LIB=$lib
echo "peers: llama.cpp from $lib"

conform() { ./ds4ref-conform -q --no-cache --jobs 2 "$@"; }

# The cells of a --json report, one "chunk batch prompt status" line each.
cells() {
    grep '^{"draft"' "$1" |
        sed -E 's/^\{"draft":[0-9]+,"chunk":"?([a-z0-9]+)"?,"chunk_tokens":[0-9]+,"batch":([0-9]+),"prompt":"([^"]*)","status":"([^"]*)".*/\1 \2 \3 \4/'
}
export -f cells

# 1. The documented invocation: the default model (tiny-spec) and matrix.
check "llama.cpp preset on the default model: exit status 0" status_is 0 \
    conform --backend llama.cpp --json "$tmp/default.json"
cp "$tmp/out.txt" "$tmp/default.txt"
check "... no failing cell" bash -c '! cells "$1" | grep -q " fail$"' _ "$tmp/default.json"
check "... ties a minority, each the reference's own near-tie, no tie pattern" bash -c '
    [ $((2 * $(cells "$1" | grep -c " tie$"))) -lt "$(cells "$1" | wc -l)" ] &&
    grep -q "\"ties\":{\"cells\":[0-9]*,\"reference\":[0-9]*,\"own\":0,.*\"pattern\":null}" "$1"' \
    _ "$tmp/default.json"
check "... explained by its profile's roundings" grep -q '"explains":true' "$tmp/default.json"
check "... judged under ggml-act without the FP8/FP4 simulation, found by the calibration" \
    grep -q '^numerics: ggml-act, qat off, chosen' "$tmp/default.txt"
sed -n 's/^\(numerics:.*\)/  \1/p; s/^\(mode:.*\)/  \1/p; s/^\(backend against itself:.*\)/  \1/p; s/^\([0-9]* cells:.*\)/  \1/p' "$tmp/default.txt"
# ds4ref under the profile is about as far from llama.cpp as llama.cpp's own
# cells are from its base cells (the spread; docs/CONFORM.md §8 measured a
# floor of 0.075 against spreads of 0.058-0.091): a profile that missed one of
# llama.cpp's roundings would leave the official candidates' 0.65.
floor_within() {   # floor_within JSON: the calibrated floor at most twice the spread
    local floor spread
    floor=$(grep -o '"calibration":{"numerics":"[^"]*","qat":[a-z]*,"floor":[0-9.e-]*' "$1" | sed 's/.*://')
    spread=$(grep -o '"spread":{"rows":[0-9]*,"dlogprob":[0-9.e-]*' "$1" | sed 's/.*://')
    awk -v f="$floor" -v s="$spread" 'BEGIN { exit !(f != "" && s != "" && f <= 2 * s) }' ||
        { echo "  floor ${floor:-none}, spread ${spread:-none}"; return 1; }
}
check "... the floor against ds4ref at most twice llama.cpp's spread against itself" floor_within "$tmp/default.json"

# 1b. llama.cpp's AVX2 build: the package's libggml-cpu-haswell.so alone
#     beside its other libraries, so that ggml cannot load a wider one.  Its
#     sums take another order (docs/CONFORM.md §8), and the same invocation
#     must still report no failing cell.
if grep -qw avx2 /proc/cpuinfo 2> /dev/null && [ -e "$lib/libggml-cpu-haswell.so" ]; then
    mkdir -p "$tmp/avx2"
    for f in "$lib"/lib*.so; do
        case ${f##*/} in libggml-cpu-*) ;; *) ln -s "$f" "$tmp/avx2/" ;; esac
    done
    ln -s "$lib/libggml-cpu-haswell.so" "$tmp/avx2/"
    check "llama.cpp's AVX2 build, the preset on the default model: exit status 0" status_is 0 \
        env DS4REF_LLAMA_LIB="$tmp/avx2" ./ds4ref-conform -q --no-cache --jobs 2 --backend llama.cpp \
        --json "$tmp/avx2.json"
    check "... no failing cell" bash -c '! cells "$1" | grep -q " fail$"' _ "$tmp/avx2.json"
    check "... the floor against ds4ref at most twice its spread" floor_within "$tmp/avx2.json"
    sed -n 's/^\(numerics:.*\)/  \1/p; s/^\(backend against itself:.*\)/  \1/p' "$tmp/out.txt"
else
    echo "peers: llama.cpp's AVX2 build skipped: no AVX2 here, or no libggml-cpu-haswell.so in $lib"
fi

# 2. The unquantized twin: llama.cpp keeps f32 activations, so the official
#    numerics apply (llama.cpp simulates no FP8 KV) and 1e-3 is loose.
twin="{ds4ref}-llama -m {model_f32} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} \
--top-k {top_k} --out {out}"
check "the twin of tiny.gguf under the official numerics at 1e-3: exit status 0" status_is 0 \
    conform --backend "$twin" -m models/tiny.gguf --numerics official --qat off \
    --max-dlogprob 1e-3 --max-gap 1e-3 --matrix "draft=0 chunk=7,whole batch=1,2" \
    --json "$tmp/twin.json"
check "... every cell passes" bash -c '! cells "$1" | grep -qv " pass$"' _ "$tmp/twin.json"

# 3. An injected bug: in a call with several rows, row r reads row r-1's
#    logits.  On tiny-spec every prompt decodes to one cycle, and copy and
#    long differ by less than the noise, so the rows are chat and code.
mkdir -p "$tmp/prompts"
cp vectors/conform/chat.txt vectors/conform/code.txt "$tmp/prompts/"
bug="{ds4ref}-llama -m {model} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} \
--top-k {top_k} --out {out} --bug rows-late"
check "llama.cpp with rows read one late: exit status 1" status_is 1 \
    conform --backend "$bug" --prompts "$tmp/prompts" --matrix "draft=0 chunk=1,7,whole batch=1,2,4" \
    --json "$tmp/bug.json"
check "... exactly the cells with several rows fail" bash -c '
    [ "$(cells "$1" | wc -l)" -eq 18 ] &&
    ! cells "$1" | awk "(\$2 > 1) != (\$4 == \"fail\") { print \"  \" \$0; bad = 1 } END { exit !bad }"' \
    _ "$tmp/bug.json"

# 4. Wrong models, which calibration must not absorb (docs/CONFORM.md §3.6):
#    llama.cpp on another seed's tiny-spec, and on a copy of tiny-spec with
#    two experts of its top-k layer swapped.  Their dumps name no model, so
#    only the numbers can tell: no numerics profile may explain them.
./ds4ref-mkmodel --config tiny-spec --seed 7 --no-mtp -o "$tmp/seed7.gguf" > /dev/null
python3 tests/swap_experts.py ./ds4ref-gguf models/tiny-spec.gguf "$tmp/swap.gguf" 3 0 1
for wrong in seed7 swap; do
    check "llama.cpp on $wrong.gguf: exit status 1" status_is 1 conform --backend \
        "{ds4ref}-llama -m $tmp/$wrong.gguf --batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} --top-k {top_k} --out {out}" \
        --matrix "draft=0 chunk=7,whole batch=1"
    check "... no numerics profile explains it" grep -q '^FAIL: no numerics profile explains this backend' "$tmp/out.txt"
    sed -n 's/^\(FAIL: no numerics profile explains this backend: .*\)/  \1/p' "$tmp/out.txt" | cut -c1-300
done

# 5. The right tiny.gguf, whose flat random distributions make near-ties
#    of a few hundredths of a nat that llama.cpp's order of sums decides one
#    way or the other: no failing cell, every tie one the reference puts
#    within the tie threshold, and no tie pattern.
check "llama.cpp on tiny.gguf: exit status 0" status_is 0 \
    conform --backend llama.cpp -m models/tiny.gguf --matrix "draft=0" --json "$tmp/tiny.json"
check "... every tie explained by the reference's own near-tie, no pattern" \
    grep -q '"ties":{"cells":[0-9]*,"reference":[0-9]*,"own":0,.*"pattern":null}' "$tmp/tiny.json"
sed -n 's/^\([0-9]* ties:.*\)/  \1/p; s/^\([0-9]* cells:.*\)/  \1/p' "$tmp/out.txt"

# 6. RoPE positions off by one in the rows after the first of a batch: the
#    cells of one row pass, and cells with several rows fail.
rope="{ds4ref}-llama -m {model} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} -c {ctx} \
--top-k {top_k} --out {out} --bug rope-shift"
check "llama.cpp with rows' positions one late: exit status 1" status_is 1 \
    conform --backend "$rope" --prompts "$tmp/prompts" --matrix "draft=0 chunk=7,whole batch=1,2,4" \
    --json "$tmp/rope.json"
check "... only cells with several rows fail, and some do" bash -c '
    cells "$1" | awk "\$4 == \"fail\" { n++; if (\$2 == 1) bad = 1 } END { exit bad || !n }"' \
    _ "$tmp/rope.json"
sed -n 's/^\([0-9]* cells:.*\)/  \1/p' "$tmp/out.txt"

echo "peers: $fails failed"
[ "$fails" -eq 0 ]
