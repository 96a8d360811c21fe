# Sourced by the mpi serve tests, which start `kvik serve --port 0` (the kernel picks a free port at bind time; a port
# drawn at random in advance can be taken by another test's server or by an outgoing connection's ephemeral port, and
# the server then exits while the test talks to nothing).
#
# listening_port LOG PID [SECONDS]: prints the port of the first "Listening on SCHEME://HOST:PORT" line in LOG;
# fails, printing LOG, if process PID exits first or no such line comes in SECONDS (default 40).
listening_port() {
  local log=$1 pid=$2 limit=${3:-40} port _
  for _ in $(seq $((limit * 10))); do
    port=$(grep -om1 'Listening on [a-z]*://[^ ]*:[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && echo "$port" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server exited before it listened:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "FAIL: the server printed no 'Listening on' line in $limit s:" >&2
  cat "$log" >&2
  return 1
}

# wait_healthy URL LOG PID [SECONDS]: waits for URL/health to answer 200; fails, printing LOG, if process PID exits
# first or it does not answer 200 in SECONDS (default 40).
wait_healthy() {
  local url=$1 log=$2 pid=$3 limit=${4:-40} _
  for _ in $(seq $((limit * 10))); do
    curl -sf "$url/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server exited before it was ready:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "FAIL: $url/health did not answer 200 in $limit s:" >&2
  cat "$log" >&2
  return 1
}
