#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_kquants.json, llama.cpp's greedy tokens (and top-2 probabilities) on
# random-weight K-quant models written by `kvik synth` (Q4_K, Q5_K, Q6_K and the Q4_K_M mix), which
# tests/test_kquant_parity.cpp compares kvik with, teacher-forced. Same recipe as tools/make_ref_fixtures.sh.
# Usage (from the repository root, after building kvik): tools/make_kquant_ref_fixture.sh [KVIK_BINARY] [quants]
# With `quants`: tests/fixtures/ref_synth_quants.json instead, models of the other types kvik quantize writes
# (Q4_1, Q5_0, Q5_1, IQ4_NL): written by `kvik synth --type f32`, then `kvik quantize` (type field "f32>MIX").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fixture_lib.sh"
fixture_init "${1:-}"
OUT="$ROOT/tests/fixtures/ref_synth_kquants.json"
[[ "${2:-}" == quants ]] && OUT="$ROOT/tests/fixtures/ref_synth_quants.json"
# name | type | dim | layers | heads | kv_heads | head_dim | ff | seed | prompt
MODELS=(
  "q4_k_gqa_hd64|q4_k|256|2|4|2|0|512|21|Once upon a time"
  "q5_k_gqa_hd32|q5_k|256|2|8|2|0|768|22|The cat sat"
  "q6_k_mqa_hd64|q6_k|512|2|8|1|0|512|23|Lily and Tom"
  "q4_k_m_gqa_hd64|q4_k_m|256|2|4|2|0|512|24|One day"
)
[[ "${2:-}" == quants ]] && MODELS=(
  "q4_1_gqa_hd64|f32>q4_1|256|2|4|2|0|512|31|Once upon a time"
  "q5_0_gqa_hd32|f32>q5_0|256|2|8|2|0|768|32|The cat sat"
  "q5_1_mqa_hd64|f32>q5_1|512|2|8|1|0|512|33|Lily and Tom"
  "iq4_nl_gqa_hd64|f32>iq4_nl|256|2|4|2|0|512|34|One day"
)
N=256
entries=()
for spec in "${MODELS[@]}"; do
  IFS='|' read -r name type dim layers heads kvh hd ff seed prompt <<< "$spec"
  model="$TMP/$name.gguf"
  "$KVIK" synth "$model" --dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" --head-dim "$hd" \
    --ff "$ff" --vocab 512 --type "${type%%>*}" --seed "$seed" --tokenizer-from "$STORIES" > /dev/null 2>&1
  if [[ "$type" == *">"* ]]; then "$KVIK" quantize --quiet "$model" "$model.q" "${type#*>}" && mv "$model.q" "$model"; fi
  synth="$(jq -cn --arg type "$type" --argjson dim "$dim" --argjson layers "$layers" --argjson heads "$heads" \
    --argjson kvh "$kvh" --argjson hd "$hd" --argjson ff "$ff" --argjson seed "$seed" \
    '{type: $type, dim: $dim, layers: $layers, heads: $heads, kv_heads: $kvh, head_dim: $hd, ff: $ff, vocab: 512,
      seed: $seed, tokenizer_from: "stories260K.gguf"}')"
  fixture_entry "$name" "$model" "$prompt" $N 2 "$synth" > "$TMP/$name.entry.json"
  entries+=("$TMP/$name.entry.json")
  echo "$name: done" >&2
done
fixture_write "$OUT" tools/make_kquant_ref_fixture.sh $N 2 "${entries[@]}"
