#!/usr/bin/env bash
# `kvik serve` under mpirun with tensor, pipeline or expert parallelism: 16 concurrent greedy completions and 4 with
# n = 4 (forks, copy-on-write) must return the same text as one process's server, every KV block must be free again
# afterwards (GET /v1/engine/state), and after SIGTERM to rank 0 the job exits 0 with every rank's ledger all free.
# Usage: parallel_serve.sh KVIK MODEL TP PP [FLAGS OF THE PARALLEL SERVER...]
#   MODEL: a path, or synth-gqa / synth-mixtral / synth-qwen3moe[-TYPE] written here (synth_model.sh).
set -euo pipefail
kvik=$1 model=$2 tp=$3 pp=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
source "$here/synth_model.sh"
source "$here/serve_wait.sh"
tmp=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [ -n "${KEEP:-}" ] && cp -r "$tmp" /tmp/serve_keep; rm -rf "$tmp"
}
trap cleanup EXIT
if [ "${model%%-*}" = synth ]; then
  model=$(synth_model "$kvik" "$here/../../models/stories260K.gguf" "$model" "$tmp")
fi

# Starts a server (the command line in "$@"), waits for /health, runs the 16 requests into $tmp/$name.*, stops it.
run() {
  local name=$1 port
  shift
  "$@" --host 127.0.0.1 --port 0 --threads 1 --max-model-len 128 >"$tmp/$name.log" 2>&1 &
  server=$!
  port=$(listening_port "$tmp/$name.log" "$server")
  wait_healthy "http://127.0.0.1:$port" "$tmp/$name.log" "$server"
  local i p
  for i in $(seq 16); do
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"Once upon a time there was a child number $i who\", \"max_tokens\": 32, \"temperature\": 0}" \
      >"$tmp/$name.$i.json" &
  done
  for i in $(seq 4); do  # n = 4: forks share the prompt's blocks, the first write copies the partial one
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"A tale of $i friends:\", \"max_tokens\": 24, \"temperature\": 0, \"n\": 4}" \
      >"$tmp/$name.n$i.json" &
  done
  for p in $(jobs -p | grep -v "^$server$"); do
    wait "$p" || { echo "FAIL: $name: a request failed (curl exit $?)"; cat "$tmp/$name.log"; exit 1; }
  done
  curl -sS "http://127.0.0.1:$port/v1/engine/state" >"$tmp/$name.state.json" ||
    { echo "FAIL: $name: GET /v1/engine/state"; cat "$tmp/$name.log"; exit 1; }
  # Under mpirun, SIGTERM to rank 0 (it drains, then stops the other ranks: every rank logs its ledger).
  local target=$server w
  for w in $(pgrep -P "$server"); do
    tr '\0' '\n' <"/proc/$w/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && target=$w
  done
  kill -TERM "$target"
  local rc=0
  wait "$server" || rc=$?
  server=
  [ "$rc" -eq 0 ] || { echo "FAIL: $name: exit $rc after SIGTERM"; cat "$tmp/$name.log"; exit 1; }
}

run one "$kvik" serve "$model"
run par mpirun --allow-run-as-root --oversubscribe -np $((tp * pp)) "$kvik" serve "$model" \
  --tensor-parallel-size "$tp" --pipeline-parallel-size "$pp" "$@"
grep -q "parallel job: $((tp * pp)) ranks" "$tmp/par.log" || { echo "FAIL: no parallel job"; cat "$tmp/par.log"; exit 1; }
if [[ " $* " == *" --enable-expert-parallel "* ]]; then
  grep -q "(expert parallel)" "$tmp/par.log" || { echo "FAIL: the job did not run expert parallel"; cat "$tmp/par.log"; exit 1; }
fi
for i in $(seq 16); do
  a=$(grep -o '"text":"[^"]*"' "$tmp/one.$i.json" || true)
  b=$(grep -o '"text":"[^"]*"' "$tmp/par.$i.json" || true)
  [ -n "$a" ] || { echo "FAIL: request $i got no text from one process: $(cat "$tmp/one.$i.json")"; exit 1; }
  [ "$a" = "$b" ] || { echo "FAIL: request $i: one process $a, TP=$tp PP=$pp $b"; exit 1; }
done
for i in $(seq 4); do
  a=$(grep -o '"text":"[^"]*"' "$tmp/one.n$i.json" || true)
  b=$(grep -o '"text":"[^"]*"' "$tmp/par.n$i.json" || true)
  [ "$(echo "$a" | grep -c text)" -eq 4 ] || { echo "FAIL: n=4 request $i: $(cat "$tmp/one.n$i.json")"; exit 1; }
  [ "$a" = "$b" ] || { echo "FAIL: n=4 request $i: one process $a, TP=$tp PP=$pp $b"; exit 1; }
done
free=$(grep -o '"num_free_blocks":[0-9]*' "$tmp/par.state.json" | cut -d: -f2)
total=$(grep -o '"num_blocks":[0-9]*' "$tmp/par.state.json" | cut -d: -f2)
[ -n "$free" ] && [ "$free" = "$total" ] || { echo "FAIL: $free of $total KV blocks free after the requests"; exit 1; }
for r in $(seq 0 $((tp * pp - 1))); do
  grep -q "rank $r: KV blocks free at shutdown: $total of $total\$" "$tmp/par.log" ||
    { echo "FAIL: rank $r's ledger is not all free at shutdown"; grep "free at shutdown" "$tmp/par.log"; exit 1; }
done
echo "OK: serve TP=$tp PP=$pp $*: 16 completions and 4 with n = 4 equal one process's; $free of $total blocks free"
