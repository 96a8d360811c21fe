# Sourced by the mpi serve tests, which start `kvik serve --port 0` (the kernel picks a free port at bind time; a port
# drawn at random in advance can be taken by another test's server or by an outgoing connection's ephemeral port, and
# the server then exits while the test talks to nothing).

# poll_server LOG PID SECONDS STATE TIMEOUT_MESSAGE CMD...: runs CMD every 0.1 s until it succeeds; fails, printing
# LOG, with "the server exited before it STATE" if process PID exits first, or with TIMEOUT_MESSAGE after SECONDS.
poll_server() {
  local log=$1 pid=$2 limit=$3 state=$4 timeout_message=$5 _
  shift 5
  for _ in $(seq $((limit * 10))); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server exited before it $state:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "FAIL: $timeout_message:" >&2
  cat "$log" >&2
  return 1
}

# Prints the port of the first "Listening on SCHEME://HOST:PORT" line in LOG; fails if there is none yet.
port_in_log() {
  local port
  port=$(grep -om1 'Listening on [a-z]*://[^ ]*:[0-9]*' "$1" 2>/dev/null | grep -o '[0-9]*$' || true)
  [ -n "$port" ] && echo "$port"
}

# listening_port LOG PID [SECONDS]: prints the port of the server's "Listening on" line in LOG (default 40 s).
listening_port() {
  local limit=${3:-40}
  poll_server "$1" "$2" "$limit" listened "the server printed no 'Listening on' line in $limit s" port_in_log "$1"
}

# wait_healthy URL LOG PID [SECONDS]: waits for URL/health to answer 200 (default 40 s).
wait_healthy() {
  local limit=${4:-40}
  poll_server "$2" "$3" "$limit" "was ready" "$1/health did not answer 200 in $limit s" curl -sf -o /dev/null "$1/health"
}
