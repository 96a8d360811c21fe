#!/usr/bin/env bash
# Extracts the test assets that ship inside the pinned llama.cpp source: models/ggml-vocab-*.gguf (real
# vocabularies, with llama.cpp's own tokenizer test cases *.gguf.inp / *.gguf.out), models/templates/*.jinja (real
# chat templates) and LICENSE, into OUT (scripts/test.sh: <build dir>/llamacpp_assets, which tests/CMakeLists.txt
# hands to the tests as KVIK_LLAMACPP_ASSETS). The source is llama/gitRelease.bundle, a git bundle inside the npm
# package node-llama-cpp 3.21.1 that package-lock.json pins; npm ci installs it without running its scripts and
# without its optional prebuilt binaries (about 46 MB downloaded). Does nothing when OUT already holds the
# bundle's commit.
# Usage: tests/llamacpp_assets/extract.sh OUT
set -euo pipefail
out=${1:?usage: tests/llamacpp_assets/extract.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
bundle=$here/node_modules/node-llama-cpp/llama/gitRelease.bundle
# npm ci again only when package-lock.json changed since the last install (it takes 15 s).
if [ ! -f "$bundle" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
  (cd "$here" && npm ci --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error >/dev/null)
fi
[ -f "$bundle" ] || { echo "extract.sh: no $bundle after npm ci in $here" >&2; exit 1; }
commit=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1 }')
[ -n "$commit" ] || { echo "extract.sh: $bundle has no HEAD" >&2; exit 1; }
if [ "$(cat "$out/COMMIT" 2>/dev/null)" = "$commit" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git init -q --bare "$tmp/llama.cpp.git"
git -C "$tmp/llama.cpp.git" fetch -q "$bundle" HEAD
rm -rf "$out" && mkdir -p "$out"
git -C "$tmp/llama.cpp.git" archive "$commit" -- LICENSE ':(glob)models/ggml-vocab-*' ':(glob)models/templates/*.jinja' |
  tar -x -C "$out"
ls "$out"/models/ggml-vocab-*.gguf "$out"/models/templates/*.jinja >/dev/null  # fails when a kind came out empty
echo "$commit" > "$out/COMMIT"
echo "extract.sh: llama.cpp $commit: $(ls "$out"/models/ggml-vocab-*.gguf | wc -l) vocabularies," \
  "$(ls "$out"/models/templates/*.jinja | wc -l) chat templates in $out" >&2
