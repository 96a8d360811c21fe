#!/usr/bin/env bash
# `kvik serve` alone vs `kvik serve --data-parallel-size DP` on the same model and the same total --threads, both
# driven by `kvik bench-serve` (streamed, ignore_eos) on two datasets: `random` (no shared prefixes: load routing)
# and `synthetic-chat` (a shared system prompt and earlier turns: prefix routing). Prints one JSON object per run
# (setup, dataset, output tok/s, median and p99 TTFT, median ITL, failures, and for DP the requests routed by prefix
# and by load per replica).
#
# Usage: bench/serve_data_parallel.sh [MODEL.gguf] [THREADS] [DP]
# Environment: KVIK (build/kvik), PROMPTS (128), CONC (32), IN (64 words), OUT (64 tokens).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:-$ROOT/../shared/models/stories260K.gguf}"
THREADS="${2:-2}" DP="${3:-2}"
KVIK="${KVIK:-$ROOT/build/kvik}"
PROMPTS="${PROMPTS:-128}" CONC="${CONC:-32}" IN="${IN:-64}" OUT="${OUT:-64}"
TMP="$(mktemp -d)"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; rm -rf "$TMP"' EXIT

free_port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => {
                console.log(s.address().port); s.close(); })'; }
wait_healthy() {  # port log
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "server on port $1 did not become healthy; the end of its log ($2):" >&2; tail -n 20 "$2" >&2; return 1
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); --threads $THREADS in all; load: $(uptime | sed 's/.*load average: //')" >&2
for setup in plain dp; do
  for dataset in random synthetic-chat; do
    port=$(free_port)
    extra=()
    [[ $setup == dp ]] && extra=(--data-parallel-size "$DP")
    "$KVIK" serve "$MODEL" --port "$port" --threads "$THREADS" --max-num-seqs "$CONC" --disable-log-requests \
      "${extra[@]}" > "$TMP/serve.log" 2>&1 & pid=$!
    wait_healthy "$port" "$TMP/serve.log"
    "$KVIK" bench-serve --base-url "http://127.0.0.1:$port" --num-prompts "$PROMPTS" --max-concurrency "$CONC" \
      --dataset "$dataset" --input-len "$IN" --output-len "$OUT" --json > "$TMP/bench.json" || true
    curl -sf "http://127.0.0.1:$port/metrics" > "$TMP/metrics.txt" || true
    kill "$pid"; wait "$pid" || true; pid=""
    node -e '
      const fs = require("fs");
      const [b, m, setup, dataset] = [JSON.parse(fs.readFileSync(process.argv[1])), fs.readFileSync(process.argv[2], "utf8"), process.argv[3], process.argv[4]];
      const routed = {};
      for (const [, r, why, v] of m.matchAll(/^kvik_dp_requests_routed_total\{replica="(\d+)",reason="(\w+)"\} (\d+)$/gm)) routed[`${r}_${why}`] = Number(v);
      console.log(JSON.stringify({ setup, dataset, output_tok_s: +b.output_throughput.toFixed(1), ttft_median_ms: +b.ttft.median_ms.toFixed(1),
        ttft_p99_ms: +b.ttft.p99_ms.toFixed(1), itl_median_ms: +b.itl.median_ms.toFixed(2), failed: b.failed, ...(setup === "dp" ? { routed } : {}) }));
    ' "$TMP/bench.json" "$TMP/metrics.txt" "$setup" "$dataset"
  done
done
