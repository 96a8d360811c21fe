#!/usr/bin/env bash
# kvik vs llama.cpp on the same GGUF, threads and machine. Builds nothing from llama.cpp: the peer (node-llama-cpp's
# prebuilt llama.cpp) is installed by ../shared/peer/setup.sh. The engines run alternately (A B A B ...) for ROUNDS
# rounds so that drift in machine load hits both; it prints JSON: the CPU (and its AMX flags), medians and
# kvik / llama.cpp ratios for
#   prefill   P tokens at batch 1 (tokens/s)
#   decode    G tokens at batch 1 after the P-token prompt (tokens/s)
#   batch     output tokens/s with NSEQ parallel sequences (BP-token prompts, BG new tokens each)
# and with LONG=1 also (#18's rows; a round then takes several minutes more):
#   batch64   output tokens/s with 64 parallel sequences (BP-token prompts, BG new tokens each)
#   decode8k  batch-1 decode tokens/s after an 8192-token prompt (the KV read dominates; the model's context must
#             hold 8192 + 16 tokens: kvik synth --context 16384). DECODE_CTX=32768 makes it decode32k (context
#             --context 40960; the 32k-token prefill takes each engine many minutes per round on 2 cores)
#   prefill4k prefill of a 4096-token prompt at batch 1 (tokens/s)
#   cold      seconds from process start to the first generated token of a 5-token prompt (file in the page
#             cache): kvik generate -n 1 timed from outside; llama.cpp from node-llama-cpp's start-up, minus the
#             time node took to start and import it (tools/llamacpp_cold_start.mjs)
# kvik side: `kvik bench --json` (prefill = P / TTFT, decode = the request's decode tokens / decode time, as the peers
# time theirs: not 1 / the median inter-token latency, which leaves slow steps out).
# llama.cpp side: llamacpp-ref.mjs bench / bench-batch.
# With IK_LLAMA_BENCH=path/to/ik_llama.cpp's llama-bench (tools/build_ik_llama.sh builds it natively), a third engine
# runs in every round after the other two: `llama-bench -rtr 1 -fa 1` (run-time repacking, flash attention) for the
# prefill and decode rows, reported as ik_llama_cpp and kvik / ik_llama.cpp (ratio_ik).
# The JSON names the CPU, its AMX flags and each engine's kernel path (kvik's start-up log, llama.cpp's system info).
# AVX2=1 runs both engines as on a CPU without AVX-512 (AMD Zen 2/3, Intel before Ice Lake servers): kvik with
# KVIK_ISA=avx2, llama.cpp from a copy of the peer directory (hard links, $PEER-avx2) that keeps only its haswell CPU
# backend (AVX2 + FMA + F16C), so its system info reads AVX2 without AVX512; ik_llama.cpp is not run then.
# AVX2=vnni does the same for AVX2 + AVX-VNNI CPUs (Intel Alder Lake and later clients): KVIK_ISA=avx_vnni and
# llama.cpp's alderlake backend (needs a CPU with AVX-VNNI).
#
# Usage: bench/compare_llamacpp.sh MODEL.gguf [THREADS]
# Environment: KVIK (default build/kvik), ROUNDS (5), P (512), G (128), NSEQ (16), BP (64), BG (64),
#              KVIK_PEER_DIR (/tmp/kvik-peer), KVIK_SHARED_DIR (../shared), DECODE_CTX (8192),
#              LONG_ROWS (with LONG=1, a subset of "batch64 decodectx prefill4k cold"), AVX2 (0; 1 or vnni: see above),
#              KV_TYPE (f16; q8_0 or f32: both engines' KV cache of that type - kvik --kv-cache-dtype, llama.cpp
#              through tools/llamacpp_bench.mjs with flash attention, ik_llama.cpp -ctk/-ctv; the JSON says kv_cache_type).
# Time: about ROUNDS × (2 single-sequence runs + 2 batch runs); on a 2-core machine with a 1B Q8_0 model and the
# defaults, roughly 1.5–2 min per round. Run it on a quiet machine (check `uptime`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: bench/compare_llamacpp.sh MODEL.gguf [THREADS]}"
THREADS="${2:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-5}" P="${P:-512}" G="${G:-128}" NSEQ="${NSEQ:-16}" BP="${BP:-64}" BG="${BG:-64}"
DCTX="${DECODE_CTX:-8192}" KV_TYPE="${KV_TYPE:-f16}"
case "$KV_TYPE" in f16 | f32 | q8_0) ;; *) echo "KV_TYPE must be f16, f32 or q8_0 (types both engines have): $KV_TYPE" >&2; exit 1 ;; esac
DROW="decode$((DCTX / 1024))k"  # the long-context decode row's name: decode8k for 8192
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
case "${AVX2:-0}" in
  0) ;;
  1 | vnni)
    # node-llama-cpp loads the best libggml-cpu-<variant>.so of its bins directory: leave it only the one wanted.
    variant=haswell KVIK_ISA=avx2
    [[ "$AVX2" == vnni ]] && variant=alderlake KVIK_ISA=avx_vnni
    export KVIK_ISA
    bins="node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
    [[ -f "$PEER/$bins/libggml-cpu-$variant.so" ]] || { echo "no $variant CPU backend in $PEER/$bins" >&2; exit 1; }
    rm -rf "$PEER-$variant" && cp -al "$PEER" "$PEER-$variant"
    find "$PEER-$variant/$bins" -name 'libggml-cpu-*.so' ! -name "libggml-cpu-$variant.so" -delete
    PEER="$PEER-$variant"
    unset IK_LLAMA_BENCH
    ;;
  *) echo "AVX2 must be 0, 1 or vnni: $AVX2" >&2; exit 1 ;;
esac
[[ "$KV_TYPE" == f16 ]] || cp "$ROOT/tools/llamacpp_bench.mjs" "$PEER/"
echo "model $MODEL, $THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2

MAXLEN=$(( (P + G > BP + BG ? P + G : BP + BG) + 64 ))
# The KV cache type of every run: kvik --kv-cache-dtype; llama.cpp through tools/llamacpp_bench.mjs (K and V of that
# type, flash attention on) unless it is f16, the peer script's default; ik_llama.cpp -ctk / -ctv.
KV_ARGS=(--kv-cache-dtype "$KV_TYPE")
# The peer script and its trailing arguments: the shared one for f16, tools/llamacpp_bench.mjs with the KV type else.
PEER_SCRIPT=llamacpp-ref.mjs PEER_KV=()
[[ "$KV_TYPE" == f16 ]] || PEER_SCRIPT=llamacpp_bench.mjs PEER_KV=("$KV_TYPE")
llama_bench() {  # PROMPT_TOKENS GEN_TOKENS
  (cd "$PEER" && node "$PEER_SCRIPT" bench "$MODEL" "$1" "$2" "$THREADS" "${PEER_KV[@]}" 2>/dev/null | tail -n 1)
}
llama_bench_batch() {  # SEQUENCES
  (cd "$PEER" && node "$PEER_SCRIPT" bench-batch "$MODEL" "$1" "$BP" "$BG" "$THREADS" "${PEER_KV[@]}" 2>/dev/null |
    tail -n 1)
}
kvik_single() {
  "$KVIK" bench -m "$MODEL" "${KV_ARGS[@]}" --no-bandwidth --threads "$THREADS" --max-model-len "$MAXLEN" --num-prompts 1 --input-len "$P" \
    --output-len "$G" --json 2>/dev/null | tail -n 1
}
kvik_batch() {
  "$KVIK" bench -m "$MODEL" "${KV_ARGS[@]}" --no-bandwidth --threads "$THREADS" --max-model-len "$MAXLEN" --num-prompts "$NSEQ" \
    --concurrency "$NSEQ" --input-len "$BP" --output-len "$BG" --json 2>/dev/null | tail -n 1
}
kvik_run() {  # INPUT_LEN OUTPUT_LEN NUM_PROMPTS MAXLEN
  "$KVIK" bench -m "$MODEL" "${KV_ARGS[@]}" --no-bandwidth --threads "$THREADS" --max-model-len "$4" --num-prompts "$3" \
    --concurrency "$3" --input-len "$1" --output-len "$2" --json 2>/dev/null | tail -n 1
}
kvik_batch64() { kvik_run "$BP" "$BG" 64 "$MAXLEN"; }
kvik_decodectx() { kvik_run "$DCTX" 16 1 "$((DCTX + 108))"; }
kvik_prefill4k() { kvik_run 4096 1 1 4200; }
kvik_cold() {
  local t0 t1
  t0=$(date +%s%N)
  "$KVIK" generate -m "$MODEL" -p "Once upon a time" -n 1 --threads "$THREADS" --max-model-len 256 >/dev/null 2>&1
  t1=$(date +%s%N)
  jq -n --argjson ns "$((t1 - t0))" '{cold_s: ($ns / 1e9)}'
}
llama_batch64() { llama_bench_batch 64; }
llama_decodectx() { llama_bench "$DCTX" 16; }
llama_prefill4k() { llama_bench 4096 1; }
llama_cold() {
  (cd "$PEER" && node llamacpp_cold_start.mjs "$MODEL" "$THREADS" 2>/dev/null | tail -n 1) |
    jq -c '{cold_s: ((.first_token_ms - .imported_ms) / 1000)}'
}
llama_single() { llama_bench "$P" "$G"; }
# ik_llama.cpp: one llama-bench run of a P-token prefill and a G-token decode after a P-token prompt (-gp P,G: the
# decode alone is timed, at the depth kvik's and llama.cpp's decode rows have; a plain -n G would decode from an
# empty cache), as {prefill_tok_s, decode_tok_s}.
ik_single() {
  "$IK_LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -p "$P" -n 0 -gp "$P,$G" -r 1 -rtr 1 -fa 1 -ctk "$KV_TYPE" -ctv "$KV_TYPE" \
    -o json 2>/dev/null |
    jq -c '{prefill_tok_s: (map(select(.n_gen == 0)) | .[0].avg_ts), decode_tok_s: (map(select(.n_gen > 0)) | .[0].avg_ts)}'
}
llama_batch() { llama_bench_batch "$NSEQ"; }

EXTRA_ROWS=""
if [[ "${LONG:-0}" == 1 ]]; then
  EXTRA_ROWS="${LONG_ROWS:-batch64 decodectx prefill4k cold}"
  cp "$ROOT/tools/llamacpp_cold_start.mjs" "$PEER/"
fi
for r in $(seq 1 "$ROUNDS"); do
  # Alternate which engine goes first, so neither always runs on the warmer (or colder) machine.
  if (( r % 2 )); then order="kvik llama"; else order="llama kvik"; fi
  for e in $order; do
    for row in single batch $EXTRA_ROWS; do
      "${e}_$row" > "$OUT/$e.$row.$r.json" ||
        { echo "the $e $row run failed (round $r; its stderr is discarded: run that command by hand to see why)" >&2; exit 1; }
    done
  done
  [[ -n "${IK_LLAMA_BENCH:-}" ]] && ik_single > "$OUT/ik.single.$r.json"
  echo "round $r/$ROUNDS done" >&2
done

# One JSON object: the CPU, the settings, per row the medians and kvik / llama.cpp (the runs alongside).
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
AMX="$({ grep -o 'amx[a-z0-9_]*' /proc/cpuinfo || true; } | sort -u | tr '\n' ' ' | sed 's/ $//')"
KVIK_ISA="$("$KVIK" generate -m "$MODEL" -p "a" -n 1 --threads "$THREADS" --max-model-len 64 2>&1 >/dev/null |
  grep -m1 -o 'CPU kernels: [^,]*' | sed 's/CPU kernels: //' || true)"
LLAMA_ISA="$(cd "$PEER" && node -e 'import("node-llama-cpp").then(async ({getLlama}) => {
  const l = await getLlama({gpu: false, build: "never", logLevel: "error"}); console.log(l.systemInfo); })' 2>/dev/null |
  tr '\n' ' ' | sed 's/ *$//' || true)"
for r in $(seq 1 "$ROUNDS"); do
  [[ -f "$OUT/ik.single.$r.json" ]] || echo '{}' > "$OUT/ik.single.$r.json"
  jq -cn --slurpfile ks "$OUT/kvik.single.$r.json" --slurpfile kb "$OUT/kvik.batch.$r.json" \
    --slurpfile ls "$OUT/llama.single.$r.json" --slurpfile lb "$OUT/llama.batch.$r.json" \
    --slurpfile is "$OUT/ik.single.$r.json" --argjson p "$P" '
    {prefill: [$p / ($ks[0].ttft_ms.p50 / 1000), $ls[0].prefill_tok_s, ($is[0].prefill_tok_s // null)],
     decode: [$ks[0].request_decode_tok_s, $ls[0].decode_tok_s, ($is[0].decode_tok_s // null)],
     batch: [$kb[0].output_tok_s, ($lb[0].output_tok_s // null)]}' > "$OUT/row.$r.json"
  for row in $EXTRA_ROWS; do
    jq -cn --arg row "$row" --slurpfile k "$OUT/kvik.$row.$r.json" --slurpfile l "$OUT/llama.$row.$r.json" '
      {($row): (if $row == "batch64" then [$k[0].output_tok_s, $l[0].output_tok_s]
                elif $row == "decodectx" then [$k[0].request_decode_tok_s, $l[0].decode_tok_s]
                elif $row == "prefill4k" then [4096 / ($k[0].ttft_ms.p50 / 1000), $l[0].prefill_tok_s]
                else [$k[0].cold_s, $l[0].cold_s] end)}'
  done | jq -sc --slurpfile base "$OUT/row.$r.json" 'add + $base[0]'
done | jq -s --arg cpu "$CPU" --arg amx "$AMX" --arg kisa "$KVIK_ISA" --arg lisa "$LLAMA_ISA" \
  --argjson threads "$THREADS" --arg model "$MODEL" --argjson rounds "$ROUNDS" \
  --argjson p "$P" --argjson g "$G" --argjson nseq "$NSEQ" --arg kv "$KV_TYPE" --arg drow "$DROW" --argjson dctx "$DCTX" '
  def median: map(select(. != null)) | sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                                                else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def r2: if . == null then null else . * 100 | round / 100 end;
  . as $runs | {cpu: $cpu, amx: $amx, kvik_kernels: $kisa, llama_cpp_system_info: $lisa, threads: $threads,
    model: $model, rounds: $rounds, kv_cache_type: $kv,
    rows: (["prefill", "decode", "batch", "batch64", "decodectx", "prefill4k", "cold"] | map(select(. as $k | $runs[0] | has($k))) |
      map(. as $k |
      {key: $k, value: {what: ({prefill: "prefill \($p) tok/s", decode: "decode \($g) tok/s (batch 1)",
                                batch: "output tok/s (\($nseq) seqs)", batch64: "output tok/s (64 seqs)",
                                decodectx: "decode tok/s at \($dctx) tokens of context (batch 1)",
                                prefill4k: "prefill 4096 tok/s", cold: "seconds to the first token (lower is better)"}[$k]),
                        kvik: ($runs | map(.[$k][0]) | median | r2), llama_cpp: ($runs | map(.[$k][1]) | median | r2),
                        kvik_runs: ($runs | map(.[$k][0] | r2)), llama_cpp_runs: ($runs | map(.[$k][1] | r2)),
                        ik_llama_cpp: ($runs | map(.[$k][2]) | median | r2), ik_llama_cpp_runs: ($runs | map(.[$k][2] | r2))}})
      | from_entries | map_values(. + {ratio: (if .llama_cpp then (.kvik / .llama_cpp | r2) else null end),
                                       ratio_ik: (if .ik_llama_cpp then (.kvik / .ik_llama_cpp | r2) else null end)})
      | with_entries(if .key == "decodectx" then .key = $drow else . end)
      | map_values(if .ik_llama_cpp == null then del(.ik_llama_cpp, .ik_llama_cpp_runs, .ratio_ik) else . end))}'
