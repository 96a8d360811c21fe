#!/usr/bin/env bash
# Re-creates the llama.cpp reference fixtures that tests/test_llamacpp_parity.cpp checks kvik against:
#   tests/fixtures/ref_stories260k.json  stories260K: 14 prompts, 64 greedy tokens each, top-5 probabilities per step
#   tests/fixtures/ref_synth.json        random-weight models written by `kvik synth` (tokenizer of stories260K):
#                                        the synth options, the file's byte size and sha256, a short prompt and
#                                        256 greedy tokens with the top-2 probabilities per step
# llama.cpp runs through node-llama-cpp (the peer in $KVIK_PEER_DIR: tools/peer_lib.sh), driven by
# tools/llamacpp_ref_greedy.mjs (greedy with the top-k probabilities per step, through EOS).
# Usage (from the repository root, after building kvik):
#   tools/make_ref_fixtures.sh [KVIK_BINARY]        default binary: build/kvik
# Environment: KVIK_PEER_DIR (the llama.cpp peer, tools/peer_lib.sh),
#   KVIK_REF_ONLY=stories|synth to re-create only one of the two fixtures (default: both).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/fixture_lib.sh"
fixture_init "${1:-}"  # also copies tools/llamacpp_ref_greedy.mjs (greedy through EOS) next to the peer
OUT="$ROOT/tests/fixtures"
ONLY="${KVIK_REF_ONLY:-}"
[[ -z "$ONLY" || "$ONLY" == stories || "$ONLY" == synth ]] || { echo "KVIK_REF_ONLY must be stories or synth" >&2; exit 1; }
REF="$PEER/llamacpp_ref_greedy.mjs"

# Rounds every probability to 7 significant digits and keeps only what the tests read.
# argv: kind (stories|synth) ref.json [extra.json]  -> one case object on stdout
cat > "$TMP/post.mjs" <<'EOF'
import fs from "node:fs";
const [kind, refPath, extraPath] = process.argv.slice(2);
const r = JSON.parse(fs.readFileSync(refPath, "utf8"));
const round = p => Number(p.toPrecision(7));
const c = {prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated, text: r.text,
           top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))};
const extra = extraPath ? JSON.parse(fs.readFileSync(extraPath, "utf8")) : {};
process.stdout.write(JSON.stringify({...extra, ...c}));
EOF

# Writes {"header": ..., "<key>": [cases...]} with one case per line (readable diffs).
write_fixture() {  # out header_json key case_files...
  local out="$1" header="$2" key="$3"; shift 3
  {
    printf '{"header":%s,\n"%s":[\n' "$header" "$key"
    local first=1
    for f in "$@"; do
      if (( first )); then first=0; else printf ',\n'; fi
      cat "$f"
    done
    printf '\n]}\n'
  } > "$out"
  node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$out"  # validate
}

# ---- stories260K ---------------------------------------------------------------------------------------------
if [[ "$ONLY" != synth ]]; then
STORY_PROMPTS=(
  "Once upon a time"
  "Lily and Tom"
  "The cat"
  "One day, a little girl named"
  "Det var en gång en liten flicka"
  "Egyszer volt, hol nem volt"
  " "
  "!?..."
  "Tom had a red ball. He liked to play with it in the park every day."
  "The sun was shining"
  "\"Mom, look!\" said"
  "123 apples"
  "Max the dog was sad because"
  "Sara wanted to bake a cake"
)
N_STORY=64
files=()
i=0
for p in "${STORY_PROMPTS[@]}"; do
  node "$REF" "$STORIES" "$p" "$N_STORY" 5 > "$TMP/s$i.raw.json"
  node "$TMP/post.mjs" stories "$TMP/s$i.raw.json" > "$TMP/s$i.json"
  files+=("$TMP/s$i.json")
  echo "stories260K [$i] ${p@Q}: done" >&2
  i=$((i + 1))
done
STORIES_SHA=$(sha256sum "$STORIES" | cut -d' ' -f1)
write_fixture "$OUT/ref_stories260k.json" \
  "{\"model\":\"stories260K.gguf\",\"model_sha256\":\"$STORIES_SHA\",\"n_generated\":$N_STORY,\"topk\":5,\"generator\":\"tools/make_ref_fixtures.sh\",\"reference\":\"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy\"}" \
  cases "${files[@]}"
echo "wrote $OUT/ref_stories260k.json" >&2
fi

# ---- random-weight models ------------------------------------------------------------------------------------
if [[ "$ONLY" != stories ]]; then
# name | type | dim | layers | heads | kv_heads | head_dim (0 = dim/heads) | ff | seed | prompt
SYNTH_MODELS=(
  "f32_gqa_hd32|f32|256|2|8|2|0|512|11|Once upon a time"
  "f32_mqa_hd64|f32|256|3|4|1|0|768|12|The cat sat"
  "f16_gqa_hd64|f16|256|2|4|2|0|512|13|Lily and Tom"
  "f16_mqa_hd128|f16|256|2|2|1|128|512|14|One day"
  "q8_0_gqa_hd32|q8_0|256|3|8|4|0|768|15|Once upon a time"
  "q8_0_mqa_hd128|q8_0|512|2|4|1|0|512|16|The dog"
  "q4_0_gqa_hd128|q4_0|512|2|4|2|0|768|17|Once upon a time"
  "q4_0_mqa_hd32|q4_0|256|2|8|1|0|512|18|A bird"
)
N_SYNTH=256
VOCAB=512
# `kvik synth --output-scale` (recorded per model; the test passes it back to synth_llama_gguf). Kept at 1: a larger
# scale only multiplies the logits (2 gave llama.cpp's median top-1 probability 0.59-0.78 instead of 0.24-0.36, but
# the very same 256 greedy ids and top-2 logit gaps exactly ×2 on all 8 models), so it cannot change an argmax and
# the teacher-forced agreement stayed the same, position for position (tools/README.md).
OUTPUT_SCALE=1
files=()
i=0
for spec in "${SYNTH_MODELS[@]}"; do
  IFS='|' read -r name type dim layers heads kvh hd ff seed prompt <<< "$spec"
  model="$TMP/$name.gguf"
  "$KVIK" synth "$model" --dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" --head-dim "$hd" \
    --ff "$ff" --vocab "$VOCAB" --type "$type" --seed "$seed" --output-scale "$OUTPUT_SCALE" --tokenizer-from "$STORIES" > /dev/null 2>&1
  size=$(stat -c %s "$model")
  sha=$(sha256sum "$model" | cut -d' ' -f1)
  cat > "$TMP/m$i.extra.json" <<EOF
{"name":"$name","synth":{"type":"$type","dim":$dim,"layers":$layers,"heads":$heads,"kv_heads":$kvh,"head_dim":$hd,"ff":$ff,"vocab":$VOCAB,"seed":$seed,"output_scale":$OUTPUT_SCALE,"tokenizer_from":"stories260K.gguf"},"size":$size,"sha256":"$sha"}
EOF
  node "$REF" "$model" "$prompt" "$N_SYNTH" 2 > "$TMP/m$i.raw.json"
  node "$TMP/post.mjs" synth "$TMP/m$i.raw.json" "$TMP/m$i.extra.json" > "$TMP/m$i.json"
  files+=("$TMP/m$i.json")
  echo "synth [$i] $name: done" >&2
  i=$((i + 1))
done
write_fixture "$OUT/ref_synth.json" \
  "{\"n_generated\":$N_SYNTH,\"topk\":2,\"generator\":\"tools/make_ref_fixtures.sh\",\"reference\":\"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy\"}" \
  models "${files[@]}"
echo "wrote $OUT/ref_synth.json" >&2
fi
