#!/usr/bin/env bash
# Fails when a C++ file of the repository differs from .clang-format (Debian's clang-format 14).
# Usage: scripts/check_format.sh [--fix]   (--fix rewrites the files in place)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h')
[ ${#files[@]} -gt 0 ] || { echo "check_format: no C++ files found (not a git checkout?)" >&2; exit 1; }
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/kvik-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/kvik-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
  rm -f /tmp/kvik-format.$$
  echo "check_format: the files above are not formatted; run scripts/check_format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/kvik-format.$$
echo "check_format: ${#files[@]} files formatted"
