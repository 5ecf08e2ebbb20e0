#!/usr/bin/env bash
# Model-checks the concurrency-critical state machines with loom:
# - eventpipe-core's buffer hand-off, per-thread state reclaim and Block-mode park/abort
#   (crates/core/tests/loom.rs, under --cfg eventpipe_loom);
# - the async profiler's per-thread buffer hand-off: owner, idle flusher, stopping session,
#   owner exit (crates/profiler/tests/loom.rs, under --cfg eventpipe_profiler_loom).
# Each cfg gets its own target directory, under $CARGO_TARGET_DIR (default target/), so the
# --cfg builds do not invalidate the normal one or each other.
# LOOM_MAX_PREEMPTIONS bounds the search: 3 runs the models in seconds; 5 also passes but
# takes minutes (eventpipe's reclaim model dominates).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
# A model's failure names its schedule, not a source line: debug info only costs build time.
export CARGO_PROFILE_RELEASE_DEBUG=0
echo "loom.sh: eventpipe-core (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
CARGO_TARGET_DIR=$TARGET/loom RUSTFLAGS="--cfg eventpipe_loom" \
  cargo test -p eventpipe-core --test loom --release
echo "loom.sh: eventpipe-profiler (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
CARGO_TARGET_DIR=$TARGET/loom-profiler RUSTFLAGS="--cfg eventpipe_profiler_loom" \
  cargo test -p eventpipe-profiler --test loom --release
