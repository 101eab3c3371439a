#!/bin/bash
# A golden suite fanned out over Slurm (docs/CONFORM.md, "On a cluster"): a
# job array of N shards of scripts/golden-suite.sh, each writing
# DIR/shard-K.vec, then a merge job after them all (afterany: a shard that
# failed leaves a merge that names its slice) writing DIR/suite.vec with its
# prompts beside it -- what ds4_test --logprob-vectors reads
# (DS4_TEST_VECTOR_FILE) -- and DIR/status, the merge's exit status.
#
#   scripts/slurm-goldens.sh [-s 'SBATCH OPTIONS'] N DIR SUITE ds4ref-ARGS...
#
# DIR, SUITE's prompts and the model must be on storage every node sees.  It
# prints the array's job id and the merge's.  To run one slice again:
# sbatch --array K on the shard script written into DIR, then its merge script.
set -euo pipefail

sbatch_opts=()
if [ "${1:-}" = -s ]; then
    read -r -a sbatch_opts <<< "$2"
    shift 2
fi
if [ $# -lt 3 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 [-s 'SBATCH OPTIONS'] N DIR SUITE ds4ref-ARGS..." >&2
    exit 2
fi
n=$1 dir=$2 suite=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
suite=$(cd "$(dirname "$suite")" && pwd)/$(basename "$suite")
args=
[ $# -eq 0 ] || args=$(printf '%q ' "$@")
qdir=$(printf '%q' "$dir")
shards=""
for ((k = 0; k < n; k++)); do shards+=" $(printf '%q' "$dir/shard-$k.vec")"; done
gs=$(printf '%q' "$here/golden-suite.sh")

cat > "$dir/shard.sh" <<EOT
#!/bin/bash
# One slice: Slurm's array index is the shard (a file left by an earlier try goes first).
rm -f $qdir/shard-\$SLURM_ARRAY_TASK_ID.vec
exec $gs shard $(printf '%q' "$suite") "\$SLURM_ARRAY_TASK_ID/$n" $qdir/shard-\$SLURM_ARRAY_TASK_ID.vec $args
EOT
cat > "$dir/merge.sh" <<EOT
#!/bin/bash
# Every slice's shard into DIR/suite.vec.
# A slice whose shard left no file is named by the merge as missing.
rm -f $qdir/suite.vec
files=()
for f in$shards; do [ -e "\$f" ] && files+=("\$f"); done
if [ \${#files[@]} -eq 0 ]; then
    echo "golden-suite: no shard file in $qdir: every shard failed (shard-*.log say why)" >&2
    echo 2 > $qdir/status
    exit 2
fi
$gs merge $(printf '%q' "$suite") $qdir/suite.vec "\${files[@]}"
status=\$?
echo \$status > $qdir/status
exit \$status
EOT
chmod +x "$dir/shard.sh" "$dir/merge.sh"
rm -f "$dir/status"
array=$(sbatch --parsable "${sbatch_opts[@]}" --job-name ds4ref-goldens --array "0-$((n - 1))" \
        --output "$dir/shard-%a.log" "$dir/shard.sh")
array=${array%%;*}
merge=$(sbatch --parsable "${sbatch_opts[@]}" --job-name ds4ref-goldens-merge \
        --dependency "afterany:$array" --output "$dir/merge.log" "$dir/merge.sh")
echo "array $array merge ${merge%%;*}"
