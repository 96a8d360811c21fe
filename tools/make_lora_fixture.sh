#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_lora.json, the llama.cpp reference of tests/test_lora_parity.cpp: GGUF LoRA adapters
# written by `kvik synth-lora` (their options, byte size and sha256 recorded) applied by llama.cpp (node-llama-cpp,
# tools/llamacpp_ref_greedy.mjs --lora) to stories260K and to a `kvik synth` GQA model; per case a prompt, 32 greedy tokens
# and the top-5 probabilities per step.
# Usage (from the repository root, after building kvik): tools/make_lora_fixture.sh [KVIK_BINARY]
# Environment: KVIK_PEER_DIR (the llama.cpp peer, tools/peer_lib.sh).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/fixture_lib.sh"
fixture_init "${1:-}"
OUT="$ROOT/tests/fixtures/ref_lora.json"
N=32

# The GQA base: recorded options, re-created by the test with synth_llama_gguf.
GQA="$TMP/gqa.gguf"
"$KVIK" synth "$GQA" --dim 128 --layers 2 --heads 8 --kv-heads 2 --ff 256 --vocab 512 --seed 3 \
  --tokenizer-from "$STORIES" >/dev/null
GQA_SYNTH='{"dim":128,"layers":2,"heads":8,"kv_heads":2,"ff":256,"vocab":512,"seed":3,"tokenizer_from":"stories260K.gguf"}'

# name | base (stories|gqa) | synth-lora options (seed rank type b_std targets) | scale | prompt
CASES=(
  "s_f32_r8|stories|7 8 f32 0.02 q,k,v,o,gate,up,down|1.0|Once upon a time"
  "s_f32_r8|stories|7 8 f32 0.02 q,k,v,o,gate,up,down|1.0|Lily and Tom went to the park"
  "s_f16_r16_half|stories|8 16 f16 0.03 q,k,v,o,gate,up,down|0.5|The cat"
  "s_f32_r4_qv|stories|9 4 f32 0.05 q,v|1.0|One day, a little girl named"
  "g_f32_r8|gqa|10 8 f32 0.05 q,k,v,o,gate,up,down|1.0|Once upon a time"
  "g_f16_r16|gqa|11 16 f16 0.05 q,k,o,down|2.0|The sun was shining"
)
i=0
files=()
for spec in "${CASES[@]}"; do
  IFS='|' read -r name base opts scale prompt <<< "$spec"
  read -r seed rank type bstd targets <<< "$opts"
  model="$STORIES"; [[ "$base" == gqa ]] && model="$GQA"
  lora="$TMP/$name.gguf"
  "$KVIK" synth-lora "$model" "$lora" --seed "$seed" --rank "$rank" --type "$type" --b-std "$bstd" \
    --targets "$targets" >/dev/null
  sha="$(sha256sum "$lora" | cut -d' ' -f1)"
  size="$(stat -c %s "$lora")"
  (cd "$PEER" && node llamacpp_ref_greedy.mjs --lora "$lora" "$scale" "$model" "$prompt" "$N" 5) > "$TMP/c$i.raw.json"
  node -e '
    const fs = require("fs");
    const [raw, name, base, seed, rank, type, bstd, targets, scale, size, sha, gqa] = process.argv.slice(1);
    const r = JSON.parse(fs.readFileSync(raw, "utf8"));
    const round = p => Number(p.toPrecision(7));
    const c = {name, base, base_synth: base === "gqa" ? JSON.parse(gqa) : null,
      lora: {seed: +seed, rank: +rank, type, b_std: +bstd, targets, size: +size, sha256: sha}, scale: +scale,
      prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated, text: r.text,
      top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))};
    process.stdout.write(JSON.stringify(c));' \
    "$TMP/c$i.raw.json" "$name" "$base" "$seed" "$rank" "$type" "$bstd" "$targets" "$scale" "$size" "$sha" \
    "$GQA_SYNTH" > "$TMP/c$i.json"
  files+=("$TMP/c$i.json")
  echo "[$i] $name: $prompt" >&2
  i=$((i + 1))
done
{
  printf '{"header":{"n_generated":%d,"topk":5,"generator":"tools/make_lora_fixture.sh","reference":"llama.cpp via node-llama-cpp with lora adapters, CPU, f16 KV cache, greedy"},\n"cases":[\n' "$N"
  first=1
  for f in "${files[@]}"; do
    if (( first )); then first=0; else printf ',\n'; fi
    cat "$f"
  done
  printf '\n]}\n'
} > "$OUT"
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$OUT"
echo "wrote $OUT" >&2
