#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_gemma.json: llama.cpp's greedy tokens and top-5 probabilities on random-weight
# Gemma 2 and Gemma 3 models written by `kvik synth --arch gemma2|gemma3` (local layers with a 16-token window
# interleaved with global ones, Gemma 2's soft-caps, Gemma 3's q/k norms and local/global rope) and Phi-3 models
# (`--arch phi3`: fused qkv and gate_up, LongRoPE with the long factors and the attention factor), which
# tests/test_gemma.cpp compares kvik with, teacher-forced. One prompt is longer than the window. Same recipe as
# tools/make_moe_ref_fixture.sh (tools/fixture_lib.sh).
# Usage (from the repository root, after building kvik): tools/make_gemma_ref_fixture.sh [KVIK_BINARY]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fixture_lib.sh"
fixture_init "$@"
OUT="$ROOT/tests/fixtures/ref_synth_gemma.json"
LONG="Once upon a time, there was a little girl named Lily. She liked to play in the park with her friend Tom."
# name | arch | type | dim | layers | heads | kv_heads | head_dim | ff | window | seed | prompt
MODELS=(
  "gemma2_f32|gemma2|f32|128|4|4|2|64|256|16|51|$LONG"
  "gemma2_q8_0|gemma2|q8_0|256|3|8|4|32|512|16|52|The cat sat"
  "gemma3_f32|gemma3|f32|128|7|4|1|64|256|16|53|$LONG"
  "gemma3_q4_k|gemma3|q4_k|256|6|4|2|64|512|16|54|Lily and Tom"
  "phi3_f32|phi3|f32|128|3|4|2|32|256|0|55|$LONG"
  "phi3_q8_0|phi3|q8_0|256|2|8|8|32|512|0|56|The cat sat"
)
N=256
entries=()
for spec in "${MODELS[@]}"; do
  IFS='|' read -r name arch type dim layers heads kvh hd ff win seed prompt <<< "$spec"
  model="$TMP/$name.gguf"
  "$KVIK" synth "$model" --arch "$arch" --dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" \
    --head-dim "$hd" --ff "$ff" --sliding-window "$win" --vocab 512 --type "$type" --seed "$seed" \
    --tokenizer-from "$STORIES" > /dev/null 2>&1
  synth="$(jq -cn --arg arch "$arch" --arg type "$type" --argjson dim "$dim" --argjson layers "$layers" \
    --argjson heads "$heads" --argjson kvh "$kvh" --argjson hd "$hd" --argjson ff "$ff" --argjson win "$win" \
    --argjson seed "$seed" \
    '{arch: $arch, type: $type, dim: $dim, layers: $layers, heads: $heads, kv_heads: $kvh, head_dim: $hd, ff: $ff,
      sliding_window: $win, vocab: 512, seed: $seed, tokenizer_from: "stories260K.gguf"}')"
  fixture_entry "$name" "$model" "$prompt" $N 5 "$synth" > "$TMP/$name.entry.json"
  entries+=("$TMP/$name.entry.json")
  echo "$name: done" >&2
done
fixture_write "$OUT" tools/make_gemma_ref_fixture.sh $N 5 "${entries[@]}"
