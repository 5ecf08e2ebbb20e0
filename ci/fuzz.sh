#!/usr/bin/env bash
# Runs each fuzz target (nettrace readers, IPC command parsing) for a while (default 60 s), seeded with the real traces in
# ../shared/traces when present. Needs cargo-fuzz (`cargo install cargo-fuzz`); on a stable
# toolchain RUSTC_BOOTSTRAP=1 lets it use the sanitizer flags it needs.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-60}
for target in read_slice read_stream; do
  mkdir -p "corpus/$target"
  if [ -d ../../shared/traces ]; then
    cp ../../shared/traces/*.nettrace "corpus/$target/" 2>/dev/null || true
  fi
  cp ../crates/nettrace/tests/fixtures/*.nettrace "corpus/$target/"
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -max_len=600000
done
mkdir -p corpus/ipc_command
RUSTC_BOOTSTRAP=1 cargo fuzz run ipc_command corpus/ipc_command -- -max_total_time="$seconds" -max_len=70000
