#!/usr/bin/env bash
# Runs the shell examples of the user guide (docs/*.md) as written, page by page, and fails
# naming the page, the block and its line when one fails. The guide's Rust examples are
# doctests of crates/guide (`cargo test -p eventpipe-guide`).
#
#   bash ci/docs.sh                  # every page
#   bash ci/docs.sh docs/collect.md  # some pages
#
# What it runs: every fenced block whose info string starts with `sh`. Each page runs as one
# bash script (blocks in order, so variables and background jobs carry from one block to
# the next) with `set -euo pipefail`, in a fresh temporary directory, with the freshly built
# `eptrace` and the workspace's example programs first on PATH: what the guide's setup
# block (`sh setup`, not run here) has a reader build. TMPDIR is a folder of the page's
# own, so the diagnostics sockets of the programs it starts are the only ones it sees. Background jobs a page leaves
# running are killed when it ends.
#
# Tags after `sh`:
#   setup   not run (the reader's one-time setup; this script does the same itself)
#   dotnet  needs the .NET runtimes and test app of ci/dotnet.sh ($EVENTPIPE_DOTNET_ROOT/env,
#           default target/dotnet/env, which sets DOTNET8, DOTNET31 and TESTAPP). Without
#           them the page's dotnet blocks are skipped with a one-line notice, unless
#           EVENTPIPE_REQUIRE_DOTNET=1 (set by .ci/run) makes that a failure.
#
# A page may take at most EVENTPIPE_DOCS_TIMEOUT seconds (default 300). With
# EVENTPIPE_DOCS_SHOW=1 each page's output is printed, to compare with its `text` blocks.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

pages=("$@")
if [ ${#pages[@]} -eq 0 ]; then
  pages=(docs/*.md)
fi
for page in "${pages[@]}"; do
  [ -f "$page" ] || { echo "ci/docs.sh: no such page: $page" >&2; exit 1; }
done

echo "ci/docs.sh: building eptrace and the example programs"
# The whole workspace, as `cargo test --workspace` builds it: after the test suite (as in
# .ci/run) this finds everything built, with the same features.
cargo build -q --workspace --bins --examples
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
case $TARGET in /*) ;; *) TARGET=$REPO/$TARGET ;; esac
BIN="$TARGET/debug:$TARGET/debug/examples"

DOTNET_ENV=${EVENTPIPE_DOTNET_ROOT:-$REPO/target/dotnet}/env
have_dotnet=0
[ -f "$DOTNET_ENV" ] && have_dotnet=1

# Prints the blocks of a page as a bash script: each block is preceded by a line that
# records its number and line (for the failure message) and followed by nothing else.
# $1: the page; $2: 1 to include `sh dotnet` blocks.
extract() {
  awk -v with_dotnet="$2" '
    BEGIN { inblock = 0; n = 0 }
    /^```/ {
      if (!inblock) {
        info = substr($0, 4)
        split(info, tags, /[ ,]+/)
        inblock = 1; run = 0
        if (tags[1] == "sh") {
          run = 1
          for (i = 2; i in tags; i++) {
            if (tags[i] == "setup") run = 0
            if (tags[i] == "dotnet" && with_dotnet != 1) run = 0
          }
        }
        if (run) { n++; printf "__block %d %d\n", n, NR }
        next
      } else {
        inblock = 0
        next
      }
    }
    inblock && run { print }
  ' "$1"
}

count_tag() { # page, tag: how many `sh TAG` blocks it has
  grep -cE '^```sh([ ,]+[a-z-]+)*[ ,]+'"$2"'([ ,]|$)' "$1" || true
}

failed=0
total_start=$SECONDS
for page in "${pages[@]}"; do
  with_dotnet=1
  dotnet_blocks=$(count_tag "$page" dotnet)
  if [ "$dotnet_blocks" -gt 0 ] && [ $have_dotnet = 0 ]; then
    if [ "${EVENTPIPE_REQUIRE_DOTNET:-}" = 1 ]; then
      echo "ci/docs.sh: $page needs .NET ($DOTNET_ENV is missing; run bash ci/dotnet.sh) and EVENTPIPE_REQUIRE_DOTNET=1" >&2
      failed=1
      continue
    fi
    echo "ci/docs.sh: $page: skipping its $dotnet_blocks .NET blocks ($DOTNET_ENV is missing; bash ci/dotnet.sh installs it)"
    with_dotnet=0
  fi
  body=$(extract "$page" $with_dotnet)
  [ -n "$body" ] || continue
  work=$(mktemp -d "${TMPDIR:-/tmp}/eptrace-docs.XXXXXX")
  mkdir "$work/tmp"
  {
    echo 'set -euo pipefail'
    echo "export PATH=\"$BIN:\$PATH\""
    # The page's own socket folder: `eptrace ps` and `-n NAME` see only the programs the
    # page starts, not those of tests running beside it.
    echo "export TMPDIR=\"$work/tmp\""
    if [ $with_dotnet = 1 ] && [ "$dotnet_blocks" -gt 0 ]; then
      echo "set -a; . \"$DOTNET_ENV\"; set +a"
    fi
    # The block being run, for the failure message; the page's jobs end with it.
    echo '__n=0 __line=0; __block() { __n=$1; __line=$2; }'
    echo 'trap "exit 143" TERM'
    echo 'trap '\''__s=$?; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; if [ $__s != 0 ]; then echo "__failed $__n $__line $__s" >&2; fi; exit $__s'\'' EXIT'
    printf '%s\n' "$body"
  } >"$work/.page.sh"
  start=$SECONDS
  status=0
  (cd "$work" && timeout --kill-after=10 "${EVENTPIPE_DOCS_TIMEOUT:-300}" bash .page.sh) </dev/null >"$work/.log" 2>&1 || status=$?
  blocks=$(grep -c '^__block ' "$work/.page.sh" || true)
  if [ $status = 0 ]; then
    echo "ci/docs.sh: $page: $blocks blocks ran in $((SECONDS - start)) s"
    if [ "${EVENTPIPE_DOCS_SHOW:-}" = 1 ]; then
      sed 's/^/    | /' "$work/.log"
    fi
    rm -rf "$work"
  else
    failed=1
    where=$(grep '^__failed ' "$work/.log" | tail -n 1 || true)
    if [ -n "$where" ]; then
      read -r _ n line code <<<"$where"
      echo "ci/docs.sh: $page: block $n (line $line) failed with status $code:" >&2
      awk -v start="$line" 'NR > start && /^```/ { exit } NR > start { print "    " $0 }' "$page" >&2
    elif [ $status = 124 ] || [ $status = 137 ]; then
      echo "ci/docs.sh: $page: timed out after ${EVENTPIPE_DOCS_TIMEOUT:-300} s" >&2
    else
      echo "ci/docs.sh: $page failed with status $status" >&2
    fi
    echo "  its output (the last 40 lines; all of it in $work/.log):" >&2
    grep -v '^__failed ' "$work/.log" | tail -n 40 | sed 's/^/    | /' >&2
  fi
done
echo "ci/docs.sh: $((SECONDS - total_start)) s in all"
exit $failed
