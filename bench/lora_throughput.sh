#!/usr/bin/env bash
# Multi-LoRA cost: output tokens/s of 16 concurrent requests spread over 4 rank-16 adapters (every target, F16, from
# `kvik synth-lora`) vs the same 16 requests on the base model alone, through the engine (`kvik bench`), on a random
# Llama-3.2-1B-shaped Q8_0 model. Alternates base / LoRA per round; prints JSON with the medians and the ratio
# (target ≥ 0.8).
# Usage: bench/lora_throughput.sh [MODEL.gguf] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/kvik-bench-l1b-q8_0.gguf}
rounds=${2:-3}
threads=${THREADS:-$(nproc)}
input_len=${INPUT_LEN:-64}
output_len=${OUTPUT_LEN:-32}
rank=${RANK:-16}
[ -x build/kvik ] || scripts/build.sh >/dev/null
if [ ! -f "$model" ]; then
  build/kvik synth "$model" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 --type q8_0 \
    --tokenizer-from ../shared/models/stories260K.gguf >&2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
loras=()
for i in 1 2 3 4; do
  build/kvik synth-lora "$model" "$dir/lora$i.gguf" --rank "$rank" --type f16 --seed "$i" --b-std 0.01 >&2
  loras+=("$dir/lora$i.gguf")
done
tok_s() {  # extra bench args...
  build/kvik bench --model "$model" --no-bandwidth --num-prompts 16 --concurrency 16 --input-len "$input_len" \
    --output-len "$output_len" --max-num-seqs 16 --max-model-len 512 --threads "$threads" --json "$@" 2>/dev/null |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).output_tok_s))'
}
results=()
for r in $(seq "$rounds"); do
  b=$(tok_s)
  l=$(tok_s --lora "${loras[@]}")
  results+=("{\"round\":$r,\"base\":$b,\"lora\":$l}")
  echo "round $r: base $b tok/s, 4 adapters $l tok/s" >&2
done
printf '%s\n' "${results[@]}" | node -e '
const lines=require("fs").readFileSync(0,"utf8").trim().split("\n").map(JSON.parse);
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const b=med(lines.map(l=>l.base)), l=med(lines.map(l=>l.lora));
console.log(JSON.stringify({model:process.argv[1],threads:+process.argv[2],input_len:+process.argv[3],
  output_len:+process.argv[4],requests:16,adapters:4,rank:+process.argv[5],rounds:lines,
  base_output_tok_s:b,lora_output_tok_s:l,ratio:l/b},null,1));' "$model" "$threads" "$input_len" "$output_len" "$rank"
