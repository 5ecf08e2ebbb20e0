#!/usr/bin/env bash
# Runs the profiler's unsafe and atomic hand-offs under Miri (undefined behaviour, data
# races, weak-memory effects): the async profiler's per-thread buffer hand-off
# (futures::handoff), the CPU sampler's capture ring between a writer thread and the
# collector (cpu::capture::tests::ring_*, which write as the signal handler would, without a
# signal), the frame-pointer walker and its own-stack reader (frame_walk), and the
# asymmetric fence (futures::barrier, full fences under Miri: it runs no membarrier).
# Signals, timers and process_vm_readv are beyond Miri; the tests that need them are
# `#[cfg_attr(miri, ignore)]` and run in the normal test suite.
#
# Needs the nightly toolchain's miri and rust-src components (added when missing). Takes a
# couple of minutes: the tests use small iteration counts under cfg(miri).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${CARGO_TARGET_DIR:-$REPO/target}/miri-ci
SCRIPT=ci/miri.sh
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "$SCRIPT: installing the nightly toolchain with miri and rust-src"
  run_logged "rustup toolchain install nightly" \
    rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
installed=$(rustup component list --toolchain nightly --installed)
if ! grep -q '^miri' <<<"$installed" || ! grep -q '^rust-src' <<<"$installed"; then
  echo "$SCRIPT: adding the nightly miri and rust-src components"
  run_logged "rustup component add miri rust-src" rustup +nightly component add miri rust-src
fi
# Builds Miri's sysroot once (cached under ~/.cache/miri); quiet when it is already there.
run_logged "cargo miri setup" cargo +nightly miri setup

cd "$REPO"
# MIRIFLAGS: the tests are races between threads, and one Miri run follows one schedule
# (and one choice of weak-memory outcomes) per seed; -Zmiri-many-seeds runs them under 8
# seeds (in parallel, some seconds each). Everything else is Miri's default: Stacked
# Borrows, the data-race detector, weak-memory emulation, the leak check, and permissive
# provenance, which the own-stack reader needs (it turns addresses back into pointers; Miri
# warns once about it). Set MIRIFLAGS to override.
export MIRIFLAGS=${MIRIFLAGS:--Zmiri-many-seeds=0..8}
FILTERS=(futures::handoff:: cpu::capture::tests::ring_ frame_walk:: futures::barrier::)
echo "$SCRIPT: MIRIFLAGS=$MIRIFLAGS cargo +nightly miri test -p eventpipe-profiler --lib -- ${FILTERS[*]}"
cargo +nightly miri test -p eventpipe-profiler --lib -- "${FILTERS[@]}"
