#!/usr/bin/env bash
# kvik vs llama.cpp on the same GGUF, threads and machine. Builds nothing from llama.cpp: the peer (node-llama-cpp's
# prebuilt llama.cpp) is installed by ../shared/peer/setup.sh. The engines run alternately (A B A B ...) for ROUNDS
# rounds so that drift in machine load hits both; the table shows medians and kvik/llama.cpp ratios for
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

python3 - "$OUT" "$ROUNDS" "$P" "$G" "$NSEQ" <<'PY'
import json, statistics, sys
out, rounds, P, G, nseq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def load(e, kind, r):
    with open(f"{out}/{e}.{kind}.{r}.json") as f:
        return json.loads(f.read())
rows = {"prefill": ([], []), "decode": ([], []), "batch": ([], [])}
for r in range(1, rounds + 1):
    ks, kb = load("kvik", "single", r), load("kvik", "batch", r)
    ls, lb = load("llama", "single", r), load("llama", "batch", r)
    rows["prefill"][0].append(P / (ks["ttft_ms"]["p50"] / 1000)); rows["prefill"][1].append(ls["prefill_tok_s"])
    rows["decode"][0].append(1000 / ks["itl_ms"]["p50"]);          rows["decode"][1].append(ls["decode_tok_s"])
    rows["batch"][0].append(kb["output_tok_s"]);                   rows["batch"][1].append(lb.get("output_tok_s", float("nan")))
labels = {"prefill": f"prefill {P} tok/s", "decode": f"decode {G} tok/s (batch 1)", "batch": f"output tok/s ({nseq} seqs)"}
print(f"{'':30} {'kvik':>10} {'llama.cpp':>10} {'kvik/llama':>11}   (medians of {rounds})")
for k, (a, b) in rows.items():
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{labels[k]:30} {ma:10.2f} {mb:10.2f} {ma / mb:11.2f}")
PY
