#!/usr/bin/env bash
# Decode step time with tensor parallelism 2 (two MPI ranks on this host, one thread each) vs one process (two
# threads): the same cores either way, so the difference is what the split costs (two all-reduces per layer) or
# buys. Median inter-token latency (= the decode step's time) of `kvik bench` at concurrency 1 and 16, and the
# all-reduce bytes per decode step: 2 per layer x L x T tokens x d x 4 bytes. Prints JSON.
# Usage: bench/tp_step_time.sh [MODEL.gguf] [ROUNDS]   (default: a random-weight Llama-3.2-1B-shaped Q8_0)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/kvik-bench-l1b-q8_0.gguf}
rounds=${2:-3}
output_len=${OUTPUT_LEN:-16}
[ -x build/kvik ] || scripts/build.sh >/dev/null
if [ ! -f "$model" ]; then
  build/kvik synth "$model" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 --type q8_0 \
    --tokenizer-from ../shared/models/stories260K.gguf
fi
json_field() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
  console.log(process.argv[1].split(".").reduce((o,k)=>o[k],j))})' "$1"; }
dims=$(build/kvik inspect "$model" | awk '$1 == "d" { d = $2 } $1 == "L" { L = $2 } END { print d, L }')
read -r d L <<<"$dims"
flags=(bench --model "$model" --no-bandwidth --input-len 32 --output-len "$output_len" --max-model-len 256 --json)
results=()
for c in 1 16; do
  for r in $(seq "$rounds"); do
    one=$(build/kvik "${flags[@]}" --num-prompts "$c" --concurrency "$c" --threads 2 2>/dev/null | json_field itl_ms.p50)
    tp=$(mpirun --allow-run-as-root --oversubscribe -np 2 build/kvik "${flags[@]}" --num-prompts "$c" \
      --concurrency "$c" --threads 1 --tensor-parallel-size 2 2>/dev/null | json_field itl_ms.p50)
    results+=("{\"concurrency\":$c,\"round\":$r,\"tp1\":$one,\"tp2\":$tp}")
    echo "concurrency $c round $r: TP=1 (2 threads) $one ms/step, TP=2 (2 ranks x 1 thread) $tp ms/step" >&2
  done
done
printf '%s\n' "${results[@]}" | node -e '
const lines=require("fs").readFileSync(0,"utf8").trim().split("\n").map(JSON.parse);
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const [model,d,L]=[process.argv[1],+process.argv[2],+process.argv[3]];
const out={model,d,layers:L,cpu_cores:require("os").cpus().length,rows:[]};
for(const c of [...new Set(lines.map(l=>l.concurrency))]){
  const rs=lines.filter(l=>l.concurrency===c);
  const t1=med(rs.map(r=>r.tp1)), t2=med(rs.map(r=>r.tp2));
  out.rows.push({concurrency:c,tp1_step_ms:t1,tp2_step_ms:t2,tp2_over_tp1:t2/t1,
    allreduce_bytes_per_step:2*L*c*d*4,allreduces_per_step:2*L});
}
console.log(JSON.stringify(out,null,1));' "$model" "$d" "$L"
