#!/usr/bin/env bash
# Installs the independent readers the converter tests (crates/insight/tests) check their
# output with. Idempotent: when everything is in place it only checks and rewrites nothing.
#
#   bash ci/converters.sh        # root: $EVENTPIPE_CONVERTERS_ROOT, default <repo>/target/converters
#   . "$ROOT/env"                # GO=... SPEEDSCOPE_SCHEMA=... NODE=... TRACE_ENGINE=... (absolute paths)
#
# What and from where:
#   - Go's pprof (`go tool pprof`), reads the pprof converter's .pb.gz: Debian's `golang-go`.
#   - speedscope's JSON schema for its file format (dist/release/file-format-schema.json):
#     the npm package `speedscope`, installed into $ROOT/node_modules (never committed:
#     target/ is ignored). The tests also read its importer's file-name rules from the bundle.
#   - protoc, as PyPI's `grpcio-tools` bundles it (`python -m grpc_tools.protoc`), in a venv
#     under $ROOT: decodes the agent's Pyroscope push requests against the published
#     schema (crates/eptrace/tests/pyroscope).
#   - The DevTools performance panel's trace engine, which reads the Chrome Trace Event
#     JSON (crates/insight/tests/trace_engine/parse.mjs runs it under Node): the npm package
#     `@paulirish/trace_engine`, into the same node_modules.
# The tests read $ROOT/env (without it: `go` on PATH, the schema at its default path here);
# a test whose reader is missing skips with a one-line notice, unless
# EVENTPIPE_REQUIRE_CONVERTER_TOOLS=1 (set by .ci/run) makes that a failure.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${EVENTPIPE_CONVERTERS_ROOT:-$REPO/target/converters}
SPEEDSCOPE_VERSION=1.25.0
TRACE_ENGINE_VERSION=0.0.65
GRPCIO_TOOLS_VERSION=1.85.1
SCRIPT=ci/converters.sh
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

mkdir -p "$ROOT" || die "cannot create $ROOT"
ROOT=$(cd "$ROOT" && pwd)

# One installer at a time (tests or other scripts may call this concurrently).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$ROOT/.lock"
  flock -w 600 9 || die "timed out waiting for another ci/converters.sh on $ROOT/.lock"
fi

did=()

# 1. Go, for `go tool pprof`.
if apt_install golang-go go; then
  did+=(golang-go)
fi
GO=$(command -v go)
# `go tool pprof` runs a prebuilt tool; check it is really there (not just the go command).
PPROF=$("$GO" tool -n pprof 2>/dev/null) || die "$GO tool -n pprof failed"
[ -x "$PPROF" ] || die "go tool pprof is not installed next to $GO ($PPROF)"

# 2. speedscope (its file-format schema, its importer) and 3. the DevTools trace engine,
# from npm. One `npm install` names both: without a package.json npm removes from
# node_modules whatever the command does not name.
SPEEDSCOPE_DIR=$ROOT/node_modules/speedscope
SPEEDSCOPE_SCHEMA=$SPEEDSCOPE_DIR/dist/release/file-format-schema.json
TRACE_ENGINE_DIR=$ROOT/node_modules/@paulirish/trace_engine
installed_version() { # package dir
  node -e 'process.stdout.write(require(process.argv[1]).version)' "$1/package.json" 2>/dev/null
}
if [ ! -f "$SPEEDSCOPE_SCHEMA" ] || [ "$(installed_version "$SPEEDSCOPE_DIR")" != "$SPEEDSCOPE_VERSION" ] ||
  [ ! -f "$TRACE_ENGINE_DIR/models/trace/trace.js" ] ||
  [ "$(installed_version "$TRACE_ENGINE_DIR")" != "$TRACE_ENGINE_VERSION" ]; then
  command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"
  # --prefix: node_modules under $ROOT only; no package.json or lock file anywhere else.
  run_logged "npm install speedscope@$SPEEDSCOPE_VERSION @paulirish/trace_engine@$TRACE_ENGINE_VERSION" \
    npm install --prefix "$ROOT" --no-save --no-audit --no-fund --no-package-lock \
    "speedscope@$SPEEDSCOPE_VERSION" "@paulirish/trace_engine@$TRACE_ENGINE_VERSION"
  [ -f "$SPEEDSCOPE_SCHEMA" ] || die "speedscope@$SPEEDSCOPE_VERSION installed but $SPEEDSCOPE_SCHEMA is missing"
  [ -f "$TRACE_ENGINE_DIR/models/trace/trace.js" ] ||
    die "@paulirish/trace_engine@$TRACE_ENGINE_VERSION installed but $TRACE_ENGINE_DIR/models/trace/trace.js is missing"
  did+=("speedscope@$SPEEDSCOPE_VERSION" "@paulirish/trace_engine@$TRACE_ENGINE_VERSION")
fi
NODE=$(command -v node) || die "node is not installed (Debian: apt-get install nodejs)"

# 4. protoc, from grpcio-tools.
PROTOC_VENV=$ROOT/protoc-venv
PROTOC_PYTHON=$PROTOC_VENV/bin/python
if ! "$PROTOC_PYTHON" -c "import grpc_tools, importlib.metadata as m; assert m.version('grpcio-tools') == '$GRPCIO_TOOLS_VERSION'" 2>/dev/null; then
  run_logged "python3 -m venv $PROTOC_VENV" python3 -m venv "$PROTOC_VENV"
  run_logged "pip install grpcio-tools==$GRPCIO_TOOLS_VERSION" \
    "$PROTOC_VENV/bin/pip" install --quiet --disable-pip-version-check "grpcio-tools==$GRPCIO_TOOLS_VERSION"
  "$PROTOC_PYTHON" -m grpc_tools.protoc --version >/dev/null || die "grpcio-tools installed but its protoc does not run"
  did+=("grpcio-tools==$GRPCIO_TOOLS_VERSION")
fi

write_if_changed() { # file, content
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
    printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1" || die "cannot write $1"
    return 0
  fi
  return 1
}

# 3. The env file (values %q-quoted: plain for ordinary paths).
ENV_TEXT=$(printf 'GO=%q\nSPEEDSCOPE_SCHEMA=%q\nNODE=%q\nTRACE_ENGINE=%q\nPROTOC_PYTHON=%q' \
  "$GO" "$SPEEDSCOPE_SCHEMA" "$NODE" "$TRACE_ENGINE_DIR" "$PROTOC_PYTHON")
if write_if_changed "$ROOT/env" "$ENV_TEXT"; then
  did+=(env)
fi

if [ ${#did[@]} -eq 0 ]; then
  changes="nothing to do"
else
  changes="set up: ${did[*]}"
fi
echo "ci/converters.sh: $("$GO" version | cut -d' ' -f3) (go tool pprof), speedscope $SPEEDSCOPE_VERSION, trace_engine $TRACE_ENGINE_VERSION, grpcio-tools $GRPCIO_TOOLS_VERSION (protoc); env in $ROOT/env ($changes)"
