#!/usr/bin/env bash
# macOS and Windows: every library crate must build there (clippy, warnings denied), and
# what can run here runs: the Windows build of the platform shims, the named-pipe
# transport, the diagnostics server's tests and the CPU sampler's refusal, under wine.
#
# - The standard libraries come from rustup (`rustup target add`).
# - x86_64-pc-windows-gnu links with Debian's mingw-w64, which also compiles ring's C for
#   the export crate's rustls; macOS builds use the system's TLS instead (no C to cross-
#   compile), so x86_64-apple-darwin needs no C compiler here.
# - wine64 (Debian) runs the Windows test binaries (ci/cross/wine-run.sh).
# Nothing here is run on a Mac: docs/platforms.md says what was tested where.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=ci/cross.sh
ROOT=$PWD/target/cross
mkdir -p "$ROOT"
# shellcheck source=ci/lib.sh
. ci/lib.sh

LIBRARIES=(-p eventpipe-guid -p nettrace -p eventpipe-core -p eventpipe -p eventpipe-ipc -p eventpipe-symbols
  -p eventpipe-heap -p eventpipe-counters -p eventpipe-insight -p eventpipe-tracing
  -p eventpipe-metrics -p eventpipe-profiler -p eventpipe-profiler-macros -p eventpipe-export
  -p eventpipe-client -p eventpipe-perf -p eventpipe-unwind)
MAC=x86_64-apple-darwin
WIN=x86_64-pc-windows-gnu

run_logged "rustup target add" rustup target add "$MAC" "$WIN"
apt_install gcc-mingw-w64-x86-64 x86_64-w64-mingw32-gcc || true
[ -x /usr/lib/wine/wine64 ] || apt_install_package wine64
[ -x /usr/lib/wine/wine64 ] || die "wine64 installed but /usr/lib/wine/wine64 is missing"

export CC_x86_64_pc_windows_gnu=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$PWD/ci/cross/wine-run.sh
export EVENTPIPE_PRNG_DLL=$ROOT/bcryptprimitives.dll
export WINEPREFIX=$ROOT/wine-prefix
# Tests skip what wine does not implement (a process's handle count) when this is set.
export EVENTPIPE_UNDER_WINE=1

for target in "$MAC" "$WIN"; do
  echo "-- clippy, every library crate, $target"
  cargo clippy --target "$target" "${LIBRARIES[@]}" -- -D warnings
done

echo "-- Windows tests under wine"
x86_64-w64-mingw32-gcc -shared -O2 -o "$EVENTPIPE_PRNG_DLL" ci/cross/ProcessPrng.c -ladvapi32
# The first start creates the prefix (about 20 s); later ones take a second or two.
/usr/lib/wine/wine64 wineboot --init >/dev/null 2>&1 || true
status=0
cargo test --target "$WIN" -p eventpipe-core --lib platform || status=$?
[ "$status" -eq 0 ] && { cargo test --target "$WIN" -p eventpipe-ipc --lib || status=$?; }
[ "$status" -eq 0 ] && { cargo test --target "$WIN" -p eventpipe --test diagnostics || status=$?; }
[ "$status" -eq 0 ] && { cargo test --target "$WIN" -p eventpipe-profiler --lib cpu || status=$?; }
/usr/lib/wine/wineserver -k >/dev/null 2>&1 || true
exit "$status"
