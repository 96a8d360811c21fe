#!/usr/bin/env bash
# `kvik quantize` vs llama.cpp's quantizer on the same F32 model, same threads, same run: MB/s of input tensor
# data, medians of ROUNDS alternating runs (A B A B ...), per mix, as JSON on stdout.
# llama.cpp side: the native llama-quantize when it is built ($LLAMA_QUANTIZE, default
# /tmp/kvik-peer/llama.cpp/build/bin/llama-quantize); otherwise llama_model_quantize() of the peer's prebuilt
# libllama.so through `kvik_peer_tool quantize` (tools/peer_tool.cpp, built here if missing; the same function
# llama-quantize's main() calls; its time is the call alone, without loading the libraries). kvik side: wall time of the `kvik quantize` process, and its peak RSS.
# "ratio" is kvik's speed over llama.cpp's (above 1: kvik faster).
#
# Usage: bench/quantize_speed.sh [THREADS]   Environment: KVIK (build/kvik), ROUNDS (3), MIXES ("q8_0 q4_0 q4_k_m
#        iq4_nl"), DIM/LAYERS/FF/VOCAB (the synth model: 1024/4/4096/16384, ~330 MB of F32).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${1:-$(nproc)}"
KVIK="${KVIK:-$ROOT/build/kvik}"
ROUNDS="${ROUNDS:-3}" MIXES="${MIXES:-q8_0 q4_0 q4_k_m iq4_nl}"
DIM="${DIM:-1024}" LAYERS="${LAYERS:-4}" FF="${FF:-4096}" VOCAB="${VOCAB:-16384}"
SHARED="${KVIK_SHARED_DIR:-$ROOT/../shared}"
LLAMA_QUANTIZE="${LLAMA_QUANTIZE:-/tmp/kvik-peer/llama.cpp/build/bin/llama-quantize}"
PEER_TOOL="${PEER_TOOL:-$ROOT/build/kvik_peer_tool}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [[ ! -x "$LLAMA_QUANTIZE" && ! -x "$PEER_TOOL" ]]; then ninja -C "$ROOT/build" kvik_peer_tool >&2; fi

"$KVIK" synth "$TMP/in.gguf" --type f32 --dim "$DIM" --layers "$LAYERS" --heads 8 --kv-heads 8 --ff "$FF" \
  --vocab "$VOCAB" --tokenizer-from "$SHARED/models/stories260K.gguf" >/dev/null 2>&1
BYTES=$(stat -c %s "$TMP/in.gguf")
echo "model $((BYTES / 1000000)) MB F32, $THREADS threads, $ROUNDS rounds; load: $(uptime | sed 's/.*load average: //')" >&2

now() { date +%s.%N; }
kvik_run() {  # seconds; peak RSS (KiB) of the last run in $TMP/kvik_rss
  local t0; t0=$(now)
  nice /usr/bin/time -f %M -o "$TMP/kvik_rss" "$KVIK" quantize --quiet --threads "$THREADS" "$TMP/in.gguf" "$TMP/k.gguf" "$1"
  echo "$(now) - $t0" | bc
}
llama_run() {
  if [[ -x "$LLAMA_QUANTIZE" ]]; then
    local t0; t0=$(now)
    nice "$LLAMA_QUANTIZE" "$TMP/in.gguf" "$TMP/l.gguf" "$1" "$THREADS" >/dev/null 2>&1
    echo "$(now) - $t0" | bc
  else
    nice "$PEER_TOOL" quantize "$TMP/in.gguf" "$TMP/l.gguf" "$1" --threads "$THREADS" 2>/dev/null
  fi
}
for mix in $MIXES; do
  for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 )); then order="kvik llama"; else order="llama kvik"; fi
    for e in $order; do echo "$mix $e $("${e}_run" "$mix")" >> "$TMP/times"; done
  done
  same=$(cmp -s "$TMP/k.gguf" "$TMP/l.gguf" && echo true || echo false)
  echo "$mix identical $same" >> "$TMP/times"
  echo "$mix rss $(cat "$TMP/kvik_rss")" >> "$TMP/times"
  echo "$mix done (files identical: $same)" >&2
done
node - "$TMP/times" "$BYTES" "$THREADS" "$([[ -x "$LLAMA_QUANTIZE" ]] && echo llama-quantize || echo libllama)" <<'JS'
const fs = require("fs");
const [times, size, threads, ref] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), process.argv[5]];
const runs = {}, same = {}, rss = {};
for (const line of fs.readFileSync(times, "utf8").split("\n").filter(Boolean)) {
  const [mix, who, v] = line.split(/\s+/);
  if (who === "identical") same[mix] = v === "true";
  else if (who === "rss") rss[mix] = Number(v);
  else ((runs[mix] ??= {})[who] ??= []).push(Number(v));
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b), m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const round = (x, d) => Math.round(x * 10 ** d) / 10 ** d;
const cpu = (fs.readFileSync("/proc/cpuinfo", "utf8").match(/^model name\s*:\s*(.*)$/m) || [, ""])[1];
const out = {cpu, threads, model_bytes: size, reference: ref, mixes: {}};
for (const [mix, r] of Object.entries(runs)) {
  const k = median(r.kvik), l = median(r.llama);
  out.mixes[mix] = {kvik_mb_s: round(size / k / 1e6, 1), llama_mb_s: round(size / l / 1e6, 1), ratio: round(l / k, 3),
                    kvik_s: r.kvik, llama_s: r.llama, identical: same[mix], kvik_peak_rss_mib: round(rss[mix] / 1024, 1)};
}
console.log(JSON.stringify(out, null, 1));
JS
