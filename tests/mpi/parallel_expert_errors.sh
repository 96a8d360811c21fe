#!/usr/bin/env bash
# --enable-expert-parallel's start-up errors end the job non-zero with a message naming the flag and the numbers:
#  1. E experts that do not divide by T (3 experts, --tensor-parallel-size 2), on every rank;
#  2. the flag without mpirun (T = 1: the flag's own message; T = 2: "start kvik with mpirun");
#  3. the flag on a dense model (stories260K);
#  4. without the flag, experts whose d_ff_exp slices split Q8_0 blocks (d_ff_exp 32, T = 2): the message names the
#     flag, and with the flag the same job runs.
# Usage: parallel_expert_errors.sh KVIK STORIES
set -euo pipefail
kvik=$1 stories=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(timeout 30 mpirun --allow-run-as-root --oversubscribe -np 2)
gen=(generate -p "Once upon a time" -n 4 --threads 1 --max-model-len 64)
synth() {  # synth OUT EXPERTS FF TYPE
  "$kvik" synth --arch mixtral --experts "$2" --experts-used 2 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff "$3" \
    --type "$4" --vocab 512 --context 256 --tokenizer-from "$stories" "$1" >/dev/null 2>&1
}
# expect NAME MESSAGE COMMAND...: the command fails (not by the timeout) and its output has MESSAGE.
expect() {
  local name=$1 message=$2 rc=0
  shift 2
  "$@" >"$tmp/$name.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: $name: exit $rc"; cat "$tmp/$name.log"; exit 1; }
  grep -qF -- "$message" "$tmp/$name.log" || { echo "FAIL: $name: no \"$message\""; cat "$tmp/$name.log"; exit 1; }
  echo "ok: $name: $(grep -F -- "$message" "$tmp/$name.log" | head -1)"
}
synth "$tmp/e3.gguf" 3 64 f32
synth "$tmp/q8.gguf" 4 32 q8_0
expect indivisible "--enable-expert-parallel: the model's 3 experts do not divide into 2 equal shares" \
  "${mpi[@]}" "$kvik" "${gen[@]}" -m "$tmp/e3.gguf" --tensor-parallel-size 2 --enable-expert-parallel
grep -q "rank [01]: error" "$tmp/indivisible.log" || { echo "FAIL: no message naming the rank"; exit 1; }
expect no-mpirun "--enable-expert-parallel places whole experts on the ranks of --tensor-parallel-size T > 1 (got 1)" \
  "$kvik" "${gen[@]}" -m "$tmp/q8.gguf" --enable-expert-parallel
expect no-mpirun-tp2 "start kvik with mpirun -np 2" \
  "$kvik" "${gen[@]}" -m "$tmp/q8.gguf" --tensor-parallel-size 2 --enable-expert-parallel
expect dense "--enable-expert-parallel: $stories is a dense model (no experts to place)" \
  "${mpi[@]}" "$kvik" "${gen[@]}" -m "$stories" --tensor-parallel-size 2 --enable-expert-parallel
expect q8-blocks "splits the experts' d_ff_exp 32 into slices of 16, but their q8_0 down matrices hold blocks of 32" \
  "${mpi[@]}" "$kvik" "${gen[@]}" -m "$tmp/q8.gguf" --tensor-parallel-size 2
grep -qF -- "or add --enable-expert-parallel" "$tmp/q8-blocks.log" || { echo "FAIL: the flag is not named"; exit 1; }
"${mpi[@]}" "$kvik" "${gen[@]}" -m "$tmp/q8.gguf" --tensor-parallel-size 2 --enable-expert-parallel >"$tmp/ok.log" 2>&1 ||
  { echo "FAIL: the Q8_0 model with --enable-expert-parallel"; cat "$tmp/ok.log"; exit 1; }
echo "OK: --enable-expert-parallel's errors name the flag and the numbers"
