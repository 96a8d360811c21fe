#!/usr/bin/env bash
# AMX-INT8 / AMX-BF16 vs AVX-512 on one packed matmul (bench_matmul_packed, 2048 x 2048 by default), per weight type and token
# count, alternating the two tables ROUNDS times: the AVX-512 run with KVIK_ISA=avx512, the AMX run with
# KVIK_AMX_MIN_TOKENS=1 (tiles for every token count). Prints JSON with the medians, the ratio avx512_us / amx_us
# and, per type, the crossover: the smallest token count from which AMX stays faster (set kAmxDefaultMinTokens or
# KVIK_AMX_MIN_TOKENS from it). On a CPU without usable AMX it says why and stops.
# Usage: bench/amx_crossover.sh [ROUNDS]   (env: TOKENS, TYPES, ROWS, COLS, THREADS)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
tokens=${TOKENS:-1,2,4,6,8,12,16,32,64,256}
types=${TYPES:-q8_0,q4_0,iq4_nl,q5_0,q4_1,q5_1,q4_K,q5_K,q6_K,bf16}
bin=build/bench/bench_matmul_packed
[ -x "$bin" ] || cmake --build build --target bench_matmul_packed >/dev/null
probe=$("$bin" --rows 16 --cols 32 --tokens 1 --types q8_0 --iters 1)  # only for amx_usable and the reasons
if ! grep -q '"amx_usable": true' <<<"$probe"; then
  node -e 'const j=JSON.parse(process.argv[1]);console.log(JSON.stringify({cpu:require("os").cpus()[0].model,
    amx_usable:false,reason:j.amx_reason}))' "$probe"
  exit 0
fi
if grep -q '"amx_bf16_usable": false' <<<"$probe" && [[ ",$types," == *,bf16,* ]]; then
  echo "AMX-BF16 not usable ($(sed -n 's/.*"amx_bf16_reason": "\([^"]*\)".*/\1/p' <<<"$probe")): bf16 left out" >&2
  types=$(tr ',' '\n' <<<"$types" | grep -vx bf16 | paste -sd, -)
fi
args=(--rows "${ROWS:-2048}" --cols "${COLS:-2048}" --tokens "$tokens" --types "$types")
[ -n "${THREADS:-}" ] && args+=(--threads "$THREADS")
runs=()
for r in $(seq "$rounds"); do
  runs+=("$(KVIK_ISA=avx512 "$bin" "${args[@]}")")
  runs+=("$(KVIK_AMX_MIN_TOKENS=1 "$bin" "${args[@]}")")
  echo "round $r done" >&2
done
printf '%s\n' "${runs[@]}" | node -e '
const text=require("fs").readFileSync(0,"utf8");
const docs=[];let depth=0,start=0;
for(let i=0;i<text.length;i++){if(text[i]==="{"){if(!depth)start=i;depth++;}else if(text[i]==="}"){depth--;if(!depth)docs.push(JSON.parse(text.slice(start,i+1)));}}
const med=a=>{a=[...a].sort((x,y)=>x-y);const m=a.length>>1;return a.length%2?a[m]:(a[m-1]+a[m])/2;};
const avx=docs.filter(d=>!d.isa.startsWith("amx")),amx=docs.filter(d=>d.isa.startsWith("amx"));
const out={cpu:require("os").cpus()[0].model,threads:docs[0].threads,rows:docs[0].rows,cols:docs[0].cols,results:[],crossover:{}};
for(const r of docs[0].results){
  const pick=(set)=>med(set.map(d=>d.results.find(x=>x.type===r.type&&x.tokens===r.tokens).median_us));
  const a=pick(avx),b=pick(amx);
  out.results.push({type:r.type,tokens:r.tokens,avx512_us:a,amx_us:b,amx_speedup:a/b});
}
for(const t of [...new Set(out.results.map(r=>r.type))]){
  const rs=out.results.filter(r=>r.type===t);let x=null;
  for(let i=rs.length-1;i>=0&&rs[i].amx_speedup>1;i--)x=rs[i].tokens;
  out.crossover[t]=x;
}
console.log(JSON.stringify(out,null,1));'
