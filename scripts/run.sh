#!/usr/bin/env bash
# Installs dependencies, builds, and runs kvik's main job. With no arguments it generates a story with
# ../shared/models/stories260K.gguf; otherwise the arguments are passed to kvik (e.g. `generate --model M.gguf ...`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
if [ $# -eq 0 ]; then
  set -- generate --model ../shared/models/stories260K.gguf --prompt "Once upon a time" --max-tokens 128 --temperature 0
fi
exec ./build/kvik "$@"
