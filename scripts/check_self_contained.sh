#!/usr/bin/env bash
# Fails when a file of the repository names a folder outside it (../shared): everything the build, the tests and
# scripts/run.sh need is inside the repository (models/, tests/, tools/); an optional peer is found through an
# environment variable (tools/peer_lib.sh).
# Usage: scripts/check_self_contained.sh [ROOT]   (default: this checkout)
set -euo pipefail
cd "${1:-"$(dirname "$0")/.."}"
# Benchmark tooling may find an optional peer beside the repository (through an environment variable).
excluded='^\./bench/'
hits=$(grep -rnI --exclude-dir=.git --exclude-dir='build*' --exclude-dir=node_modules \
  --exclude=check_self_contained.sh -e '\.\./shared' . | grep -Ev "$excluded" || true)
if [ -n "$hits" ]; then
  echo "$hits" >&2
  echo "check_self_contained: the files above name ../shared, a folder outside the repository" >&2
  exit 1
fi
echo "self-contained: no file under $(pwd) names ../shared"
