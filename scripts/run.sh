#!/usr/bin/env bash
# Installs dependencies, builds, and runs kvik's main job: with no arguments, the OpenAI-compatible server on
# http://127.0.0.1:8000 serving the bundled models/stories260K.gguf (models/README.md); otherwise the arguments
# are passed to kvik (e.g. `serve MODEL.gguf --port 9000` or `generate --model M.gguf --prompt Hi`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
if [ $# -eq 0 ]; then
  set -- serve models/stories260K.gguf
fi
exec ./build/kvik "$@"
