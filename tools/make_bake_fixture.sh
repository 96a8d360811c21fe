#!/usr/bin/env bash
# Re-creates tests/fixtures/ref_baked_ablation.json, which tests/test_interp.cpp checks kvik against: stories260K
# with the direction tests/fixtures/loop_direction.json ablated from its weights by `kvik bake-ablation` (all
# layers, f32 as the source), loaded by llama.cpp (node-llama-cpp, the peer in $KVIK_PEER_DIR: tools/peer_lib.sh): 4 prompts, 32 greedy
# tokens each (f16 KV cache, through EOS), plus the baked file's sha256 so the test knows it baked the same bytes.
# Usage (from the repository root, after building kvik): tools/make_bake_fixture.sh [KVIK_BINARY]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
source "$ROOT/tools/peer_lib.sh"
peer_require
cp "$ROOT/tools/llamacpp_ref_greedy.mjs" "$PEER/"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$KVIK" bake-ablation --model "$ROOT/models/stories260K.gguf" --direction "$ROOT/tests/fixtures/loop_direction.json" \
  --out "$TMP/baked.gguf" >&2
SHA=$(sha256sum "$TMP/baked.gguf" | cut -d' ' -f1)
PROMPTS=("Once upon a time" "Tim and Sue" "The sun was shining" "Ben liked to")
{
  printf '{"header":{"model":"stories260K.gguf baked with loop_direction.json, all layers","baked_sha256":"%s",' "$SHA"
  printf '"n_generated":32,"generator":"tools/make_bake_fixture.sh","reference":"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy"},\n"cases":[\n'
  first=1
  for p in "${PROMPTS[@]}"; do
    (( first )) || printf ',\n'
    first=0
    node "$PEER/llamacpp_ref_greedy.mjs" "$TMP/baked.gguf" "$p" 32 1 |
      node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
               process.stdout.write(JSON.stringify({prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated, text: r.text}))'
  done
  printf '\n]}\n'
} > "$ROOT/tests/fixtures/ref_baked_ablation.json"
echo "wrote tests/fixtures/ref_baked_ablation.json" >&2
