#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_synth_kquants.json, llama.cpp's greedy tokens (and top-2 probabilities) on
# random-weight K-quant models written by `kvik synth` (Q4_K, Q5_K, Q6_K and the Q4_K_M mix), which
# tests/test_kquant_parity.cpp compares kvik with, teacher-forced. Same recipe as tools/make_ref_fixtures.sh.
# Usage (from the repository root, after building kvik): tools/make_kquant_ref_fixture.sh [KVIK_BINARY] [quants]
# With `quants`: tests/fixtures/ref_synth_quants.json instead, models of the other types kvik quantize writes
# (Q4_1, Q5_0, Q5_1, IQ4_NL): written by `kvik synth --type f32`, then `kvik quantize` (type field "f32>MIX").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
STORIES="$SHARED/models/stories260K.gguf"
OUT="$ROOT/tests/fixtures/ref_synth_kquants.json"
[[ "${2:-}" == quants ]] && OUT="$ROOT/tests/fixtures/ref_synth_quants.json"
[[ -f "$PEER/llamacpp-ref.mjs" ]] || bash "$SHARED/peer/setup.sh"
cp "$ROOT/tools/llamacpp_ref_greedy.mjs" "$PEER/"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
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
{
  printf '{"header":{"n_generated":%d,"topk":2,"generator":"tools/make_kquant_ref_fixture.sh","reference":"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy"},\n"models":[\n' $N
  first=1
  for spec in "${MODELS[@]}"; do
    IFS='|' read -r name type dim layers heads kvh hd ff seed prompt <<< "$spec"
    model="$TMP/$name.gguf"
    "$KVIK" synth "$model" --dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" --head-dim "$hd" \
      --ff "$ff" --vocab 512 --type "${type%%>*}" --seed "$seed" --tokenizer-from "$STORIES" > /dev/null 2>&1
    if [[ "$type" == *">"* ]]; then "$KVIK" quantize --quiet "$model" "$model.q" "${type#*>}" && mv "$model.q" "$model"; fi
    node "$PEER/llamacpp_ref_greedy.mjs" "$model" "$prompt" $N 2 > "$TMP/raw.json"
    (( first )) || printf ',\n'
    first=0
    node -e '
      const fs = require("fs"); const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
      const [name, type, dim, layers, heads, kvh, hd, ff, seed, size, sha] = process.argv.slice(2);
      const round = p => Number(p.toPrecision(7));
      process.stdout.write(JSON.stringify({name, synth: {type, dim: +dim, layers: +layers, heads: +heads, kv_heads: +kvh,
        head_dim: +hd, ff: +ff, vocab: 512, seed: +seed, tokenizer_from: "stories260K.gguf"}, size: +size, sha256: sha,
        prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated,
        top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))}));' \
      "$TMP/raw.json" "$name" "$type" "$dim" "$layers" "$heads" "$kvh" "$hd" "$ff" "$seed" \
      "$(stat -c %s "$model")" "$(sha256sum "$model" | cut -d' ' -f1)"
    echo "$name: done" >&2
  done
  printf '\n]}\n'
} > "$OUT"
node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$OUT"
echo "wrote $OUT" >&2
