#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_moe.json: llama.cpp's greedy tokens and top-5 probabilities on random-weight
# mixture-of-experts models written by `kvik synth --arch mixtral|qwen3moe` (Mixtral: GGUF arch llama with
# expert_count; Qwen3-MoE: qwen3moe with q/k norm and its own expert width), which tests/test_moe.cpp compares
# kvik with, teacher-forced. Same recipe as tools/make_kquant_ref_fixture.sh (tools/fixture_lib.sh).
# Usage (from the repository root, after building kvik): tools/make_moe_ref_fixture.sh [KVIK_BINARY]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fixture_lib.sh"
fixture_init "$@"
OUT="$ROOT/tests/fixtures/ref_synth_moe.json"
# name | arch | type | dim | layers | heads | kv_heads | head_dim | ff | experts | used | expert_ff | seed | prompt
MODELS=(
  "mixtral_f32|mixtral|f32|128|2|4|2|0|256|8|2|0|41|Once upon a time"
  "mixtral_q8_0|mixtral|q8_0|256|2|8|2|0|256|8|2|0|42|The cat sat"
  "mixtral_q4_k|mixtral|q4_k|256|2|4|2|0|256|8|2|0|43|Lily and Tom"
  "qwen3moe_f32|qwen3moe|f32|128|2|4|2|64|384|16|4|64|44|One day"
  "qwen3moe_q8_0|qwen3moe|q8_0|256|2|4|1|64|512|32|8|128|46|A bird"
  "qwen3moe_q4_k|qwen3moe|q4_k|256|2|8|2|64|768|16|4|256|45|Once upon a time"
)
N=256
entries=()
for spec in "${MODELS[@]}"; do
  IFS='|' read -r name arch type dim layers heads kvh hd ff ne nu eff seed prompt <<< "$spec"
  model="$TMP/$name.gguf"
  "$KVIK" synth "$model" --arch "$arch" --experts "$ne" --experts-used "$nu" --expert-ff "$eff" --dim "$dim" \
    --layers "$layers" --heads "$heads" --kv-heads "$kvh" --head-dim "$hd" --ff "$ff" --vocab 512 --type "$type" \
    --seed "$seed" --tokenizer-from "$STORIES" > /dev/null 2>&1
  synth="$(jq -cn --arg arch "$arch" --arg type "$type" --argjson dim "$dim" --argjson layers "$layers" \
    --argjson heads "$heads" --argjson kvh "$kvh" --argjson hd "$hd" --argjson ff "$ff" --argjson ne "$ne" \
    --argjson nu "$nu" --argjson eff "$eff" --argjson seed "$seed" \
    '{arch: $arch, type: $type, dim: $dim, layers: $layers, heads: $heads, kv_heads: $kvh, head_dim: $hd, ff: $ff,
      experts: $ne, experts_used: $nu, expert_ff: $eff, vocab: 512, seed: $seed, tokenizer_from: "stories260K.gguf"}')"
  fixture_entry "$name" "$model" "$prompt" $N 5 "$synth" > "$TMP/$name.entry.json"
  entries+=("$TMP/$name.entry.json")
  echo "$name: done" >&2
done
fixture_write "$OUT" tools/make_moe_ref_fixture.sh $N 5 "${entries[@]}"
