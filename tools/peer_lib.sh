# Sourced by the tools and bench scripts that run llama.cpp beside kvik (the "peer"). The peer is not part of the
# repository: it is a folder, named by the environment variable KVIK_PEER_DIR, where the npm package
# node-llama-cpp 3.21.1 is installed with its prebuilt llama.cpp CPU libraries (@node-llama-cpp/linux-x64). The
# repository's own driver scripts (tools/llamacpp_*.mjs) are copied next to its node_modules before they run, because
# ES modules resolve packages from the script's folder.
#
# peer_require: sets PEER to $KVIK_PEER_DIR, or stops the calling script with a message saying what is missing and
# how to install it. peer_native TOOL: the path of a natively built llama.cpp tool (llama-server, llama-perplexity,
# llama-quantize) in $KVIK_PEER_DIR/llama.cpp/build/bin, or stops likewise.

peer_install_help() {
  cat >&2 <<'HELP'
How to install the llama.cpp peer (outside the repository; node and npm needed, about 700 MB):
  mkdir -p /tmp/kvik-peer && cp tests/llamacpp_assets/package.json tests/llamacpp_assets/package-lock.json /tmp/kvik-peer/
  (cd /tmp/kvik-peer && npm ci)      # node-llama-cpp 3.21.1 and its prebuilt CPU binaries
  export KVIK_PEER_DIR=/tmp/kvik-peer
The native llama.cpp tools are built from the source node-llama-cpp ships (llama/gitRelease.bundle, a git bundle):
  git clone "$KVIK_PEER_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$KVIK_PEER_DIR/llama.cpp"
  cmake -S "$KVIK_PEER_DIR/llama.cpp" -B "$KVIK_PEER_DIR/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && ninja -C "$KVIK_PEER_DIR/llama.cpp/build" llama-server llama-perplexity
HELP
}

peer_require() {
  local why=""
  if [[ -z "${KVIK_PEER_DIR:-}" ]]; then
    why="KVIK_PEER_DIR is not set"
  elif [[ ! -f "$KVIK_PEER_DIR/node_modules/node-llama-cpp/package.json" ]]; then
    why="$KVIK_PEER_DIR/node_modules/node-llama-cpp is missing"
  fi
  if [[ -n "$why" ]]; then
    echo "$(basename "$0"): needs the llama.cpp peer (node-llama-cpp 3.21.1 in \$KVIK_PEER_DIR), and $why." >&2
    peer_install_help
    exit 1
  fi
  PEER="$KVIK_PEER_DIR"
}

peer_native() {
  peer_require
  local tool="$PEER/llama.cpp/build/bin/$1"
  if [[ ! -x "$tool" ]]; then
    echo "$(basename "$0"): needs llama.cpp's native $1, and $tool is missing." >&2
    peer_install_help
    exit 1
  fi
  echo "$tool"
}

# The peer's versions as one line: node-llama-cpp's and the llama.cpp release its binaries were built from.
peer_version() {
  local pkg="$PEER/node_modules/node-llama-cpp"
  printf 'node-llama-cpp %s (llama.cpp %s)\n' "$(node -p "require('$pkg/package.json').version")" \
    "$(node -p "require('$pkg/llama/llama.cpp.info.json').tag" 2>/dev/null || echo unknown)"
}
