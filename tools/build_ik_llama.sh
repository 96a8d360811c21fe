#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench natively (-march=native, CPU only) as the second peer of
# bench/compare_llamacpp.sh (IK_LLAMA_BENCH=<dir>/build/bin/llama-bench). Nothing is downloaded: SRC is a checkout
# of https://github.com/ikawrakow/ik_llama.cpp the user made (the figures in README were measured at commit
# 8337e4cd3). About 15–25 minutes on 2 cores (its iqk kernels are large).
# Usage: tools/build_ik_llama.sh SRC [JOBS]
set -euo pipefail
SRC="${1:?usage: tools/build_ik_llama.sh SRC [JOBS]}"
JOBS="${2:-$(nproc)}"
[[ -f "$SRC/CMakeLists.txt" && -d "$SRC/ggml/src/iqk" ]] || { echo "$SRC is not an ik_llama.cpp checkout" >&2; exit 1; }
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >&2
cmake --build "$SRC/build" --target llama-bench -j "$JOBS" >&2
echo "$SRC/build/bin/llama-bench"
