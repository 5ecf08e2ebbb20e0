#!/usr/bin/env bash
# Model-checks the eventpipe buffer hand-off with loom. A separate target directory keeps
# the --cfg build from invalidating the normal one. LOOM_MAX_PREEMPTIONS bounds the search:
# 3 covers every interleaving of the two-record models in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg eventpipe_loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
  cargo test -p eventpipe --test loom --release
