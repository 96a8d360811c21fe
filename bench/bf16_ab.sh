#!/usr/bin/env bash
# Packed BF16 before / after a change: two builds alternated ROUNDS times on (1) one packed matmul
# (bench_matmul_packed, ROWS x COLS, 1 / 8 / 64 tokens) and, when a model is given, (2) `kvik bench` on it (prefill
# INPUT_LEN tokens, OUTPUT_LEN decode steps, one prompt). Prints JSON: per build the medians (matmul us per token
# count; ttft ms, prefill and decode tok/s), the ratios before / after, and the load average at the start and end.
# Usage: bench/bf16_ab.sh BEFORE_BUILD_DIR [MODEL.gguf] [ROUNDS]   (env: ROWS, COLS, THREADS, INPUT_LEN, OUTPUT_LEN;
#        the after build is ./build; a build dir needs bench/bench_matmul_packed, and kvik when a model is given)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/bf16_ab.sh BEFORE_BUILD_DIR [MODEL.gguf] [ROUNDS]}
model=${2:-}
rounds=${3:-3}
threads=${THREADS:-2}
load0=$(cut -d' ' -f1 /proc/loadavg)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  for side in before after; do
    dir=$before
    [ "$side" = after ] && dir=build
    "$dir/bench/bench_matmul_packed" --rows "${ROWS:-4096}" --cols "${COLS:-2048}" --tokens 1,8,64 --types bf16 \
      --threads "$threads" >"$out/matmul_${side}_$r.json"
    if [ -n "$model" ]; then
      "$dir/kvik" bench -m "$model" --no-bandwidth --threads "$threads" --input-len "${INPUT_LEN:-512}" \
        --output-len "${OUTPUT_LEN:-64}" --num-prompts 1 --json 2>/dev/null | tail -1 >"$out/e2e_${side}_$r.json"
    fi
  done
done
load1=$(cut -d' ' -f1 /proc/loadavg)
node - "$out" "$rounds" "${INPUT_LEN:-512}" "$load0" "$load1" <<'EOF'
const fs = require("fs");
const [dir, rounds, inputLen, load0, load1] = process.argv.slice(2);
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const read = (f) => (fs.existsSync(`${dir}/${f}`) ? JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8")) : null);
const side = (name) => {
  const runs = [...Array(Number(rounds)).keys()].map((i) => i + 1);
  const mm = runs.map((r) => read(`matmul_${name}_${r}.json`));
  const res = { isa: mm[0].isa, matmul_us: {} };
  for (const row of mm[0].results)
    res.matmul_us[row.tokens] = median(mm.map((m) => m.results.find((x) => x.tokens === row.tokens).median_us));
  const e2e = runs.map((r) => read(`e2e_${name}_${r}.json`)).filter(Boolean);
  if (e2e.length) {
    res.ttft_ms = median(e2e.map((j) => j.ttft_ms.p50));
    res.prefill_tok_s = (Number(inputLen) * 1000) / res.ttft_ms;
    res.decode_tok_s = median(e2e.map((j) => j.decode_tok_s));
  }
  return res;
};
const b = side("before"), a = side("after");
const ratio = { matmul: {} };
for (const t of Object.keys(b.matmul_us)) ratio.matmul[t] = b.matmul_us[t] / a.matmul_us[t];
if (a.ttft_ms) ratio.prefill = a.prefill_tok_s / b.prefill_tok_s, ratio.decode = a.decode_tok_s / b.decode_tok_s;
console.log(JSON.stringify({ cpu: require("os").cpus()[0].model, rounds: Number(rounds), load_start: Number(load0),
  load_end: Number(load1), before: b, after: a, speedup: ratio }, null, 1));
EOF
