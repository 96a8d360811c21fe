#!/usr/bin/env bash
# Memory per rank under expert parallelism: with --tensor-parallel-size 2 --enable-expert-parallel each rank holds
# half of the experts, whole (experts [0, 4) and [4, 8) of 8), and its expert weight bytes (the start-up table) are
# 45-55% of the model's; its resident set above a baseline (the same job on stories260K, 1 MiB of weights) is at
# most 60% of the file, so the other half's pages were never read. The same table without the flag (every expert's
# d_ff_exp sliced) is printed beside it for the report.
# Usage: parallel_expert_memory.sh KVIK STORIES
set -euo pipefail
kvik=$1 stories=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$tmp/moe.gguf"
"$kvik" synth --arch mixtral --experts 8 --experts-used 2 --dim 256 --layers 4 --heads 8 --kv-heads 4 --ff 512 \
  --vocab 512 --context 256 --seed 3 --tokenizer-from "$stories" "$model" >/dev/null
file_mib=$(($(stat -c %s "$model") / 1048576))
expert_mib=$((8 * 4 * 3 * 256 * 512 * 4 / 1048576))  # E · L · 3 matrices · d · d_ff_exp · 4 bytes (f32)
job() {
  mpirun --allow-run-as-root --oversubscribe -np 2 "$kvik" generate -m "$1" -p "Once upon a time" -n 4 --threads 1 \
    --tensor-parallel-size 2 --max-model-len 128 "${@:2}" 2>&1 >/dev/null | grep -E "^INFO .* rank [0-9] \(stage"
}
base=$(job "$stories" | sed -E 's/.*resident ([0-9.]+) MiB.*/\1/' | sort -n | tail -1)
echo "TP=2, every expert sliced:"
job "$model"
echo "TP=2 --enable-expert-parallel:"
job "$model" --enable-expert-parallel | tee "$tmp/table.txt"
[ "$(wc -l <"$tmp/table.txt")" -eq 2 ] || { echo "FAIL: expected two ranks in the table"; exit 1; }
while read -r rank rss first end experts; do
  echo "rank $rank: experts [$first, $end) $experts MiB of $expert_mib MiB; resident $rss MiB (baseline $base MiB)," \
    "model file $file_mib MiB"
  [ "$first" -eq $((rank * 4)) ] && [ "$end" -eq $((rank * 4 + 4)) ] ||
    { echo "FAIL: rank $rank holds experts [$first, $end), not [$((rank * 4)), $((rank * 4 + 4)))"; exit 1; }
  awk -v e="$experts" -v t="$expert_mib" 'BEGIN { exit !(e >= 0.45 * t && e <= 0.55 * t) }' ||
    { echo "FAIL: rank $rank holds $experts MiB of experts, not about half of $expert_mib MiB"; exit 1; }
  awk -v r="$rss" -v b="$base" -v f="$file_mib" 'BEGIN { exit !(r - b <= 0.6 * f) }' ||
    { echo "FAIL: rank $rank's resident set grew by more than 60% of the model"; exit 1; }
done < <(sed -E 's/.*rank ([0-9]+) .*\(resident ([0-9.]+) MiB\).* experts \[([0-9]+), ([0-9]+)\) of 8: ([0-9.]+) MiB.*/\1 \2 \3 \4 \5/' \
  "$tmp/table.txt")
echo "OK: expert parallel ranks hold half of the $expert_mib MiB of experts each"
