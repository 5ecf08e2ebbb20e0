#!/usr/bin/env bash
# Checks that every crate builds with the oldest versions of its direct dependencies that
# the manifests allow: what a user whose lock file is older than ours gets. A copy of the
# tree (no target, no .git) is resolved with `cargo update -Z direct-minimal-versions`
# (RUSTC_BOOTSTRAP lets the stable cargo take the flag) and checked, every target.
#
#   bash ci/minimal-versions.sh     # copy and target dir: target/minimal-versions
#
# A failure names the dependency whose minimum is too old: raise that minimum in the
# manifest to a version the code builds with.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$REPO/target/minimal-versions
COPY=$ROOT/tree

rm -rf "$COPY"
mkdir -p "$COPY"
(cd "$REPO" && tar -c --exclude=./target --exclude=./.git --exclude=./fuzz/target .) | tar -x -C "$COPY"
cd "$COPY"
echo "ci/minimal-versions.sh: resolving direct dependencies to their minimums"
RUSTC_BOOTSTRAP=1 cargo update -q -Z direct-minimal-versions
echo "ci/minimal-versions.sh: checking every crate and target against them"
CARGO_TARGET_DIR=$ROOT/target cargo check -q --workspace --all-targets
echo "ci/minimal-versions.sh: every crate builds with its dependencies' minimum versions"
