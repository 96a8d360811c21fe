#!/usr/bin/env bash
# Output tokens/s at concurrency 1, 4, 16, 64 for kvik's engine and for llama.cpp serving the same GGUF with
# the same number of parallel sequences (the chapter's batching "knee"). Alternates kvik / llama.cpp per
# round and prints JSON with medians and kvik/llama.cpp ratios.
# Usage: bench/engine_concurrency.sh [MODEL.gguf] [ROUNDS]   (default: a random-weight Llama-3.2-1B-shaped Q8_0)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/kvik-bench-l1b-q8_0.gguf}
rounds=${2:-3}
threads=${THREADS:-$(nproc)}
input_len=${INPUT_LEN:-64}
output_len=${OUTPUT_LEN:-32}
[ -x build/kvik ] || scripts/build.sh >/dev/null
if [ ! -f "$model" ]; then
  build/kvik synth "$model" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 --type q8_0 \
    --tokenizer-from ../shared/models/stories260K.gguf
fi
peer_dir=${KVIK_PEER_DIR:-/tmp/kvik-peer}
bash ../shared/peer/setup.sh >/dev/null
results=()
for c in 1 4 16 64; do
  for r in $(seq "$rounds"); do
    k=$(build/kvik bench --model "$model" --no-bandwidth --num-prompts "$c" --concurrency "$c" --input-len "$input_len" \
          --output-len "$output_len" --max-num-seqs 64 --max-model-len 512 --threads "$threads" --json 2>/dev/null |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).output_tok_s))')
    l=$(node "$peer_dir/llamacpp-ref.mjs" bench-batch "$model" "$c" "$input_len" "$output_len" "$threads" |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).output_tok_s))')
    results+=("{\"concurrency\":$c,\"round\":$r,\"kvik\":$k,\"llamacpp\":$l}")
    echo "concurrency $c round $r: kvik $k tok/s, llama.cpp $l tok/s" >&2
  done
done
printf '%s\n' "${results[@]}" | node -e '
let lines=require("fs").readFileSync(0,"utf8").trim().split("\n").map(JSON.parse);
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const out={model:process.argv[1],threads:+process.argv[2],input_len:+process.argv[3],output_len:+process.argv[4],rows:[]};
for(const c of [...new Set(lines.map(l=>l.concurrency))]){
  const rs=lines.filter(l=>l.concurrency===c);
  const k=med(rs.map(r=>r.kvik)), l=med(rs.map(r=>r.llamacpp));
  out.rows.push({concurrency:c,kvik_output_tok_s:k,llamacpp_output_tok_s:l,ratio:k/l});
}
console.log(JSON.stringify(out,null,1));' "$model" "$threads" "$input_len" "$output_len"
