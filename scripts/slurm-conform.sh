#!/bin/bash
# A ds4ref-conform run fanned out over Slurm (docs/CONFORM.md, "On a cluster"):
# a job array of N shards, each `ds4ref-conform ARGS --shard K/N` writing
# DIR/shard-K.json, then a merge job that waits for all of them (afterany: a
# shard that failed leaves a merge that names the slice to run again) and
# writes DIR/report.txt, DIR/merged.json and DIR/status (the merge's exit
# status, as an unsharded run's).
#
#   scripts/slurm-conform.sh [-s 'SBATCH OPTIONS'] N DIR ARGS...
#
# ARGS are ds4ref-conform's (the backend, -m MODEL, --matrix, ...), the same
# for every shard and the merge; DIR must be on storage every node sees, and
# so must the model, the backend and --cache (the reference goldens, written
# atomically: shards that compute the same one do not corrupt it).  It prints
# the array's job id and the merge's.  DS4REF_CONFORM names the program
# (default: ds4ref-conform beside this script's folder, else on the PATH).
# To run one slice again: sbatch --wrap "ds4ref-conform ARGS --shard K/N
# --json DIR/shard-K.json", then the merge script the run wrote beside the shards.
set -euo pipefail

sbatch_opts=()
if [ "${1:-}" = -s ]; then
    read -r -a sbatch_opts <<< "$2"
    shift 2
fi
if [ $# -lt 3 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [-s 'SBATCH OPTIONS'] N DIR ds4ref-conform-ARGS..." >&2
    exit 2
fi
n=$1 dir=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
conform=${DS4REF_CONFORM:-}
if [ -z "$conform" ]; then
    if [ -x "$here/ds4ref-conform" ]; then conform=$here/ds4ref-conform
    else conform=$(command -v ds4ref-conform || true); fi
fi
[ -n "$conform" ] || { echo "$0: no ds4ref-conform (set DS4REF_CONFORM)" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# The arguments, quoted once for the shell of each job.
args=$(printf '%q ' "$conform" "$@")
shards=""
for ((k = 0; k < n; k++)); do shards+=" $(printf '%q' "$dir/shard-$k.json")"; done

qdir=$(printf '%q' "$dir")
cat > "$dir/shard.sh" <<EOF
#!/bin/bash
# One slice: Slurm's array index is the shard (a file left by an earlier try goes first).
rm -f $qdir/shard-\$SLURM_ARRAY_TASK_ID.json
exec $args -q --shard "\$SLURM_ARRAY_TASK_ID/$n" --json $qdir/shard-\$SLURM_ARRAY_TASK_ID.json
EOF
cat > "$dir/merge.sh" <<EOF
#!/bin/bash
# Every slice's shard file into the unsharded run's report, JSON and status;
# a slice whose shard left no file is named by the merge as missing.
files=()
for f in$shards; do [ -e "\$f" ] && files+=(--merge "\$f"); done
if [ \${#files[@]} -eq 0 ]; then
    echo "ds4ref-conform: no shard file in $qdir: every shard failed (shard-*.log say why)" >&2
    echo 2 > $qdir/status
    exit 2
fi
$args -q "\${files[@]}" --json $qdir/merged.json > $qdir/report.txt
status=\$?
echo \$status > $qdir/status
exit \$status
EOF
chmod +x "$dir/shard.sh" "$dir/merge.sh"
rm -f "$dir/status"

array=$(sbatch --parsable "${sbatch_opts[@]}" --job-name ds4ref-conform --array "0-$((n - 1))" \
        --output "$dir/shard-%a.log" "$dir/shard.sh")
array=${array%%;*}
merge=$(sbatch --parsable "${sbatch_opts[@]}" --job-name ds4ref-conform-merge \
        --dependency "afterany:$array" --output "$dir/merge.log" "$dir/merge.sh")
merge=${merge%%;*}
echo "array $array merge $merge"
