#!/usr/bin/env bash
# Fails when README.md or a page under docs/ names something that does not exist. Checked in every *.md alike:
#   - links [text](target): the file or folder exists; a #fragment names a heading of the page it points to;
#   - repository paths (src/…, tests/…, bench/…, scripts/…, tools/…, docs/…, fuzz/…, cmake/…, models/…) in code
#     spans and code blocks exist in the tree, and so do module paths in code spans under src/ (engine/block_pool.h,
#     or engine/block_pool for its .h / .cpp);
#   - `kvik SUBCOMMAND` in code spans and code blocks is one of the binary's subcommands, and every --flag (or -x)
#     after it is one of that subcommand's flags; a code span that starts with --flag names a flag of some
#     subcommand;
#   - nothing names the shared folder beside the repository (dot-dot-slash shared), and README.md stays a landing page of at most 200
#     lines (the reference belongs in docs/);
#   - every subcommand has its page docs/cli/SUBCOMMAND.md, every page is linked from docs/README.md or
#     docs/cli/README.md, and the generated flag tables equal what --help gives (scripts/gen_cli_docs.sh --check).
# Generated sections (<!-- BEGIN GENERATED … --> … <!-- END GENERATED -->) are checked by the last rule only.
# Usage: scripts/check_docs.sh [--kvik BIN] [--root DIR] [--tree DIR]
#   --root: where README.md and docs/ are read (default: this checkout); --tree: where every other path is looked up
#   (default: the root); --kvik: the binary whose --help is the truth (default: build/kvik of the tree).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$here
tree=
kvik=
while [ $# -gt 0 ]; do
  case "$1" in
    --kvik) kvik=$2; shift ;;
    --root) root=$2; shift ;;
    --tree) tree=$2; shift ;;
    *) echo "check_docs.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
tree=${tree:-$root}
kvik=${kvik:-$tree/build/kvik}
[ -x "$kvik" ] || { echo "check_docs.sh: no kvik binary at $kvik (build it: ninja -C build kvik)" >&2; exit 2; }

# The truth: subcommands (nested ones as "eval quant-error") and each one's flags.
help_entries() {  # $1: the help text; $2: section name → the first word of each entry of that section
  awk -v want="$2" '/^[A-Z][a-z]+:$/ { sec = substr($0, 1, length($0) - 1); next } sec == want && /^  [^ ]/ { print $1 }' <<<"$1"
}
declare -A flags=() subs=() nested=()
all_flags=" "
read_command() {  # $1: "serve" or "eval quant-error"
  local -a words
  read -r -a words <<<"$1"
  local text names n
  text=$("$kvik" "${words[@]}" --help 2>&1) || { echo "check_docs.sh: 'kvik $1 --help' failed" >&2; exit 2; }
  subs[$1]=1
  names=" "
  for n in $(help_entries "$text" Options); do
    n=${n//\{*\}/}
    names+="${n//,/ } "
  done
  flags[$1]=$names
  all_flags+="$names"
  for n in $(help_entries "$text" Subcommands); do
    nested[$1]+=" $n"
    read_command "$1 $n"
  done
}
top=$("$kvik" --help 2>&1)
for c in $(help_entries "$top" Subcommands); do read_command "$c"; done

pages=()
while IFS= read -r -d '' f; do pages+=("${f#"$root"/}"); done < <(find "$root/docs" -name '*.md' -print0 | sort -z)
pages=(README.md "${pages[@]}")

# One record per thing to check: FILE \t LINE \t KIND \t VALUE [\t COMMAND]; headings as "anchor" records.
records=$(cd "$root" && LC_ALL=C.UTF-8 awk '
  function emit(kind, value, extra) { printf "%s\t%d\t%s\t%s\t%s\n", FILENAME, FNR, kind, value, extra }
  function clean(t) { sub(/^[[(<"'"'"']+/, "", t); sub(/[])>,.:;"'"'"']+$/, "", t); sub(/:[0-9]+(-[0-9]+)?$/, "", t); return t }
  function path_token(t, in_span) {
    t = clean(t)
    if (t ~ /[*<>$]|\.\.\.|…/) return
    if (t ~ /^(\.\/)?(src|tests|bench|scripts|tools|docs|fuzz|cmake|models|\.ci)\/[A-Za-z0-9_.{},\/+-]*$/) emit("path", t)
    else if (in_span && t ~ /^(core|tensor|formats|kernels|dist|tokenizer|chat|model|engine|eval|server|interp|cli)\/[A-Za-z0-9_.{},\/+-]*$/) emit("srcpath", t)
  }
  function command_line(s, in_span,    n, i, j, tok, cmd, f) {
    gsub(/'"'"'[^'"'"']*'"'"'/, " Q ", s); gsub(/"[^"]*"/, " Q ", s)
    n = split(s, tok, /[ \t]+/)
    cmd = ""
    for (i = 1; i <= n; i++) {
      if (tok[i] ~ /^(\||\|\||&&|;|&|#.*|>|2>|<)$/) { if (tok[i] ~ /^#/) break; cmd = ""; continue }
      if ((tok[i] == "kvik" || tok[i] ~ /\/kvik$/) && i < n && tok[i + 1] ~ /^[a-z][a-z0-9-]*$/) {
        cmd = tok[i + 1]; emit("sub", cmd)
        if (i + 2 <= n && tok[i + 2] ~ /^[a-z][a-z0-9-]*$/) emit("sub2", cmd, tok[i + 2])
        i++; continue
      }
      if (cmd != "") {
        f = clean(tok[i]); sub(/=.*/, "", f)
        if (f ~ /^--[a-z][a-z0-9-]*$/ || f ~ /^-[a-zA-Z]$/) emit("flag", f, cmd)
      }
    }
  }
  function span(s,    n, i, tok) {
    if (s ~ /^--[a-z]/) {
      n = split(s, tok, /[ \t]+/)
      for (i = 1; i <= n; i++) { f = clean(tok[i]); sub(/=.*/, "", f); if (f ~ /^--[a-z][a-z0-9-]*$/) emit("flag", f, "*") }
    }
    if (s ~ /(^|[ \/])kvik [a-z]/) command_line(s, 1)
    n = split(s, tok, /[ \t]+/)
    for (i = 1; i <= n; i++) path_token(tok[i], 1)
  }
  FNR == 1 { gen = 0; fence = 0; joined = ""; delete slugs }
  /\.\.[\/]shared/ && !gen { emit("shared", "..[/]shared") }
  /^<!-- BEGIN GENERATED/ { gen = 1; next }
  /^<!-- END GENERATED -->/ { gen = 0; next }
  gen { next }
  /^ *(```|~~~)/ { fence = !fence; joined = ""; next }
  fence {
    line = $0
    if (line ~ /\\$/) { joined = joined substr(line, 1, length(line) - 1) " "; next }
    line = joined line; joined = ""
    command_line(line, 0)
    n = split(line, tok, /[ \t]+/)
    for (i = 1; i <= n; i++) path_token(tok[i], 0)
    next
  }
  /^#+ / {
    h = $0; sub(/^#+ +/, "", h); gsub(/`/, "", h); gsub(/\[[^]]*\]\([^)]*\)/, "", h)
    h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
    if (h in slugs) { slugs[h]++; h = h "-" slugs[h] } else slugs[h] = 0
    emit("anchor", h)
  }
  {
    line = $0
    while (match(line, /`[^`]+`/)) { span(substr(line, RSTART + 1, RLENGTH - 2)); line = substr(line, 1, RSTART - 1) " " substr(line, RSTART + RLENGTH) }
    while (match(line, /\]\([^) ]+( "[^"]*")?\)/)) {
      t = substr(line, RSTART + 2, RLENGTH - 3); sub(/ ".*/, "", t)
      emit("link", t)
      line = substr(line, RSTART + RLENGTH)
    }
  }
' "${pages[@]}")

declare -A anchors=()
while IFS=$'\t' read -r file _ kind value _; do
  [ "$kind" = anchor ] && anchors["$file#$value"]=1
done <<<"$records"

bad=0
fail() { echo "$1: $2" >&2; bad=1; }
exists() {  # a repository-relative path (with one {a,b} group at most): README.md and docs/ from the root
  local p=${1#./} pre post alt
  if [[ "$p" =~ ^(.*)\{([^}]*)\}(.*)$ ]]; then
    pre=${BASH_REMATCH[1]} post=${BASH_REMATCH[3]}
    IFS=, read -r -a alt <<<"${BASH_REMATCH[2]}"
    for a in "${alt[@]}"; do exists "$pre$a$post" || return 1; done
    return 0
  fi
  if [[ "$p" == docs/* || "$p" == docs || "$p" == README.md ]]; then [ -e "$root/$p" ]; else [ -e "$tree/$p" ]; fi
}
normalize() {  # $1 relative to the folder $2 → a repository-relative path without . and ..
  local -a out=() parts
  IFS=/ read -r -a parts <<<"$2/$1"
  for s in "${parts[@]}"; do
    case "$s" in "" | .) ;; ..) [ ${#out[@]} -gt 0 ] && unset 'out[${#out[@]}-1]' ;; *) out+=("$s") ;; esac
  done
  (IFS=/; echo "${out[*]}")
}
declare -A indexed=()
while IFS=$'\t' read -r file line kind value cmd; do
  at="$file:$line"
  case "$kind" in
    anchor) ;;
    shared) fail "$at" "names the shared folder outside the repository" ;;
    path) exists "$value" || fail "$at" "'$value' does not exist in the repository" ;;
    srcpath) exists "src/$value" || exists "src/$value.h" || exists "src/$value.cpp" ||
      fail "$at" "'$value' does not exist under src/" ;;
    sub) [ -n "${subs[$value]:-}" ] || fail "$at" "'kvik $value' is not a kvik subcommand (kvik --help)" ;;
    sub2)
      if [ -n "${nested[$value]:-}" ] && [[ " ${nested[$value]} " != *" $cmd "* ]]; then
        fail "$at" "'kvik $value $cmd' is not a subcommand of kvik $value"
      fi
      ;;
    flag)
      if [ "$cmd" = "*" ]; then
        [[ "$all_flags" == *" $value "* ]] || fail "$at" "'$value' is not a flag of any kvik subcommand"
      elif [ -n "${subs[$cmd]:-}" ]; then
        ok=0
        [[ "${flags[$cmd]}" == *" $value "* ]] && ok=1
        for n in ${nested[$cmd]:-}; do [[ "${flags[$cmd $n]}" == *" $value "* ]] && ok=1; done
        [ "$ok" -eq 1 ] || fail "$at" "'$value' is not a flag of kvik $cmd (kvik $cmd --help)"
      fi
      ;;
    link)
      case "$value" in http://* | https://* | mailto:*) continue ;; esac
      target=${value%%#*}
      frag=
      [[ "$value" == *#* ]] && frag=${value#*#}
      if [ -z "$target" ]; then
        resolved=$file
      elif [[ "$target" == /* ]]; then
        resolved=$(normalize "${target#/}" .)
      else
        resolved=$(normalize "$target" "$(dirname "$file")")
      fi
      [[ "$file" == docs/README.md || "$file" == docs/cli/README.md ]] && indexed[$resolved]=1
      if ! exists "$resolved"; then
        fail "$at" "link target '$value' does not exist"
      elif [ -n "$frag" ] && [[ "$resolved" == *.md ]] && [ -z "${anchors["$resolved#$frag"]:-}" ]; then
        fail "$at" "link '$value': $resolved has no heading '#$frag'"
      fi
      ;;
  esac
done <<<"$records"

lines=$(wc -l <"$root/README.md")
[ "$lines" -le 200 ] || fail README.md "$lines lines: the README is a landing page of at most 200; move reference to docs/"
for c in "${!subs[@]}"; do
  [[ "$c" == *" "* ]] && continue
  [ -f "$root/docs/cli/$c.md" ] || fail "docs/cli/$c.md" "missing: every kvik subcommand has a page (kvik $c)"
done
for c in "${!subs[@]}"; do
  page=$root/docs/cli/${c%% *}.md
  [ -f "$page" ] || continue
  grep -qxF "<!-- BEGIN GENERATED by scripts/gen_cli_docs.sh: kvik $c --help -->" "$page" ||
    fail "docs/cli/${c%% *}.md" "has no generated section for 'kvik $c --help' (see scripts/gen_cli_docs.sh)"
done
for p in "${pages[@]}"; do
  case "$p" in README.md | docs/README.md) continue ;; esac
  c=${p#docs/cli/}
  [[ "$p" == docs/cli/*.md && -n "${subs[${c%.md}]:-}" ]] && continue  # in docs/cli/README.md's generated table
  [ -n "${indexed[$p]:-}" ] || fail "$p" "is not linked from docs/README.md (the index of the manual) or docs/cli/README.md"
done
"$here/scripts/gen_cli_docs.sh" --check --kvik "$kvik" --root "$root" || bad=1

[ "$bad" -eq 0 ] && echo "docs ok: README.md and $((${#pages[@]} - 1)) pages under docs/ checked against the tree and $kvik"
exit "$bad"
