#!/usr/bin/env bash
# The graceful drain of `kvik serve` under mpirun (TP=2): SIGTERM to rank 0's process ("rank0"), or to mpirun itself
# ("mpirun", with --mca odls_base_sigkill_timeout S: OpenMPI 4.1 passes the SIGTERM on to the ranks S seconds later
# and SIGKILLs them S seconds after that). While a streaming request runs, /health and a new request get 503 with a
# JSON error saying the server is draining; the stream ends with its last chunk and [DONE] (rank0: it finishes,
# "length"; mpirun: --shutdown-grace ends it, "abort"); every rank exits 0 (a wrapper records each rank's status:
# mpirun does not report them once it was signalled), every rank's KV ledger is all free, and the job ends in time.
# Usage: parallel_drain.sh KVIK STORIES rank0|mpirun
set -euo pipefail
kvik=$1 stories=$2 target=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/serve_wait.sh"
tmp=$(mktemp -d)
job=
cleanup() {
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "FAIL ($target): line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR
fail() {
  echo "FAIL ($target): $*"
  cat "$tmp/job.log"
  exit 1
}
# d 512 and a 16k context: a stream long enough to still run when the drain starts, on a quiet machine too (33
# tokens/s measured beside other builds; a 4,000-token stream can end before mpirun passes SIGTERM on 10 s later).
model="$tmp/wide.gguf"
"$kvik" synth --dim 512 --layers 4 --heads 8 --kv-heads 4 --ff 2048 --vocab 512 --context 16384 --seed 3 \
  --tokenizer-from "$stories" "$model" >/dev/null 2>&1
cat >"$tmp/rank.sh" <<'EOF'
#!/usr/bin/env bash
# Runs one rank and records its exit status; the trap keeps this wrapper alive through mpirun's SIGTERM.
trap true TERM
"$@" &
pid=$!
while :; do
  rc=0
  wait "$pid" || rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
echo "$rc" >"$KVIK_DRAIN_DIR/exit.$OMPI_COMM_WORLD_RANK"
exit "$rc"
EOF
chmod +x "$tmp/rank.sh"
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
if [ "$target" = mpirun ]; then
  sigkill_timeout=10 grace=3 max_tokens=16000
  mpi+=(--mca odls_base_sigkill_timeout "$sigkill_timeout")
else
  sigkill_timeout=0 grace=120 max_tokens=1500
fi
name="kvik-drain-$$-$RANDOM"  # names this job's ranks for pgrep
KVIK_DRAIN_DIR=$tmp "${mpi[@]}" "$tmp/rank.sh" "$kvik" serve "$model" --host 127.0.0.1 --port 0 --threads 1 \
  --served-model-name "$name" --tensor-parallel-size 2 --shutdown-grace "$grace" >"$tmp/job.log" 2>&1 &
job=$!
port=$(listening_port "$tmp/job.log" "$job" 60)
url="http://127.0.0.1:$port"
wait_healthy "$url" "$tmp/job.log" "$job" 60
rank0=
for w in $(pgrep -P "$job"); do
  for p in $(pgrep -P "$w"); do
    tr '\0' '\n' <"/proc/$p/environ" | grep -qx OMPI_COMM_WORLD_RANK=0 && rank0=$p
  done
done
[ -n "$rank0" ] || fail "no rank 0 under mpirun $job"

curl -sN -m 120 "$url/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\": \"Once\", \"max_tokens\": $max_tokens, \"ignore_eos\": true, \"stream\": true}" >"$tmp/stream.txt" &
stream=$!
for _ in $(seq 300); do
  grep -q '^data: {' "$tmp/stream.txt" && break
  sleep 0.1
done
grep -q '^data: {' "$tmp/stream.txt" || fail "the stream did not start"
start=$SECONDS
if [ "$target" = mpirun ]; then kill -TERM "$job"; else kill -TERM "$rank0"; fi

# Draining: /health answers 503 saying so (under mpirun once the SIGTERM reaches rank 0), and so does new work.
health=
for _ in $(seq $(((sigkill_timeout + 10) * 10))); do
  health=$(curl -s -o "$tmp/health.json" -w '%{http_code}' "$url/health" || true)
  [ "$health" = 503 ] && break
  sleep 0.1
done
[ "$health" = 503 ] || fail "/health answered $health, not 503, after SIGTERM"
grep -q '"message":"the server is draining' "$tmp/health.json" || fail "/health: $(cat "$tmp/health.json")"
code=$(curl -s -o "$tmp/new.json" -w '%{http_code}' "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8}' || true)
[ "$code" = 503 ] || fail "a new request during the drain got $code (000: refused, the drain was over): $(cat "$tmp/new.json" 2>&1)"
grep -q '"error":{.*"message":"the server is draining' "$tmp/new.json" || fail "the 503 body: $(cat "$tmp/new.json")"

wait "$stream" || fail "the streaming request failed"
tail -c 16 "$tmp/stream.txt" | grep -q 'data: \[DONE\]' || fail "the stream did not end with [DONE]"
reason=$(grep -o '"finish_reason":"[a-z]*"' "$tmp/stream.txt" | tail -1)
expected='"finish_reason":"length"'
[ "$target" = mpirun ] && expected='"finish_reason":"abort"'
[ "$reason" = "$expected" ] || fail "the stream ended with $reason, not $expected"

rc=0
wait "$job" || rc=$?
job=
took=$((SECONDS - start))
bound=120
[ "$target" = mpirun ] && bound=$((2 * sigkill_timeout + 5))
[ "$took" -le "$bound" ] || fail "the job took $took s to end after SIGTERM (bound $bound s)"
# mpirun itself: 0 after rank 0's SIGTERM; OpenMPI 4.1 exits 1 once it was signalled, whatever the ranks did.
[ "$target" = mpirun ] || [ "$rc" -eq 0 ] || fail "mpirun exited $rc"
for r in 0 1; do
  [ "$(cat "$tmp/exit.$r" 2>/dev/null)" = 0 ] || fail "rank $r exited '$(cat "$tmp/exit.$r" 2>/dev/null)', not 0"
  grep -Eq "rank $r: KV blocks free at shutdown: ([0-9]+) of \\1\$" "$tmp/job.log" ||
    fail "rank $r's ledger is not all free at shutdown"
done
grep -q "SIGTERM: draining" "$tmp/job.log" || fail "rank 0 did not log the drain"
pgrep -f -- "--served-model-name $name " >/dev/null && fail "a rank outlived the job"
echo "OK ($target): 503 while draining, the stream ended ($reason), both ranks exited 0, mpirun $rc after $took s"
