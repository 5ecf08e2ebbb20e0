#!/usr/bin/env bash
# Runs every fuzz target for a fixed time (default 20 s each; `bash ci/fuzz.sh SECONDS`),
# starting from the checked-in inputs: the seeds (fuzz/seeds/TARGET; the reader targets
# start from crates/nettrace/tests/fixtures, and ../shared/traces when present) and every
# input that once crashed a target (fuzz/regressions/TARGET). The working corpus
# (fuzz/corpus, ignored by git) grows run to run on one machine.
#
# A crash fails the run, and its input is copied into fuzz/regressions/TARGET: commit it,
# and `cargo test` replays it from then on (crates/*/tests/fuzz_regressions.rs run the
# same code as the targets, fuzz/bodies/*.rs) until the bug is fixed and after.
#
# Needs cargo-fuzz (installed here from crates.io when missing); on the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it use the sanitizer flags it needs.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$REPO/target/fuzz-ci
SCRIPT=ci/fuzz.sh
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"
seconds=${1:-20}

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  run_logged "cargo install cargo-fuzz" cargo install cargo-fuzz --locked --version 0.13.2
fi

cd "$REPO/fuzz"
status=0
for target in read_slice read_stream ipc_command ipc_response advertise; do
  corpus=corpus/$target
  mkdir -p "$corpus" "regressions/$target" "artifacts/$target"
  case $target in
    read_*)
      cp ../crates/nettrace/tests/fixtures/*.nettrace "$corpus/"
      if [ -d ../../shared/traces ]; then
        # The small real traces only: the big ones slow every iteration.
        find ../../shared/traces -name '*.nettrace' -size -200k -exec cp {} "$corpus/" \;
      fi
      max_len=600000
      ;;
    *)
      cp "seeds/$target"/* "$corpus/"
      max_len=70000
      ;;
  esac
  if compgen -G "regressions/$target/*" >/dev/null; then
    cp "regressions/$target"/* "$corpus/"
  fi
  echo "$SCRIPT: $target for ${seconds}s"
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "$corpus" -- \
    -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=1024 \
    >"$ROOT/$target.log" 2>&1; then
    status=1
    tail -n 30 "$ROOT/$target.log" | sed 's/^/    | /' >&2
    for crash in "artifacts/$target"/*; do
      [ -f "$crash" ] || continue
      cp "$crash" "regressions/$target/"
      echo "$SCRIPT: $target crashed; its input is now fuzz/regressions/$target/$(basename "$crash") (commit it)" >&2
    done
  else
    grep -E "^Done|stat::number_of_executed_units" "$ROOT/$target.log" | tail -n 1 || true
  fi
done
exit $status
