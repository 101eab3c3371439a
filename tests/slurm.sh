#!/bin/bash
# ds4ref-conform over a real Slurm (docs/CONFORM.md, "On a cluster"), run by
# make peers.  A single-node Slurm -- Debian's slurmctld, slurmd and munge,
# started here as root on the loopback, with a configuration, key, sockets,
# ports and state of its own in a temporary folder -- runs a sharded conform
# of the test backend (with a bug, so that cells fail) through
# scripts/slurm-conform.sh:
#   - the merged report equals the unsharded run's byte for byte, and its
#     JSON less the seconds;
#   - a shard cancelled with scancel leaves a merge that refuses, naming the
#     slice; that slice run again (sbatch) completes the merge;
#   - the same for a golden suite (scripts/slurm-goldens.sh): the merged
#     official.vec is the suite run as one shard, byte for byte, and
#     ds4_test --logprob-vectors passes on it.
# Exits 0 when all hold, 77 (skipped, saying why) when Slurm cannot start.
#
#   tests/slurm.sh BUILD_DIR       (from the repository root, after make)
set -uo pipefail

build=${1:-build}
skip() { echo "slurm: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "slurmd runs jobs as their user only when started as root"
for d in slurmctld slurmd munged sbatch squeue scancel; do
    command -v "$d" > /dev/null 2>&1 || PATH=$PATH:/usr/sbin
    command -v "$d" > /dev/null 2>&1 || skip "$d is not installed (Debian: slurmctld slurmd slurm-client munge)"
done
[ -x "$build/conform-backend" ] || skip "$build/conform-backend is not built (make test builds it)"

fails=0
check() {   # check WHAT COMMAND...
    if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

tmp=$(mktemp -d /tmp/ds4ref-slurm.XXXXXX)
chmod 755 "$tmp"
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/prompts"
export SLURM_CONF=$tmp/slurm.conf
stop_all() {
    scancel --quiet --user root > /dev/null 2>&1
    for p in slurmd slurmctld munged; do
        [ -f "$tmp/$p.pid" ] && kill "$(cat "$tmp/$p.pid")" 2> /dev/null
    done
    sleep 1
    if [ "$fails" -eq 0 ]; then rm -rf "$tmp"; else echo "slurm: kept $tmp"; fi
}
trap stop_all EXIT

# munge: a key and a socket of our own.
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 2> /dev/null
chmod 400 "$tmp/munge.key"
munged --force --key-file="$tmp/munge.key" --socket="$tmp/munge.sock" \
    --pid-file="$tmp/munged.pid" --log-file="$tmp/log/munged.log" --seed-file="$tmp/munged.seed" \
    || skip "munged did not start ($(tail -1 "$tmp/log/munged.log" 2> /dev/null))"

# Slurm: one node, this host, its CPUs, ports no other Slurm uses.
node=$(hostname -s)
port=$((20000 + RANDOM % 20000))
cat > "$SLURM_CONF" <<EOF
ClusterName=ds4ref
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ds4ref Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
slurmctld -f "$SLURM_CONF" || skip "slurmctld did not start ($(tail -2 "$tmp/log/slurmctld.log"))"
slurmd -f "$SLURM_CONF" || skip "slurmd did not start ($(tail -2 "$tmp/log/slurmd.log"))"
for _ in $(seq 60); do
    sinfo -h -o %t 2> /dev/null | grep -q idle && break
    sleep 1
done
sinfo -h -o %t | grep -q idle || skip "the node did not come up ($(tail -2 "$tmp/log/slurmd.log"))"
echo "slurm: $(sinfo -V), one node ($node, $(nproc) CPUs), port $port"

# Wait for every job to leave the queue (at most $1 seconds).
drain() {
    for _ in $(seq "$1"); do
        [ -z "$(squeue -h 2> /dev/null)" ] && return 0
        sleep 1
    done
    return 1
}

# Cancel slice 1 of the array that IDS ("array A merge M") names once it
# runs, then let the merge job end.
cancel_slice1() {
    local array=${1#array }
    array=${array%% *}
    for _ in $(seq 120); do
        squeue -h -t R -j "${array}_1" 2> /dev/null | grep -q . && break
        sleep 1
    done
    sleep 2
    scancel "${array}_1"
    drain 600
}

# The test backend behind a wrapper that sleeps in the array task named by
# SLOW_TASK: one template for every run, one shard slow enough to cancel.
cp vectors/conform/chat.txt vectors/conform/code.txt "$tmp/prompts/"
cat > "$tmp/backend" <<EOF
#!/bin/sh
[ "\${SLURM_ARRAY_TASK_ID:-x}" = "\${SLOW_TASK:-none}" ] && sleep 600
exec $PWD/$build/conform-backend "\$@"
EOF
chmod +x "$tmp/backend"
args=(--no-cache --backend "$tmp/backend -m {model} --batch-tokens {batch_tokens} -n {n} --chunk {chunk} --draft {draft} --top-k {top_k} -c {ctx} --out {out} --bug batch-holes"
      -m "$PWD/models/tiny.gguf" --mtp "$PWD/models/tiny-mtp.gguf" --prompts "$tmp/prompts"
      --matrix "draft=0,1 chunk=3,whole batch=1,2" -n 16)
./ds4ref-conform -q "${args[@]}" --json "$tmp/all.json" > "$tmp/all.txt" 2> /dev/null
check "the unsharded run fails where the bug is (exit 1)" test $? -eq 1
no_seconds() { grep -v '^$' "$1" | sed 's/"seconds":[^,]*,//g'; }

# Three shards and their merge, as the README's recipe runs them.
ids=$(DS4REF_CONFORM=$PWD/ds4ref-conform scripts/slurm-conform.sh 3 "$tmp/run" "${args[@]}")
check "scripts/slurm-conform.sh submits the array and the merge ($ids)" test -n "$ids"
drain 600
check "the merge job's status is the unsharded run's (1)" grep -qx 1 "$tmp/run/status"
check "... its report is the unsharded run's, byte for byte" diff "$tmp/all.txt" "$tmp/run/report.txt"
check "... and its JSON, less the seconds" diff <(no_seconds "$tmp/all.json") <(no_seconds "$tmp/run/merged.json")

# A shard cancelled: slice 1 waits in its first cell until scancel stops it.
ids=$(SLOW_TASK=1 DS4REF_CONFORM=$PWD/ds4ref-conform scripts/slurm-conform.sh 3 "$tmp/cut" "${args[@]}")
cancel_slice1 "$ids"
check "scancel on shard 1: the merge refuses (status 2)" grep -qx 2 "$tmp/cut/status"
check "... naming slice 1" grep -Eq 'shard 1/3 (\(cells [0-9]+ to [0-9]+\) is missing|did not finish)' "$tmp/cut/merge.log"
sbatch --wait --array 1 --output "$tmp/cut/shard-again.log" "$tmp/cut/shard.sh" > /dev/null
sbatch --wait --output "$tmp/cut/merge-again.log" "$tmp/cut/merge.sh" > /dev/null
check "... slice 1 run again (sbatch): the merge completes, as the unsharded run" \
    diff "$tmp/all.txt" "$tmp/cut/report.txt"

# A golden suite: four prompts in three shards of scripts/slurm-goldens.sh,
# merged into the official.vec ds4_test reads; byte for byte the suite run
# as one shard, and ds4_test --logprob-vectors holds the model to it.  Then
# slice 1 cancelled: the merge names it; run again, the merge completes.
for p in chat code copy long; do echo "$p $PWD/vectors/conform/$p.txt"; done > "$tmp/suite.txt"
printf '#!/bin/sh\n[ "${SLURM_ARRAY_TASK_ID:-x}" = "${SLOW_TASK:-none}" ] && sleep 600\nexec %s "$@"\n' \
    "$PWD/ds4ref" > "$tmp/ds4ref"
chmod +x "$tmp/ds4ref"
gargs=(-m "$PWD/models/tiny.gguf" -n 8)
ids=$(DS4REF=$tmp/ds4ref scripts/slurm-goldens.sh 3 "$tmp/gold" "$tmp/suite.txt" "${gargs[@]}")
check "scripts/slurm-goldens.sh submits the array and the merge ($ids)" test -n "$ids"
drain 600
check "the golden suite's merge succeeds (status 0)" grep -qx 0 "$tmp/gold/status"
scripts/golden-suite.sh shard "$tmp/suite.txt" 0/1 "$tmp/one/all.vec" "${gargs[@]}" > /dev/null &&
    scripts/golden-suite.sh merge "$tmp/suite.txt" "$tmp/one/suite.vec" "$tmp/one/all.vec" > /dev/null
check "... byte for byte the suite run as one shard" cmp "$tmp/one/suite.vec" "$tmp/gold/suite.vec"
check "... and ds4_test --logprob-vectors holds the model to it" \
    env DS4_TEST_MODEL="$PWD/models/tiny.gguf" DS4_TEST_VECTOR_FILE="$tmp/gold/suite.vec" \
    ./ds4_test --logprob-vectors
ids=$(SLOW_TASK=1 DS4REF=$tmp/ds4ref scripts/slurm-goldens.sh 3 "$tmp/gcut" "$tmp/suite.txt" "${gargs[@]}")
cancel_slice1 "$ids"
check "scancel on golden shard 1: the merge refuses (status 2)" grep -qx 2 "$tmp/gcut/status"
check "... naming slice 1" grep -q 'shard 1/3 (cases code) is missing' "$tmp/gcut/merge.log"
sbatch --wait --array 1 --output "$tmp/gcut/shard-again.log" "$tmp/gcut/shard.sh" > /dev/null
sbatch --wait --output "$tmp/gcut/merge-again.log" "$tmp/gcut/merge.sh" > /dev/null
check "... slice 1 run again: the merge completes, byte for byte" cmp "$tmp/one/suite.vec" "$tmp/gcut/suite.vec"

echo "slurm: $([ $fails -eq 0 ] && echo "all passed" || echo "$fails failed")"
exit $((fails > 0))
