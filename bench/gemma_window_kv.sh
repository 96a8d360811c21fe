#!/usr/bin/env bash
# KV bytes a 32k-token conversation holds on Gemma-3-shaped models (1B, 4B, 12B, 27B: their layer counts, KV heads,
# head dimension, 5 local : 1 global layers and windows 512 / 1024), the local layers' blocks freed out of the window
# vs one pool without freeing, from the engine's block accounting (no weights: bench/gemma_window_kv.cpp), and the
# 32k-token requests a 16 GiB KV budget fits either way. Deterministic (no timing): prints the JSON once.
# Usage: bench/gemma_window_kv.sh [--tokens 32768] [--decode 512] [--block-size 16] [--budget-gib 16]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja >/dev/null
nice ninja -C "$build" bench_gemma_window_kv >/dev/null
"$build/bench/bench_gemma_window_kv" "$@"
