#!/usr/bin/env bash
# Proof that scripts/check_docs.sh catches each kind of mistake: a copy of README.md and docs/ with one mistake of
# every kind planted must fail, and the failure must name each of them.
# Usage: tests/docs_check_catches.sh KVIK_BINARY
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
kvik=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$repo/README.md" "$tmp/"
cp -r "$repo/docs" "$tmp/"

cat >>"$tmp/docs/concepts.md" <<'EOF'

## Planted mistakes

See `src/engine/no_such_file.h`, the module `engine/parallel_worker.h`, `kvik servee`, `kvik generate --port 8000`,
`--no-such-flag`, [a page](no-such-page.md), [a heading](serving.md#no-such-heading) and SHARED_PATH/models.

```sh
kvik serve models/stories260K.gguf \
  --no-such-serve-flag 1
kvik eval no-such-eval
```
EOF
sed -i "s|SHARED_PATH|..$(printf /)shared|" "$tmp/docs/concepts.md"  # planted here, so this file itself names no outside folder
# A generated table that no longer matches --help, a subcommand without its page, a page no index links.
sed -i 's/| Address to listen on |/| Address to listen on, edited by hand |/' "$tmp/docs/cli/serve.md"
rm "$tmp/docs/cli/trace.md"
printf '# Orphan\n\nNo index links this page.\n' >"$tmp/docs/orphan.md"
# A README that grew back into a manual.
for i in $(seq 200); do echo "Reference line $i." >>"$tmp/README.md"; done

if out=$("$repo/scripts/check_docs.sh" --kvik "$kvik" --root "$tmp" --tree "$repo" 2>&1); then
  echo "check_docs.sh passed a copy with planted mistakes" >&2
  exit 1
fi
status=0
expect() {
  if ! grep -qF -- "$1" <<<"$out"; then
    echo "check_docs.sh did not report: $1" >&2
    status=1
  fi
}
expect "'src/engine/no_such_file.h' does not exist in the repository"
expect "'engine/parallel_worker.h' does not exist under src/"
expect "'kvik servee' is not a kvik subcommand"
expect "'--port' is not a flag of kvik generate"
expect "'--no-such-flag' is not a flag of any kvik subcommand"
expect "link target 'no-such-page.md' does not exist"
expect "link 'serving.md#no-such-heading': docs/serving.md has no heading '#no-such-heading'"
expect "names the shared folder outside the repository"
expect "'--no-such-serve-flag' is not a flag of kvik serve"
expect "'kvik eval no-such-eval' is not a subcommand of kvik eval"
expect "docs/cli/serve.md: its flag tables differ from kvik's --help"
expect "docs/cli/trace.md: missing: every kvik subcommand has a page"
expect "docs/orphan.md: is not linked from docs/README.md"
expect "README.md: $(( $(wc -l <"$repo/README.md") + 200 )) lines: the README is a landing page of at most 200"
# Nothing else: the unplanted parts of the copy are as clean as the originals.
unexpected=$(grep -v -e '^docs/concepts.md:' -e '^docs/cli/serve.md' -e '^docs/cli/trace.md' -e '^docs/orphan.md' \
  -e '^README.md: [0-9]* lines' -e '^[-+@ ]' <<<"$out" || true)
if [ -n "$unexpected" ]; then
  echo "check_docs.sh reported more than the planted mistakes:" >&2
  echo "$unexpected" >&2
  status=1
fi
[ "$status" -eq 0 ] && echo "check_docs.sh caught every planted mistake"
exit "$status"
