#!/usr/bin/env bash
# One model with its weights repacked at load (the default) against `--no-repack` (the file layout, row-major
# kernels): a P-token prefill and a G-token batch-1 decode through `kvik bench`, alternating the two A B, B A for
# ROUNDS rounds; prints JSON with the medians (prefill: P / median time to first token; decode: 1000 / median
# inter-token latency) and packed / unpacked.
# Usage: bench/repack_speed.sh MODEL.gguf [THREADS]   Environment: KVIK (build/kvik), ROUNDS (3), P (512), G (64).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: bench/repack_speed.sh MODEL.gguf [THREADS]}"
THREADS="${2:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-3}" P="${P:-512}" G="${G:-64}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "$THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2
run() {  # $1: packed | unpacked
  local flag=()
  [ "$1" = unpacked ] && flag=(--no-repack)
  "$KVIK" bench -m "$MODEL" "${flag[@]}" --no-bandwidth --threads "$THREADS" --num-prompts 1 --input-len "$P" \
    --output-len "$G" --json 2>/dev/null | tail -n 1
}
for r in $(seq 1 "$ROUNDS"); do
  if ((r % 2)); then order="packed unpacked"; else order="unpacked packed"; fi
  for k in $order; do echo "$k $(run "$k")" >>"$TMP/runs"; done
  echo "round $r/$ROUNDS done" >&2
done
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
while read -r k js; do
  jq -c --arg k "$k" --argjson p "$P" '{k: $k, prefill: ($p / (.ttft_ms.p50 / 1000)), decode: (1000 / .itl_ms.p50)}' <<<"$js"
done <"$TMP/runs" | jq -s --arg cpu "$CPU" --arg model "$(basename "$MODEL")" --argjson threads "$THREADS" \
  --argjson p "$P" --argjson g "$G" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r(n): . * n | round / n;
  (group_by(.k) | map({key: .[0].k, value: {prefill_tok_s: (map(.prefill) | median | r(10)),
                                            decode_tok_s: (map(.decode) | median | r(10))}}) | from_entries) as $m |
  {cpu: $cpu, model: $model, threads: $threads, input_len: $p, output_len: $g, median: $m,
   packed_over_unpacked: {prefill: ($m.packed.prefill_tok_s / $m.unpacked.prefill_tok_s | r(100)),
                          decode: ($m.packed.decode_tok_s / $m.unpacked.decode_tok_s | r(100))},
   runs: (group_by(.k) | map({key: .[0].k, value: map({prefill: (.prefill | r(10)), decode: (.decode | r(10))})})
          | from_entries)}'
