#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_moe.json: llama.cpp's greedy tokens and top-5 probabilities on random-weight
# mixture-of-experts models written by `kvik synth --arch mixtral|qwen3moe` (Mixtral: GGUF arch llama with
# expert_count; Qwen3-MoE: qwen3moe with q/k norm and its own expert width), which tests/test_moe.cpp compares
# kvik with, teacher-forced. Same recipe as tools/make_kquant_ref_fixture.sh (node-llama-cpp, CPU, f16 KV cache).
# Usage (from the repository root, after building kvik): tools/make_moe_ref_fixture.sh [KVIK_BINARY]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
STORIES="$SHARED/models/stories260K.gguf"
OUT="$ROOT/tests/fixtures/ref_synth_moe.json"
[[ -f "$PEER/llamacpp-ref.mjs" ]] || bash "$SHARED/peer/setup.sh"
cp "$ROOT/tools/llamacpp_ref_greedy.mjs" "$PEER/"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
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
{
  printf '{"header":{"n_generated":%d,"topk":5,"generator":"tools/make_moe_ref_fixture.sh","reference":"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy"},\n"models":[\n' $N
  first=1
  for spec in "${MODELS[@]}"; do
    IFS='|' read -r name arch type dim layers heads kvh hd ff ne nu eff seed prompt <<< "$spec"
    model="$TMP/$name.gguf"
    "$KVIK" synth "$model" --arch "$arch" --experts "$ne" --experts-used "$nu" --expert-ff "$eff" --dim "$dim" \
      --layers "$layers" --heads "$heads" --kv-heads "$kvh" --head-dim "$hd" --ff "$ff" --vocab 512 --type "$type" \
      --seed "$seed" --tokenizer-from "$STORIES" > /dev/null 2>&1
    node "$PEER/llamacpp_ref_greedy.mjs" "$model" "$prompt" $N 5 > "$TMP/raw.json"
    (( first )) || printf ',\n'
    first=0
    node -e '
      const fs = require("fs"); const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
      const [name, arch, type, dim, layers, heads, kvh, hd, ff, ne, nu, eff, seed, size, sha] = process.argv.slice(2);
      const round = p => Number(p.toPrecision(7));
      process.stdout.write(JSON.stringify({name, synth: {arch, type, dim: +dim, layers: +layers, heads: +heads,
        kv_heads: +kvh, head_dim: +hd, ff: +ff, experts: +ne, experts_used: +nu, expert_ff: +eff, vocab: 512,
        seed: +seed, tokenizer_from: "stories260K.gguf"}, size: +size, sha256: sha,
        prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated,
        top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))}));' \
      "$TMP/raw.json" "$name" "$arch" "$type" "$dim" "$layers" "$heads" "$kvh" "$hd" "$ff" "$ne" "$nu" "$eff" "$seed" \
      "$(stat -c %s "$model")" "$(sha256sum "$model" | cut -d' ' -f1)"
    echo "$name: done" >&2
  done
  printf '\n]}\n'
} > "$OUT"
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$OUT"
echo "wrote $OUT" >&2
