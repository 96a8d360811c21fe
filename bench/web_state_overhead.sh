#!/usr/bin/env bash
# What GET /v1/engine/state (the dashboard's KV block map) costs the engine: 64 concurrent streams through
# `kvik bench-serve` against `kvik serve`, with and without 64 dashboard-like pollers of the state endpoint (each
# once a second, the page's rate; POLL_INTERVAL_MS=0 polls back to back). Alternates plain / polled per round and
# prints JSON with the medians of the step time (ITL p50: one decode step of the batch), output tok/s, and the
# engine thread's cost per snapshot.
# Usage: bench/web_state_overhead.sh [MODEL.gguf] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-../shared/models/stories260K.gguf}
rounds=${2:-5}
pollers=${POLLERS:-64}
interval=${POLL_INTERVAL_MS:-1000}
prompts=${NUM_PROMPTS:-256}
[ -x build/kvik ] || scripts/build.sh >/dev/null
port=$((20000 + RANDOM % 20000))
url=http://127.0.0.1:$port
build/kvik serve "$model" --port "$port" --max-num-seqs 64 --disable-log-requests >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
run() {  # one bench-serve round: "itl_p50_ms output_tok_s"
  build/kvik bench-serve --base-url "$url" --num-prompts "$prompts" --max-concurrency 64 --input-len 32 \
    --output-len 128 --json 2>/dev/null |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
      console.log(j.itl.median_ms, j.output_throughput)})'
}
run >/dev/null  # warm-up
results=()
for r in $(seq "$rounds"); do
  read -r plain_itl plain_tok < <(run)
  out=$(mktemp)
  node bench/web_state_poll.mjs "$url" "$pollers" "$interval" >"$out" &
  poller=$!
  sleep 1
  read -r polled_itl polled_tok < <(run)
  kill -TERM $poller
  wait $poller || true
  poll=$(cat "$out")
  rm -f "$out"
  results+=("{\"round\":$r,\"plain_itl_ms\":$plain_itl,\"polled_itl_ms\":$polled_itl,\"plain_tok_s\":$plain_tok,\"polled_tok_s\":$polled_tok,\"poll\":$poll}")
  echo "round $r: ITL p50 $plain_itl ms plain, $polled_itl ms polled; $poll" >&2
done
printf '%s\n' "${results[@]}" | node -e '
const rounds=require("fs").readFileSync(0,"utf8").trim().split("\n").map(JSON.parse);
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const p=med(rounds.map(r=>r.plain_itl_ms)), q=med(rounds.map(r=>r.polled_itl_ms));
console.log(JSON.stringify({model:process.argv[1],streams:64,pollers:+process.argv[2],poll_interval_ms:+process.argv[3],
  rounds,plain_itl_ms:p,polled_itl_ms:q,step_time_change:q/p-1,
  plain_tok_s:med(rounds.map(r=>r.plain_tok_s)),polled_tok_s:med(rounds.map(r=>r.polled_tok_s)),
  snapshot_us_p50:med(rounds.map(r=>r.poll.snapshot_us_p50))},null,1));' "$model" "$pollers" "$interval"
