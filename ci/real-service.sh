#!/usr/bin/env bash
# A real third-party service's first profile: tokio-rs/mini-redis 0.4.1 from crates.io,
# instrumented as the guide says and driven by its own client (tests/real-service), attached
# to with this workspace's `eptrace`. Its test checks that the CPU samples reach the
# program's code through libc, that the threads are named and that the spans arrive.
#
#   bash ci/real-service.sh     # builds into target/real-service
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
echo "ci/real-service.sh: building eptrace, and mini-redis with the guide's lines"
cargo build -q -p eptrace
EPTRACE=$REPO/target/debug/eptrace \
  cargo test -q --release --manifest-path tests/real-service/Cargo.toml \
  --target-dir "$REPO/target/real-service" -- --nocapture
