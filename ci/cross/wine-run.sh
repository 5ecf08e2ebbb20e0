#!/usr/bin/env bash
# Cargo's runner for x86_64-pc-windows-gnu test binaries (ci/cross.sh): runs one under
# wine, with the ProcessPrng stand-in beside it.
set -euo pipefail
dir=$(dirname "$1")
[ -f "$dir/bcryptprimitives.dll" ] || cp "$EVENTPIPE_PRNG_DLL" "$dir/"
WINEDEBUG=-all exec /usr/lib/wine/wine64 "$@"
