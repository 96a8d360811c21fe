#!/usr/bin/env bash
# Decode step time of a mixture-of-experts model three ways on the same cores: one process (two threads), tensor
# parallelism 2 with every expert's d_ff_exp sliced (two MPI ranks, one thread each), and tensor parallelism 2 with
# --enable-expert-parallel (whole experts per rank). Median inter-token latency (= the decode step's time) of
# `kvik bench` at concurrency 1 and 16, and the all-reduce bytes per decode step, the same both ways: 2 per layer
# (attention's and the MoE block's) x L x T tokens x d x 4 bytes. Prints JSON.
# Usage: bench/ep_step_time.sh [MODEL.gguf] [ROUNDS]   (default: a random-weight Mixtral-shaped Q8_0, 8 experts of
# width 1024, 2 used, d 512, 8 layers, ~110 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/kvik-bench-moe-q8_0.gguf}
rounds=${2:-3}
output_len=${OUTPUT_LEN:-16}
[ -x build/kvik ] || scripts/build.sh >/dev/null
if [ ! -f "$model" ]; then
  build/kvik synth "$model" --arch mixtral --experts 8 --experts-used 2 --dim 512 --layers 8 --heads 8 --kv-heads 4 \
    --ff 1024 --vocab 32000 --type q8_0 --tokenizer-from ../shared/models/stories260K.gguf
fi
json_field() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
  console.log(process.argv[1].split(".").reduce((o,k)=>o[k],j))})' "$1"; }
dims=$(build/kvik inspect "$model" | awk '$1 == "d" { d = $2 } $1 == "L" { L = $2 } END { print d, L }')
read -r d L <<<"$dims"
flags=(bench --model "$model" --no-bandwidth --input-len 32 --output-len "$output_len" --max-model-len 256 --json)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 build/kvik)
results=()
for c in 1 16; do
  for r in $(seq "$rounds"); do
    run=(--num-prompts "$c" --concurrency "$c")
    one=$(build/kvik "${flags[@]}" "${run[@]}" --threads 2 2>/dev/null | json_field itl_ms.p50)
    tp=$("${mpi[@]}" "${flags[@]}" "${run[@]}" --threads 1 --tensor-parallel-size 2 2>/dev/null | json_field itl_ms.p50)
    ep=$("${mpi[@]}" "${flags[@]}" "${run[@]}" --threads 1 --tensor-parallel-size 2 --enable-expert-parallel \
      2>/dev/null | json_field itl_ms.p50)
    results+=("{\"concurrency\":$c,\"round\":$r,\"one\":$one,\"tp2\":$tp,\"ep2\":$ep}")
    echo "concurrency $c round $r: 1 process (2 threads) $one ms/step, TP=2 sliced $tp, EP=2 $ep" >&2
  done
done
printf '%s\n' "${results[@]}" | node -e '
const lines=require("fs").readFileSync(0,"utf8").trim().split("\n").map(JSON.parse);
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const [model,d,L]=[process.argv[1],+process.argv[2],+process.argv[3]];
const out={model,d,layers:L,cpu_cores:require("os").cpus().length,load_average:require("os").loadavg()[0],rows:[]};
for(const c of [...new Set(lines.map(l=>l.concurrency))]){
  const rs=lines.filter(l=>l.concurrency===c);
  const one=med(rs.map(r=>r.one)), tp=med(rs.map(r=>r.tp2)), ep=med(rs.map(r=>r.ep2));
  out.rows.push({concurrency:c,one_process_step_ms:one,tp2_sliced_step_ms:tp,ep2_step_ms:ep,tp2_over_one:tp/one,
    ep2_over_one:ep/one,allreduce_bytes_per_step:2*L*c*d*4,allreduces_per_step:2*L});
}
console.log(JSON.stringify(out,null,1));' "$model" "$d" "$L"
