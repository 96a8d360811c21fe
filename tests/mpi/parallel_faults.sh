#!/usr/bin/env bash
# Faults in an mpirun job end every rank, non-zero, with a message naming the rank, and nothing hangs:
#  1. a start-up error on every rank (-np 2 with --tensor-parallel-size 3): MPI_Abort naming the rank;
#  2. a rank killed (SIGKILL) while rank 0 serves requests: mpirun ends the job and reports the rank;
#  3. a worker whose copy of a step has one block id changed (the test hook KVIK_TEST_CORRUPT_BLOCK=RANK:STEP), under
#     TP=2 and PP=2: its ledger check ends the job, naming the rank, the block and the request.
# Usage: parallel_faults.sh KVIK STORIES
set -euo pipefail
kvik=$1 model=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/serve_wait.sh"
tmp=$(mktemp -d)
job=
cleanup() {
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)

rc=0
timeout 30 "${mpi[@]}" "$kvik" generate -m "$model" -p hi --threads 1 --tensor-parallel-size 3 >"$tmp/1.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: bad start-up flags: exit $rc"; cat "$tmp/1.log"; exit 1; }
grep -q "rank [01]: error: this job has 2 rank(s), but --tensor-parallel-size 3" "$tmp/1.log" ||
  { echo "FAIL: no message naming the rank"; cat "$tmp/1.log"; exit 1; }

for layout in "2 1" "1 2"; do
  read -r tp pp <<<"$layout"
  rc=0
  KVIK_TEST_CORRUPT_BLOCK=1:3 timeout 30 "${mpi[@]}" "$kvik" generate -m "$model" -p "Once upon a time" -n 24 \
    --threads 1 --tensor-parallel-size "$tp" --pipeline-parallel-size "$pp" >"$tmp/3.log" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: TP=$tp PP=$pp: a corrupted block id: exit $rc"; cat "$tmp/3.log"; exit 1; }
  grep -Eq "rank 1: KV block ledger: step [0-9]+: request #[0-9]+ writes position [0-9]+ to slot [0-9]+ \(block [0-9]+\), but its ledger gives it block [0-9]+ there; ending every rank" "$tmp/3.log" ||
    { echo "FAIL: TP=$tp PP=$pp: no ledger message naming rank 1"; cat "$tmp/3.log"; exit 1; }
done

name="kvik-faults-$$-$RANDOM"  # names this job's ranks for pgrep
"${mpi[@]}" "$kvik" serve "$model" --host 127.0.0.1 --port 0 --threads 1 --served-model-name "$name" \
  --tensor-parallel-size 2 >"$tmp/2.log" 2>&1 &
job=$!
port=$(listening_port "$tmp/2.log" "$job")
wait_healthy "http://127.0.0.1:$port" "$tmp/2.log" "$job"
worker=
for p in $(pgrep -P "$job"); do
  tr '\0' '\n' <"/proc/$p/environ" | grep -qx OMPI_COMM_WORLD_RANK=1 && worker=$p
done
[ -n "$worker" ] || { echo "FAIL: no rank 1 under mpirun $job"; exit 1; }
for i in $(seq 8); do  # requests in flight when the rank dies
  curl -s -m 20 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true}' >/dev/null 2>&1 &
done
sleep 0.3
kill -KILL "$worker"
start=$SECONDS
rc=0
wait "$job" || rc=$?
job=
[ "$rc" -ne 0 ] || { echo "FAIL: mpirun exited 0 after a rank died"; exit 1; }
[ $((SECONDS - start)) -lt 20 ] || { echo "FAIL: the job took $((SECONDS - start)) s to end"; exit 1; }
grep -q "rank 1" "$tmp/2.log" || { echo "FAIL: mpirun did not name rank 1"; cat "$tmp/2.log"; exit 1; }
pgrep -f -- "--served-model-name $name " >/dev/null && { echo "FAIL: a rank outlived the job"; exit 1; }
echo "OK: faults end the job (exit $rc in $((SECONDS - start)) s), naming the rank"
