#!/usr/bin/env bash
# The full load runs of `kvik serve` on stories260K (ctest runs smaller versions: serve_load_burst/_abuse):
#   1. 2000 clients connect at once, each streaming an 8-token completion: every one gets a whole 200 stream or a
#      429/503 with Retry-After; afterwards running = waiting = 0 and KV usage 0; the server's RSS is printed.
#   2. 200 slow-loris connections (a header byte every 5 s) and 100 clients that stop reading mid-stream beside
#      64 normal streaming clients: the normal ones are served at normal speed, the non-reading ones are aborted.
# Loopback only; each run starts and stops its own server. About 1-2 minutes on a 2-core machine.
# Usage: bench/serve_load.sh [BUILD_DIR]   (default build/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
MODEL="$ROOT/../shared/models/stories260K.gguf"
ulimit -n "$(ulimit -Hn)"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; ulimit -n $(ulimit -n)"
"$BUILD/tests/serve_load" burst "$BUILD/kvik" "$MODEL" "${CLIENTS:-2000}"
"$BUILD/tests/serve_load" abuse "$BUILD/kvik" "$MODEL" "${LORIS:-200}" "${STALLED:-100}" "${NORMAL:-64}"
