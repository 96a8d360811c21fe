#!/usr/bin/env bash
# Memory per rank under tensor parallelism: with TP=2 each rank holds about half the model's weights. Checks the
# start-up table's computed weight bytes (at most 55% of the file per rank) and the measured resident set: each
# rank's RSS above a baseline (the same job on stories260K, 1 MiB of weights) is at most 60% of the file.
# Usage: parallel_memory.sh KVIK STORIES
set -euo pipefail
kvik=$1 stories=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$tmp/wide.gguf"
"$kvik" synth --dim 512 --layers 4 --heads 8 --kv-heads 4 --ff 2048 --vocab 512 --context 256 --seed 3 \
  --tokenizer-from "$stories" "$model" >/dev/null
file_mib=$(($(stat -c %s "$model") / 1048576))
job() {
  mpirun --allow-run-as-root --oversubscribe -np 2 "$kvik" generate -m "$1" -p "Once upon a time" -n 4 --threads 1 \
    --tensor-parallel-size 2 --max-model-len 128 2>&1 >/dev/null | grep -E "^INFO .* rank [0-9] \(stage"
}
base=$(job "$stories" | sed -E 's/.*resident ([0-9.]+) MiB.*/\1/' | sort -n | tail -1)
job "$model" | tee "$tmp/table.txt"
while read -r rank weights rss; do
  echo "rank $rank: weights $weights MiB, resident $rss MiB (baseline $base MiB), model file $file_mib MiB"
  awk -v w="$weights" -v f="$file_mib" 'BEGIN { exit !(w <= 0.55 * f) }' ||
    { echo "FAIL: rank $rank holds $weights MiB of weights, more than 55% of $file_mib MiB"; exit 1; }
  awk -v r="$rss" -v b="$base" -v f="$file_mib" 'BEGIN { exit !(r - b <= 0.6 * f) }' ||
    { echo "FAIL: rank $rank's resident set grew by more than 60% of the model"; exit 1; }
done < <(sed -E 's/.*rank ([0-9]+) .*weights ([0-9.]+) MiB \(resident ([0-9.]+) MiB\).*/\1 \2 \3/' "$tmp/table.txt")
[ "$(wc -l <"$tmp/table.txt")" -eq 2 ] || { echo "FAIL: expected two ranks in the table"; exit 1; }
echo "OK: TP=2 ranks hold about half of the $file_mib MiB model each"
