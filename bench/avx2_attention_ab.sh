#!/usr/bin/env bash
# Paged attention on the AVX2 table before / after a change: two builds alternated ROUNDS times on bench_attention
# (KVIK_ISA=avx2 unless ISA is set; 32 heads, 8 KV heads, d_h 64) for each KV cache type: decode (one query row over
# 8192 keys) and prefill (1024 rows over 1024 keys); and, when a model is given, E2E_ROUNDS runs each of `kvik bench`
# on it (one INPUT_LEN-token prompt, OUTPUT_LEN decode steps, --kv-cache-dtype E2E_KV). Prints JSON: per build the
# medians (attention ms; ttft ms, prefill and decode tok/s), the ratios before / after, and the load average at the
# start and end.
# Usage: bench/avx2_attention_ab.sh BEFORE_BUILD_DIR [MODEL.gguf] [ROUNDS]   (env: ISA, THREADS, KV_TYPES,
#        E2E_ROUNDS, E2E_KV, INPUT_LEN, OUTPUT_LEN; the after build is ./build; a build dir needs
#        bench/bench_attention, and kvik when a model is given)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/avx2_attention_ab.sh BEFORE_BUILD_DIR [MODEL.gguf] [ROUNDS]}
model=${2:-}
rounds=${3:-5}
threads=${THREADS:-2}
export KVIK_ISA=${ISA:-avx2}
kv_types=${KV_TYPES:-f16 q8_0 fp8}
input_len=${INPUT_LEN:-4096}
load0=$(cut -d' ' -f1 /proc/loadavg)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
dir_of() { if [ "$1" = after ]; then echo build; else echo "$before"; fi; }
for r in $(seq "$rounds"); do
  for side in before after; do
    for kv in $kv_types; do
      "$(dir_of $side)/bench/bench_attention" --kv "$kv" --keys 8192 --rows 1 --threads "$threads" \
        >"$out/attn_${side}_${kv}_decode_$r.json"
      "$(dir_of $side)/bench/bench_attention" --kv "$kv" --keys 1024 --rows 1024 --iters 3 --threads "$threads" \
        >"$out/attn_${side}_${kv}_prefill_$r.json"
    done
  done
done
if [ -n "$model" ]; then
  for r in $(seq "${E2E_ROUNDS:-1}"); do
    for side in before after; do
      "$(dir_of $side)/kvik" bench -m "$model" --kv-cache-dtype "${E2E_KV:-q8_0}" --no-bandwidth --threads "$threads" \
        --max-model-len $((input_len + 104)) --input-len "$input_len" --output-len "${OUTPUT_LEN:-32}" --num-prompts 1 \
        --json 2>/dev/null | tail -1 >"$out/e2e_${side}_$r.json"
    done
  done
fi
load1=$(cut -d' ' -f1 /proc/loadavg)
node - "$out" "$rounds" "${E2E_ROUNDS:-1}" "$input_len" "$kv_types" "$KVIK_ISA" "$load0" "$load1" <<'JS'
const fs = require("fs");
const [dir, rounds, e2eRounds, inputLen, kvTypes, isa, load0, load1] = process.argv.slice(2);
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const read = (f) => (fs.existsSync(`${dir}/${f}`) ? JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8")) : null);
const runs = (n) => [...Array(Number(n)).keys()].map((i) => i + 1);
const side = (name) => {
  const res = { attention_ms: {} };
  for (const kv of kvTypes.split(" "))
    for (const shape of ["decode", "prefill"])
      res.attention_ms[`${kv}_${shape}`] = median(runs(rounds).map((r) => read(`attn_${name}_${kv}_${shape}_${r}.json`).ms_median));
  const e2e = runs(e2eRounds).map((r) => read(`e2e_${name}_${r}.json`)).filter(Boolean);
  if (e2e.length) {
    res.ttft_ms = median(e2e.map((j) => j.ttft_ms.p50));
    res.prefill_tok_s = (Number(inputLen) * 1000) / res.ttft_ms;
    res.decode_tok_s = median(e2e.map((j) => j.decode_tok_s));
  }
  return res;
};
const b = side("before"), a = side("after");
const ratio = { attention: {} };
for (const k of Object.keys(b.attention_ms)) ratio.attention[k] = b.attention_ms[k] / a.attention_ms[k];
if (a.ttft_ms && b.ttft_ms) ratio.prefill = a.prefill_tok_s / b.prefill_tok_s, ratio.decode = a.decode_tok_s / b.decode_tok_s;
console.log(JSON.stringify({ cpu: require("os").cpus()[0].model, isa, rounds: Number(rounds), load_start: Number(load0),
  load_end: Number(load1), before: b, after: a, speedup: ratio }, null, 1));
JS
