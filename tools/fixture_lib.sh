# Sourced by the tools/make_*fixture*.sh scripts that write llama.cpp reference fixtures (tests/fixtures/ref_*.json,
# read by tests/llamacpp_fixture.h): the common set-up, one fixture entry for a `kvik synth` model, the file.

source "$(dirname "${BASH_SOURCE[0]}")/peer_lib.sh"

# Sets ROOT, KVIK (the first argument or build/kvik), PEER (KVIK_PEER_DIR; tools/peer_lib.sh says how to install it
# when it is missing), STORIES (the repository's models/stories260K.gguf) and a TMP directory removed at exit, and
# copies tools/llamacpp_ref_greedy.mjs next to the peer (ES modules resolve node-llama-cpp from the script's folder).
fixture_init() {
  ROOT="$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)"
  KVIK="${1:-$ROOT/build/kvik}"
  STORIES="$ROOT/models/stories260K.gguf"
  [[ -x "$KVIK" ]] || { echo "kvik binary not found: $KVIK (build it, or pass its path)" >&2; exit 1; }
  peer_require
  cp "$ROOT/tools/llamacpp_ref_greedy.mjs" "$PEER/"
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
}

# fixture_entry NAME MODEL PROMPT N TOPK SYNTH_JSON: llama.cpp's N greedy tokens and per-step top-TOPK probabilities
# (7 significant digits) on MODEL as one entry {name, synth, size, sha256, prompt, prompt_ids, generated, top}.
fixture_entry() {
  local name="$1" model="$2" prompt="$3" n="$4" topk="$5" synth="$6"
  node "$PEER/llamacpp_ref_greedy.mjs" "$model" "$prompt" "$n" "$topk" > "$TMP/raw.json"
  node -e '
    const fs = require("fs"); const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const [name, synth, size, sha] = process.argv.slice(2);
    const round = p => Number(p.toPrecision(7));
    process.stdout.write(JSON.stringify({name, synth: JSON.parse(synth), size: +size, sha256: sha,
      prompt: r.prompt, prompt_ids: r.prompt_ids, generated: r.generated,
      top: r.steps.map(s => s.top.map(([id, p]) => [id, round(p)]))}));' \
    "$TMP/raw.json" "$name" "$synth" "$(stat -c %s "$model")" "$(sha256sum "$model" | cut -d' ' -f1)"
}

# fixture_write OUT GENERATOR N TOPK ENTRY_FILE...: the fixture file, checked to parse.
fixture_write() {
  local out="$1" generator="$2" n="$3" topk="$4"
  shift 4
  {
    printf '{"header":{"n_generated":%d,"topk":%d,"generator":"%s","reference":"llama.cpp via node-llama-cpp, CPU, f16 KV cache, greedy"},\n"models":[\n' \
      "$n" "$topk" "$generator"
    local first=1 f
    for f in "$@"; do
      (( first )) || printf ',\n'
      first=0
      cat "$f"
    done
    printf '\n]}\n'
  } > "$out"
  node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$out"
  echo "wrote $out" >&2
}
