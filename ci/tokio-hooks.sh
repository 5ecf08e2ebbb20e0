#!/usr/bin/env bash
# The async profiler's tokio task hooks exist only when tokio is built with
# `--cfg tokio_unstable`: build and test them so, in a target directory of their own (the
# flag changes every crate's build, and must not invalidate the main one).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg tokio_unstable -C force-frame-pointers=yes" \
  CARGO_TARGET_DIR=target/tokio-unstable \
  cargo test -p eventpipe-profiler --features tokio --test tokio_hooks
