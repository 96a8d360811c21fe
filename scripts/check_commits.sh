#!/usr/bin/env bash
# Fails when a commit subject since BASE is longer than 72 characters (the details belong in the commit body).
# Usage: scripts/check_commits.sh [BASE]   (default: main; checks BASE..HEAD)
set -euo pipefail
export LC_ALL=C.UTF-8
base=${1:-main}
limit=72
git rev-parse --verify --quiet "$base^{commit}" >/dev/null || { echo "check_commits.sh: no commit '$base'" >&2; exit 2; }
bad=0
while IFS=$'\t' read -r hash subject; do
  n=$(printf '%s' "$subject" | wc -m)
  if [ "$n" -gt "$limit" ]; then
    echo "$hash: subject is $n characters (at most $limit): $subject" >&2
    bad=1
  fi
done < <(git log --format='%h%x09%s' "$base..HEAD")
[ "$bad" -eq 0 ] && echo "commit subjects ok: $(git rev-list --count "$base..HEAD") commits since $base"
exit "$bad"
