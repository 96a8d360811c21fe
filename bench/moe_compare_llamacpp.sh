#!/usr/bin/env bash
# kvik vs llama.cpp on a Qwen3-30B-A3B-shaped mixture of experts, batch 1: prefill P tokens and decode G tokens.
# The model is all 48 blocks of Qwen3-30B-A3B's shape (d 2048, 32 query / 4 KV heads of d_h 128, experts of width
# 768, 8 routed per token, vocab 151 936, Q4_K) with the experts cut from 128 to E (default 16) so that it fits in
# the memory of a shared machine: each token still reads 8 experts per block, the bytes per decode token are the
# real model's (~1.7 GB at Q4_K); the file is ~2.9 GB at E=16 (E=32: ~5 GB). Written once by `kvik synth` with
# random weights (tokenizer of stories260K padded to the vocabulary) at $MODEL.
# The engines run alternately (A B, then B A, ...) for ROUNDS rounds; one JSON line per run on stderr, and a JSON
# summary of the medians and the kvik / llama.cpp ratios on stdout.
# Usage: bench/moe_compare_llamacpp.sh [THREADS]
# Environment: KVIK (build/kvik), MODEL (/tmp/kvik_qwen3moe_a3b_e$E.gguf), E (16), ROUNDS (3), P (256), G (64),
#              KVIK_PEER_DIR (/tmp/kvik-peer), KVIK_SHARED_DIR (../shared).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${1:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
E="${E:-16}" ROUNDS="${ROUNDS:-3}" P="${P:-256}" G="${G:-64}"
MODEL="${MODEL:-/tmp/kvik_qwen3moe_a3b_e$E.gguf}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
[[ -x "$KVIK" ]] || { echo "kvik binary not found: $KVIK" >&2; exit 1; }
[[ -f "$PEER/llamacpp-ref.mjs" ]] || bash "$SHARED/peer/setup.sh" >&2
if [[ ! -f "$MODEL" ]]; then
  echo "writing $MODEL (Qwen3-30B-A3B shape, $E experts, Q4_K; several minutes)" >&2
  "$KVIK" synth "$MODEL" --arch qwen3moe --dim 2048 --layers 48 --heads 32 --kv-heads 4 --head-dim 128 --ff 6144 \
    --experts "$E" --experts-used 8 --expert-ff 768 --vocab 151936 --context 40960 --type q4_k --seed 30 \
    --tokenizer-from "$SHARED/models/stories260K.gguf" >&2
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "model $MODEL, $THREADS threads, $ROUNDS rounds, P $P, G $G; load: $(uptime | sed 's/.*load average: //')" >&2

kvik_run() {
  "$KVIK" bench -m "$MODEL" --no-bandwidth --threads "$THREADS" --max-model-len $((P + G + 64)) --num-prompts 1 \
    --input-len "$P" --output-len "$G" --json 2>/dev/null | tail -n 1
}
llama_run() { (cd "$PEER" && node llamacpp-ref.mjs bench "$MODEL" "$P" "$G" "$THREADS" 2>/dev/null | tail -n 1); }

for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="kvik llama"; else order="llama kvik"; fi
  for e in $order; do
    "${e}_run" > "$OUT/$e.$r.json"
    echo "{\"round\":$r,\"engine\":\"$e\",\"result\":$(cat "$OUT/$e.$r.json")}" >&2
  done
done

node - "$OUT" "$ROUNDS" "$P" "$MODEL" "$E" "$THREADS" <<'JS'
const fs = require("fs");
const [out, rounds, P, model, E, threads] = process.argv.slice(2);
const median = a => { const s = [...a].sort((x, y) => x - y), m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const kp = [], kd = [], lp = [], ld = [];
for (let r = 1; r <= +rounds; r++) {
  const k = JSON.parse(fs.readFileSync(`${out}/kvik.${r}.json`, "utf8")), l = JSON.parse(fs.readFileSync(`${out}/llama.${r}.json`, "utf8"));
  kp.push(+P / (k.ttft_ms.p50 / 1000)); kd.push(1000 / k.itl_ms.p50);
  lp.push(l.prefill_tok_s); ld.push(l.decode_tok_s);
}
const res = {model, experts: +E, experts_used: 8, threads: +threads, rounds: +rounds, prompt_tokens: +P,
  prefill_tok_s: {kvik: median(kp), llama_cpp: median(lp), ratio: median(kp) / median(lp), kvik_runs: kp, llama_cpp_runs: lp},
  decode_tok_s: {kvik: median(kd), llama_cpp: median(ld), ratio: median(kd) / median(ld), kvik_runs: kd, llama_cpp_runs: ld}};
console.log(JSON.stringify(res, null, 1));
JS
