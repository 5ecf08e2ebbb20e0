#!/usr/bin/env bash
# Installs Linux perf (Debian's `linux-perf`), the second opinion `eptrace record` is held
# against (crates/eptrace/tests/record.rs runs `perf record -e cpu-clock -g` on the same
# program). Idempotent.
#
#   bash ci/perf.sh
#
# Without perf the comparison skips with a one-line notice, unless EVENTPIPE_REQUIRE_PERF=1
# (set by .ci/run) makes that a failure.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT=ci/perf.sh
ROOT=$REPO/target/perf
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

if apt_install linux-perf perf; then
  echo "$SCRIPT: installed Debian's linux-perf"
fi
perf --version
