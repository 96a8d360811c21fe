#!/usr/bin/env bash
# Fails when a source file includes a module above its own layer (docs/architecture.md, "Layers").
# Usage: scripts/check_layers.sh [SRC_DIR]   (default: src/ of this checkout)
set -euo pipefail
src=${1:-"$(dirname "$0")/../src"}
# module → the modules it may include (besides itself); lower layers first.
declare -A allowed=(
  [core]=""
  [tensor]="core"
  [formats]="core tensor"
  [kernels]="core tensor"
  [dist]="core"
  [tokenizer]="core formats"
  [chat]="core"
  [model]="core tensor formats kernels tokenizer dist"
  [engine]="core tensor formats kernels tokenizer model dist"
  [eval]="core tensor formats kernels tokenizer model engine dist"
  [server]="core tensor formats kernels tokenizer model chat engine dist"
  [interp]="core tensor formats kernels tokenizer model engine dist"
  [cli]="core tensor formats kernels tokenizer model chat engine eval server interp dist"
)
bad=0
while IFS= read -r -d '' f; do
  rel=${f#"$src"/}
  mod=${rel%%/*}
  [[ -v allowed[$mod] ]] || { echo "$rel: module '$mod' has no place in the layer table" >&2; bad=1; continue; }
  while IFS= read -r inc; do
    dep=${inc%%/*}
    [[ "$dep" == "$mod" ]] && continue
    [[ " ${allowed[$mod]} " == *" $dep "* ]] && continue
    echo "$rel includes \"$inc\": $mod may not depend on $dep" >&2
    bad=1
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\/[^"]*\)".*/\1/p' "$f")
done < <(find "$src" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
[ "$bad" -eq 0 ] && echo "layers ok: $src"
exit "$bad"
