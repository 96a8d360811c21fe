#!/usr/bin/env bash
# kvik perplexity vs llama.cpp on the same model, text, context, batch and threads: tokens/s through the model
# (chunks × ctx over the evaluation time, model load and tokenization excluded on both sides), run alternately for
# ROUNDS rounds; prints one JSON object with medians and the kvik/llama.cpp ratio. llama.cpp side: the native
# llama-perplexity of ../shared/peer/build-native.sh when it is built ($KVIK_PEER_DIR/llama.cpp/build/bin; chunks
# × n_ctx over the time between its "calculating perplexity" and "Final estimate" log lines, and its PPL), otherwise bench/perplexity_llamacpp.mjs through the node-llama-cpp peer
# (the same windows prefilled, BATCH/CTX sequences at a time, no scoring).
#
# Usage: bench/perplexity.sh [MODEL.gguf] [TEXT]
#   default MODEL: a random-weight F16 Llama written by `kvik synth` (d 512, 8 layers, d_ff 1408, stories260K's
#   tokenizer); default TEXT: tests/data/stories.txt four times over.
# Environment: KVIK (build/kvik), ROUNDS (5), CTX (128), BATCH (512), THREADS (nproc), KVIK_PEER_DIR, KVIK_SHARED_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVIK="${KVIK:-$ROOT/build/kvik}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
ROUNDS="${ROUNDS:-5}" CTX="${CTX:-128}" BATCH="${BATCH:-512}" THREADS="${THREADS:-$(nproc)}"
LPPL="$PEER/llama.cpp/build/bin/llama-perplexity"
[[ -x "$KVIK" ]] || { echo "kvik binary not found: $KVIK" >&2; exit 1; }
if [[ -x "$LPPL" ]]; then METHOD="native llama-perplexity"; else
  METHOD="node-llama-cpp prefill of the same windows (bench/perplexity_llamacpp.mjs)"
  [[ -f "$PEER/llamacpp-ref.mjs" ]] || bash "$SHARED/peer/setup.sh" >&2
  cp "$ROOT/bench/perplexity_llamacpp.mjs" "$PEER/"
fi
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
MODEL="${1:-}"
if [[ -z "$MODEL" ]]; then
  MODEL="$TMP/synth_f16.gguf"
  "$KVIK" synth "$MODEL" --dim 512 --layers 8 --heads 8 --kv-heads 8 --ff 1408 --vocab 512 --type f16 --seed 5 \
    --tokenizer-from "$SHARED/models/stories260K.gguf" 2>/dev/null
fi
TEXT="${2:-}"
if [[ -z "$TEXT" ]]; then
  TEXT="$TMP/text.txt"
  for _ in 1 2 3 4; do cat "$ROOT/tests/data/stories.txt"; done > "$TEXT"
fi
kvik_run() {  # its own "N tokens/s through the model" (evaluation only) and the PPL of --json
  local out ppl
  out=$(nice "$KVIK" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" -b "$BATCH" -t "$THREADS" 2>/dev/null)
  ppl=$(echo "$out" | sed -n 's/^PPL = \([0-9.]*\).*/\1/p')
  echo "{\"ppl\":$ppl,\"tok_s\":$(echo "$out" | sed -n 's/.* s, \([0-9]*\) tokens\/s.*/\1/p')}"
}
llama_run() {
  if [[ -x "$LPPL" ]]; then
    local out
    out=$(nice "$LPPL" -m "$MODEL" -f "$TEXT" -c "$CTX" -b "$BATCH" -t "$THREADS" --no-warmup 2>&1)
    # Its log lines carry a time stamp (M.SS.mmm.uuu): evaluation runs from "calculating perplexity over N chunks,
    # n_ctx=C" to "Final estimate" (tokenization and model load before it, as kvik's own figure excludes them).
    echo "$out" | node -e '
      const out = require("fs").readFileSync(0, "utf8");
      const ts = (re) => { const m = out.match(re); if (!m) throw new Error("llama-perplexity output lacks " + re);
                           const [mi, s, ms, us] = m[1].split(".").map(Number);
                           return mi * 60 + s + ms / 1e3 + us / 1e6; };
      const head = out.match(/calculating perplexity over (\d+) chunks, n_ctx=(\d+)/);
      const t0 = ts(/(\d+\.\d+\.\d+\.\d+) I perplexity: calculating/),
            t1 = ts(/(\d+\.\d+\.\d+\.\d+) I Final estimate/);
      console.log(JSON.stringify({ ppl: +out.match(/Final estimate: PPL = ([0-9.]+)/)[1],
                                   tok_s: (head[1] * head[2]) / (t1 - t0) }));'
  else
    (cd "$PEER" && nice node perplexity_llamacpp.mjs "$MODEL" "$TEXT" "$CTX" "$BATCH" "$THREADS" 2>/dev/null | tail -n 1) |
      sed 's/"chunks":[0-9]*/"ppl":null/'
  fi
}
echo "model $MODEL, ctx $CTX, batch $BATCH, $THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then kvik_run >> "$TMP/kvik"; llama_run >> "$TMP/llama"; else llama_run >> "$TMP/llama"; kvik_run >> "$TMP/kvik"; fi
done
node -e '
const fs = require("fs");
const read = f => fs.readFileSync(f, "utf8").trim().split("\n").map(l => JSON.parse(l));
const med = a => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const k = read(process.argv[1]), l = read(process.argv[2]);
const kt = med(k.map(x => x.tok_s)), lt = med(l.map(x => x.tok_s));
console.log(JSON.stringify({cpu: process.argv[3], model: process.argv[4], ctx: +process.argv[5], threads: +process.argv[6],
  rounds: k.length, kvik: {tok_s: kt, ppl: k[0].ppl, runs: k.map(x => x.tok_s)},
  llama_cpp: {method: process.argv[7], tok_s: lt, ppl: l[0].ppl, runs: l.map(x => x.tok_s)}, ratio_tok_s: kt / lt,
  ppl_rel_diff: l[0].ppl ? k[0].ppl / l[0].ppl - 1 : null}));
' "$TMP/kvik" "$TMP/llama" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$(basename "$MODEL")" "$CTX" "$THREADS" "$METHOD"
