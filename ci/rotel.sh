#!/usr/bin/env bash
# Installs rotel (PyPI `rotel`: an OpenTelemetry collector written in Rust, shipped as a
# wheel holding its `rotel-agent` binary) for the agent's OTLP tests
# (crates/eptrace/tests/agent.rs), which start it on a loopback port. Idempotent: a venv in
# target/rotel/, the pinned version installed once. Prints the binary's path last.
#
#   bash ci/rotel.sh
#
# The tests find the binary at target/rotel/venv/.../rotel/rotel-agent (or $ROTEL); without
# it they skip with a one-line notice, unless EVENTPIPE_REQUIRE_ROTEL=1 (set by .ci/run)
# makes that a failure.
set -euo pipefail

VERSION=0.0.1a15
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$REPO/target/rotel
SCRIPT=ci/rotel.sh
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

VENV=$ROOT/venv
PY=$VENV/bin/python3
if [ ! -x "$PY" ]; then
  command -v python3 >/dev/null 2>&1 || die "python3 is needed to install rotel"
  run_logged "creating the venv $VENV" python3 -m venv "$VENV"
fi
installed=$("$PY" -c 'import importlib.metadata as m; print(m.version("rotel"))' 2>/dev/null || true)
if [ "$installed" != "$VERSION" ]; then
  run_logged "pip install rotel==$VERSION" "$PY" -m pip install --no-input "rotel==$VERSION"
  echo "$SCRIPT: installed rotel $VERSION"
fi
BIN=$("$PY" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
[ -x "$BIN" ] || die "rotel $VERSION is installed but $BIN is not an executable"
# The binary links Python's runtime library (libpython3.11.so.1.0): Debian's libpython3.11.
if ldd "$BIN" 2>/dev/null | grep -q "libpython3.11.so.1.0 => not found"; then
  apt_install_package libpython3.11
  echo "$SCRIPT: installed libpython3.11 (rotel-agent links it)"
fi
ldd "$BIN" 2>/dev/null | grep -q "=> not found" &&
  die "$BIN still misses a library: $(ldd "$BIN" | grep "not found" | tr -s ' \t' ' ')"
# A stable path for the tests to find.
ln -sf "$BIN" "$ROOT/rotel-agent"
"$BIN" --version 2>&1 | head -n 1 || true
echo "$ROOT/rotel-agent"
