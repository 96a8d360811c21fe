#!/usr/bin/env bash
# kvik serve vs llama.cpp's llama-server on the same GGUF, threads and machine, both driven by `kvik bench-serve`
# (OpenAI API, streamed completions of random words, ignore_eos) at each concurrency in CONCS. Prints output tok/s
# and p99 TTFT side by side with kvik/llama.cpp ratios. Each server is started for one concurrency and stopped
# after it; llama-server gets --parallel C slots and a context of C x CTX tokens (its KV for C sequences), kvik
# --max-num-seqs C and --max-model-len CTX.
#
# Usage: bench/serve_compare_llamacpp.sh MODEL.gguf [THREADS]
# Environment: KVIK (build/kvik), LLAMA_SERVER (/tmp/kvik-peer/llama.cpp/build/bin/llama-server, native build:
#              ../shared/peer/build-native.sh llama-server), CONCS ("16 64 256"), PROMPTS_PER_CONC (1: num-prompts =
#              C x this), IN (32 words of prompt), OUT (32 tokens out), CTX (256: a 32-word prompt is ~100
#              tokens with a 512-token vocabulary; kvik refuses prompt + max_tokens > --max-model-len with a 400).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: bench/serve_compare_llamacpp.sh MODEL.gguf [THREADS]}"
THREADS="${2:-2}"
KVIK="${KVIK:-$ROOT/build/kvik}"
LLAMA_SERVER="${LLAMA_SERVER:-/tmp/kvik-peer/llama.cpp/build/bin/llama-server}"
CONCS="${CONCS:-16 64 256}" PPC="${PROMPTS_PER_CONC:-1}" IN="${IN:-32}" OUT="${OUT:-32}" CTX="${CTX:-256}"
[[ -x "$LLAMA_SERVER" ]] || { echo "no llama-server at $LLAMA_SERVER" >&2; exit 1; }
TMP="$(mktemp -d)"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null; [[ -n "${KEEP:-}" ]] || rm -rf "$TMP"' EXIT

wait_healthy() {  # port log
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "server on port $1 did not become healthy; the end of its log ($2):" >&2; tail -n 20 "$2" >&2; return 1
}
free_port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => {
                console.log(s.address().port); s.close(); })'; }
bench() {  # port conc out.json (a run where no request completed still leaves its JSON and the comparison goes on)
  nice "$KVIK" bench-serve --base-url "http://127.0.0.1:$1" --num-prompts $(($2 * PPC)) --max-concurrency "$2" \
    --request-rate inf --input-len "$IN" --output-len "$OUT" --json > "$3" || true
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $THREADS threads each; load: $(uptime | sed 's/.*load average: //')" >&2
for c in $CONCS; do
  port=$(free_port)
  "$KVIK" serve "$MODEL" --port "$port" --threads "$THREADS" --max-num-seqs "$c" --max-model-len "$CTX" \
    --disable-log-requests > "$TMP/kvik.$c.log" 2>&1 & pid=$!
  wait_healthy "$port" "$TMP/kvik.$c.log"; bench "$port" "$c" "$TMP/kvik.$c.json"; kill "$pid"; wait "$pid" || true; pid=""
  port=$(free_port)
  "$LLAMA_SERVER" -m "$MODEL" --port "$port" -t "$THREADS" -tb "$THREADS" -np "$c" -c $((c * CTX)) \
    > "$TMP/llama.$c.log" 2>&1 & pid=$!
  wait_healthy "$port" "$TMP/llama.$c.log"; bench "$port" "$c" "$TMP/llama.$c.json"; kill "$pid"; wait "$pid" || true; pid=""
  echo "concurrency $c done" >&2
done

printf '%-12s %12s %12s %8s %16s %16s %8s\n' concurrency kvik_tok/s llama_tok/s ratio kvik_p99_ttft_ms llama_p99_ttft_ms ratio
for c in $CONCS; do
  k="$TMP/kvik.$c.json" l="$TMP/llama.$c.json"
  node -e '
    const [k, l, c] = [require(process.argv[1]), require(process.argv[2]), process.argv[3]];
    const f = (x, d = 1) => x.toFixed(d);
    console.log([c.padEnd(12), f(k.output_throughput).padStart(12), f(l.output_throughput).padStart(12),
      f(k.output_throughput / l.output_throughput, 2).padStart(8), f(k.ttft.p99_ms, 0).padStart(16),
      f(l.ttft.p99_ms, 0).padStart(16), f(k.ttft.p99_ms / l.ttft.p99_ms, 2).padStart(8),
      `failed kvik ${k.failed} llama ${l.failed}`].join(" "));' "$k" "$l" "$c"
done
