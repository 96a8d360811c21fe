#!/usr/bin/env bash
# Configures and builds kvik. Usage: scripts/build.sh [--sanitize]   (ASan+UBSan build in build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build; flags=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVIK_SANITIZE=ON); fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
ninja -C "$dir" -j"$(nproc)" >&2  # progress and errors on stderr; stdout carries only the build dir
echo "$dir"
