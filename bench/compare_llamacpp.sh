#!/usr/bin/env bash
# kvik vs llama.cpp on the same GGUF, threads and machine. Builds nothing from llama.cpp: the peer (node-llama-cpp's
# prebuilt llama.cpp) is installed by ../shared/peer/setup.sh. The engines run alternately (A B A B ...) for ROUNDS
# rounds so that drift in machine load hits both; it prints JSON: the CPU (and its AMX flags), medians and
# kvik / llama.cpp ratios for
#   prefill   P tokens at batch 1 (tokens/s)
#   decode    G tokens at batch 1 after the P-token prompt (tokens/s)
#   batch     output tokens/s with NSEQ parallel sequences (BP-token prompts, BG new tokens each)
# kvik side: `kvik bench --json` (prefill = P / TTFT, decode = 1 / median inter-token latency).
# llama.cpp side: llamacpp-ref.mjs bench / bench-batch.
#
# Usage: bench/compare_llamacpp.sh MODEL.gguf [THREADS]
# Environment: KVIK (default build/kvik), ROUNDS (5), P (512), G (128), NSEQ (16), BP (64), BG (64),
#              KVIK_PEER_DIR (/tmp/kvik-peer), KVIK_SHARED_DIR (../shared).
# Time: about ROUNDS × (2 single-sequence runs + 2 batch runs); on a 2-core machine with a 1B Q8_0 model and the
# defaults, roughly 1.5–2 min per round. Run it on a quiet machine (check `uptime`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: bench/compare_llamacpp.sh MODEL.gguf [THREADS]}"
THREADS="${2:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-5}" P="${P:-512}" G="${G:-128}" NSEQ="${NSEQ:-16}" BP="${BP:-64}" BG="${BG:-64}"
PEER="${KVIK_PEER_DIR:-/tmp/kvik-peer}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"

[[ -f "$MODEL" ]] || { echo "no such model: $MODEL" >&2; exit 1; }
MODEL="$(realpath "$MODEL")"  # the peer runs from its own directory
[[ -x "$KVIK" ]] || { echo "kvik binary not found: $KVIK (build it, or set KVIK=...)" >&2; exit 1; }
if [[ ! -f "$PEER/llamacpp-ref.mjs" ]]; then
  echo "installing the llama.cpp peer with $SHARED/peer/setup.sh" >&2
  bash "$SHARED/peer/setup.sh" >&2
fi
"$KVIK" bench --help 2>/dev/null | grep -q -- --json || { echo "$KVIK has no 'bench --json'" >&2; exit 1; }

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "model $MODEL, $THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2

MAXLEN=$(( (P + G > BP + BG ? P + G : BP + BG) + 64 ))
kvik_single() {
  "$KVIK" bench -m "$MODEL" --no-bandwidth --threads "$THREADS" --max-model-len "$MAXLEN" --num-prompts 1 --input-len "$P" \
    --output-len "$G" --json 2>/dev/null | tail -n 1
}
kvik_batch() {
  "$KVIK" bench -m "$MODEL" --no-bandwidth --threads "$THREADS" --max-model-len "$MAXLEN" --num-prompts "$NSEQ" \
    --concurrency "$NSEQ" --input-len "$BP" --output-len "$BG" --json 2>/dev/null | tail -n 1
}
llama_single() { (cd "$PEER" && node llamacpp-ref.mjs bench "$MODEL" "$P" "$G" "$THREADS" 2>/dev/null | tail -n 1); }
llama_batch() { (cd "$PEER" && node llamacpp-ref.mjs bench-batch "$MODEL" "$NSEQ" "$BP" "$BG" "$THREADS" 2>/dev/null | tail -n 1); }

for r in $(seq 1 "$ROUNDS"); do
  # Alternate which engine goes first, so neither always runs on the warmer (or colder) machine.
  if (( r % 2 )); then order="kvik llama"; else order="llama kvik"; fi
  for e in $order; do
    "${e}_single" > "$OUT/$e.single.$r.json"
    "${e}_batch" > "$OUT/$e.batch.$r.json"
  done
  echo "round $r/$ROUNDS done" >&2
done

# One JSON object: the CPU, the settings, per row the medians and kvik / llama.cpp (the runs alongside).
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
AMX="$({ grep -o 'amx[a-z0-9_]*' /proc/cpuinfo || true; } | sort -u | tr '\n' ' ' | sed 's/ $//')"
for r in $(seq 1 "$ROUNDS"); do
  jq -cn --slurpfile ks "$OUT/kvik.single.$r.json" --slurpfile kb "$OUT/kvik.batch.$r.json" \
    --slurpfile ls "$OUT/llama.single.$r.json" --slurpfile lb "$OUT/llama.batch.$r.json" --argjson p "$P" '
    {prefill: [$p / ($ks[0].ttft_ms.p50 / 1000), $ls[0].prefill_tok_s],
     decode: [1000 / $ks[0].itl_ms.p50, $ls[0].decode_tok_s],
     batch: [$kb[0].output_tok_s, ($lb[0].output_tok_s // null)]}'
done | jq -s --arg cpu "$CPU" --arg amx "$AMX" --argjson threads "$THREADS" --arg model "$MODEL" --argjson rounds "$ROUNDS" \
  --argjson p "$P" --argjson g "$G" --argjson nseq "$NSEQ" '
  def median: map(select(. != null)) | sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                                                else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r2: if . == null then null else . * 100 | round / 100 end;
  . as $runs | {cpu: $cpu, amx: $amx, threads: $threads, model: $model, rounds: $rounds,
    rows: (["prefill", "decode", "batch"] | map(. as $k |
      {key: $k, value: {what: ({prefill: "prefill \($p) tok/s", decode: "decode \($g) tok/s (batch 1)",
                                batch: "output tok/s (\($nseq) seqs)"}[$k]),
                        kvik: ($runs | map(.[$k][0]) | median | r2), llama_cpp: ($runs | map(.[$k][1]) | median | r2),
                        kvik_runs: ($runs | map(.[$k][0] | r2)), llama_cpp_runs: ($runs | map(.[$k][1] | r2))}})
      | from_entries | map_values(. + {ratio: (if .llama_cpp then (.kvik / .llama_cpp | r2) else null end)}))}'
