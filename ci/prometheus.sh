#!/usr/bin/env bash
# Installs Prometheus for the agent's tests (crates/eptrace/tests/agent.rs), which start it
# on a loopback port with a scrape config pointing at the agent. Idempotent.
#
#   bash ci/prometheus.sh     # Debian's `prometheus` package (its server binary only is used)
#
# The test finds `prometheus` on PATH (or $PROMETHEUS); without it, it skips with a
# one-line notice, unless EVENTPIPE_REQUIRE_PROMETHEUS=1 (set by .ci/run) makes that a
# failure.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$REPO/target/prometheus
SCRIPT=ci/prometheus.sh
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

if apt_install prometheus prometheus; then
  echo "$SCRIPT: installed Debian's prometheus"
fi
# The package starts a system service on :9090; the tests use their own instance, and
# that service is not needed (and not running where there is no init).
prometheus --version 2>&1 | head -n 1
