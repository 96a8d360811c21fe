#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_gemma.json: llama.cpp's greedy tokens and top-5 probabilities on random-weight
# Gemma 2 and Gemma 3 models written by `kvik synth --arch gemma2|gemma3` (local layers with a 16-token window
# interleaved with global ones, Gemma 2's soft-caps, Gemma 3's q/k norms and local/global rope) and Phi-3 models
# (`--arch phi3`: fused qkv and gate_up, LongRoPE with the long factors and the attention factor), which
# tests/test_gemma.cpp compares kvik with, teacher-forced. One prompt is longer than the window. Same recipe as
# tools/make_moe_ref_fixture.sh (node-llama-cpp, CPU, f16 KV cache).
# Usage (from the repository root, after building kvik): tools/make_gemma_ref_fixture.sh [KVIK_BINARY]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
STORIES="$SHARED/models/stories260K.gguf"
OUT="$ROOT/tests/fixtures/ref_synth_gemma.json"
[[ -f "$PEER/llamacpp-ref.mjs" ]] || bash "$SHARED/peer/setup.sh"
cp "$ROOT/tools/llamacpp_ref_greedy.mjs" "$PEER/"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
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
{
  printf '{"header":{"n_generated":%d,"topk":5,"generator":"tools/make_gemma_ref_fixture.sh","reference":"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy"},\n"models":[\n' $N
  first=1
  for spec in "${MODELS[@]}"; do
    IFS='|' read -r name arch type dim layers heads kvh hd ff win seed prompt <<< "$spec"
    model="$TMP/$name.gguf"
    "$KVIK" synth "$model" --arch "$arch" --dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" \
      --head-dim "$hd" --ff "$ff" --sliding-window "$win" --vocab 512 --type "$type" --seed "$seed" \
      --tokenizer-from "$STORIES" > /dev/null 2>&1
    node "$PEER/llamacpp_ref_greedy.mjs" "$model" "$prompt" $N 5 > "$TMP/raw.json"
    (( first )) || printf ',\n'
    first=0
    node -e '
      const fs = require("fs"); const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
      const [name, arch, type, dim, layers, heads, kvh, hd, ff, win, seed, size, sha] = process.argv.slice(2);
      const round = p => Number(p.toPrecision(7));
      process.stdout.write(JSON.stringify({name, synth: {arch, type, dim: +dim, layers: +layers, heads: +heads,
        kv_heads: +kvh, head_dim: +hd, ff: +ff, sliding_window: +win, vocab: 512, seed: +seed,
        tokenizer_from: "stories260K.gguf"}, size: +size, sha256: sha,
        prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated,
        top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))}));' \
      "$TMP/raw.json" "$name" "$arch" "$type" "$dim" "$layers" "$heads" "$kvh" "$hd" "$ff" "$win" "$seed" \
      "$(stat -c %s "$model")" "$(sha256sum "$model" | cut -d' ' -f1)"
    echo "$name: done" >&2
  done
  printf '\n]}\n'
} > "$OUT"
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$OUT"
echo "wrote $OUT" >&2
