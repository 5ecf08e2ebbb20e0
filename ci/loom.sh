#!/usr/bin/env bash
# Model-checks eventpipe's concurrency-critical state machines with loom: the buffer
# hand-off, per-thread state reclaim and Block-mode park/abort (tests/loom.rs). A separate
# target directory keeps the --cfg build from invalidating the normal one.
# LOOM_MAX_PREEMPTIONS bounds the search: 3 runs the models in seconds; 5 also passes but
# takes minutes (the reclaim model dominates).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg eventpipe_loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
  cargo test -p eventpipe-core --test loom --release
