#!/usr/bin/env bash
# Re-creates tests/fixtures/perplexity_llamacpp.json, the numbers tests/test_perplexity.cpp holds kvik perplexity
# to. llama.cpp computes them through node-llama-cpp (the peer in $KVIK_PEER_DIR, tools/peer_lib.sh: CPU, f16 KV cache),
# driven by tools/llamacpp_perplexity_ref.mjs, which does llama-perplexity's computation (BOS-first windows of
# CTX tokens, second half scored, llama.cpp's own tokenization and next-token probabilities) because the native
# llama-perplexity build was not available when the fixture was made. Text: tests/data/stories.txt, CTX 128, for
#   stories260K.gguf (F32)                 PPL, +/-
#   a `kvik synth` model (F32, seed 21)    PPL, +/-
#   the same synth model as Q8_0           PPL and the --kl-divergence figures against the F32 one
# Usage (repository root, after building kvik): tools/make_perplexity_fixture.sh [KVIK_BINARY]
# Environment: KVIK_PEER_DIR (the llama.cpp peer, tools/peer_lib.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${1:-$ROOT/build/kvik}"
source "$ROOT/tools/peer_lib.sh"
peer_require
STORIES="$ROOT/models/stories260K.gguf"
TEXT="$ROOT/tests/data/stories.txt"
CTX=128
cp "$ROOT/tools/llamacpp_perplexity_ref.mjs" "$PEER/"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
SYNTH=(--dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --seed 21 --output-scale 1
       --tokenizer-from "$STORIES")
"$KVIK" synth "$TMP/synth_f32.gguf" "${SYNTH[@]}" --type f32 2>/dev/null
"$KVIK" synth "$TMP/synth_q8_0.gguf" "${SYNTH[@]}" --type q8_0 2>/dev/null
ref() { (cd "$PEER" && nice node llamacpp_perplexity_ref.mjs "$@" 2>/dev/null | tail -n 1); }
S="$(ref "$STORIES" "$TEXT" $CTX)"
F="$(ref "$TMP/synth_f32.gguf" "$TEXT" $CTX)"
Q="$(ref "$TMP/synth_q8_0.gguf" "$TEXT" $CTX "$TMP/synth_f32.gguf")"
sha() { sha256sum "$1" | cut -d' ' -f1; }
cat > "$ROOT/tests/fixtures/perplexity_llamacpp.json" <<JSON
{"generator": "tools/make_perplexity_fixture.sh: llama.cpp through node-llama-cpp $(node -p "require('$PEER/node_modules/node-llama-cpp/package.json').version") (CPU, f16 KV cache), llama-perplexity's method in tools/llamacpp_perplexity_ref.mjs, text tests/data/stories.txt",
 "ctx": $CTX,
 "stories260k": $S,
 "synth": {"options": {"dim": 128, "layers": 2, "heads": 4, "kv_heads": 2, "ff": 256, "vocab": 512, "seed": 21, "output_scale": 1},
           "sha256_f32": "$(sha "$TMP/synth_f32.gguf")", "sha256_q8_0": "$(sha "$TMP/synth_q8_0.gguf")",
           "f32": $F,
           "q8_0_vs_f32": $Q}}
JSON
cat "$ROOT/tests/fixtures/perplexity_llamacpp.json"
