#!/usr/bin/env bash
# Decode speed of IQ4_NL against Q4_0 (target: within 10%), kvik and llama.cpp on the same files, as JSON.
# One random F32 model (`kvik synth`) is quantized by `kvik quantize` into both mixes (llama-quantize's recipes:
# output.weight Q6_K in both; IQ4_NL also gives the first eighth of ffn_down Q5_K); each engine decodes G tokens
# after a P-token prompt at batch 1, alternating A B A B for ROUNDS rounds; medians.
# Usage: bench/iq4_nl_decode.sh [THREADS]   Environment: KVIK (build/kvik), ROUNDS (5), P (64), G (64),
#        DIM/LAYERS/FF/VOCAB (2048/8/5632/32000: a ~1.2B-parameter shape, ~0.7 GB at 4.5 bits).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${1:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-5}" P="${P:-64}" G="${G:-64}"
DIM="${DIM:-2048}" LAYERS="${LAYERS:-8}" FF="${FF:-5632}" VOCAB="${VOCAB:-32000}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$KVIK" synth "$TMP/f32.gguf" --type f32 --dim "$DIM" --layers "$LAYERS" --heads 16 --kv-heads 16 --ff "$FF" \
  --vocab "$VOCAB" --tokenizer-from "$SHARED/models/stories260K.gguf" >/dev/null 2>&1
for t in q4_0 iq4_nl; do "$KVIK" quantize --quiet "$TMP/f32.gguf" "$TMP/$t.gguf" "$t"; done
rm -f "$TMP/f32.gguf"
echo "$THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2
kvik_run() {
  nice "$KVIK" bench -m "$TMP/$1.gguf" --no-bandwidth --threads "$THREADS" --max-model-len $((P + G + 16)) --num-prompts 1 \
    --input-len "$P" --output-len "$G" --json 2>/dev/null | tail -n 1
}
llama_run() { (cd "$PEER" && nice node llamacpp-ref.mjs bench "$TMP/$1.gguf" "$P" "$G" "$THREADS" 2>/dev/null | tail -n 1); }
for r in $(seq 1 "$ROUNDS"); do
  for t in q4_0 iq4_nl; do
    if (( r % 2 )); then order="kvik llama"; else order="llama kvik"; fi
    for e in $order; do echo "$t $e $("${e}_run" "$t")" >> "$TMP/runs"; done
  done
  echo "round $r/$ROUNDS done" >&2
done
# One JSON object: medians of decode tok/s per type and engine (kvik: 1 / median inter-token latency), the
# IQ4_NL / Q4_0 ratio of each engine and kvik / llama.cpp per type.
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
while read -r t who js; do
  jq -c --arg t "$t" --arg w "$who" '{type: $t, who: $w, tok_s: (if $w == "kvik" then 1000 / .itl_ms.p50 else .decode_tok_s end)}' <<< "$js"
done < "$TMP/runs" | jq -s --arg cpu "$CPU" --argjson threads "$THREADS" --argjson q4 "$(stat -c %s "$TMP/q4_0.gguf")" \
  --argjson iq4 "$(stat -c %s "$TMP/iq4_nl.gguf")" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r(n): . * n | round / n;
  (group_by(.type) | map({key: .[0].type, value: (group_by(.who) | map({key: .[0].who, value: (map(.tok_s) | median | r(100))})
                                                  | from_entries)}) | from_entries) as $med |
  {cpu: $cpu, threads: $threads, bytes: {q4_0: $q4, iq4_nl: $iq4}, decode_tok_s: $med,
   kvik_iq4_nl_over_q4_0: ($med.iq4_nl.kvik / $med.q4_0.kvik | r(1000)),
   llama_iq4_nl_over_q4_0: ($med.iq4_nl.llama / $med.q4_0.llama | r(1000)),
   kvik_over_llama: ($med | map_values(.kvik / .llama | r(1000))),
   runs: (group_by(.type) | map({key: .[0].type, value: (group_by(.who) | map({key: .[0].who, value: map(.tok_s)}) | from_entries)})
          | from_entries)}'
