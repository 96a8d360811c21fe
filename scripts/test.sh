#!/usr/bin/env bash
# Installs dependencies, checks the format, builds, and runs the whole test suite (ctest, both cores).
# Usage: scripts/test.sh [--sanitize]   (--sanitize runs it under ASan+UBSan in build-asan/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/check_format.sh  # .clang-format, before the build: a formatting slip fails in seconds
dir=$(scripts/build.sh "$@" | tail -n 1)
# Test-time references (real tokenizer files, @huggingface/jinja), pinned by package-lock.json.
(cd tests/tokenizer_ref && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
(cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error >/dev/null)  # the openai client for the server tests
(cd tests/structured && npm ci --no-audit --no-fund --loglevel=error >/dev/null)  # ajv, the independent schema validator
(cd tests/web && npm ci --no-audit --no-fund --loglevel=error >/dev/null)  # puppeteer-core for the browser tests
tests/llamacpp_assets/extract.sh "$dir/llamacpp_assets"  # vocabularies and chat templates of the pinned llama.cpp
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$dir" -j2 --output-on-failure --timeout 900
