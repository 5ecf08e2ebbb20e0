# Shared by the ci/*.sh installers; sourced after they set SCRIPT (their name for messages)
# and ROOT (where logs go).
#   die MESSAGE                 print it (and the tail of the last step's log), exit 1
#   run_logged WHAT CMD ARGS..  run CMD with its output in $ROOT/last-step.log, shown on failure
#   apt_install PACKAGE COMMAND install a Debian package unless COMMAND is already on PATH
#   apt_install_package PACKAGE install a Debian package

LOG=""

die() {
  echo "$SCRIPT: $*" >&2
  if [ -n "$LOG" ] && [ -s "$LOG" ]; then
    tail -n 15 "$LOG" | sed 's/^/    | /' >&2
  fi
  exit 1
}

run_logged() {
  local what=$1
  shift
  local status=0
  LOG=$ROOT/last-step.log
  "$@" >"$LOG" 2>&1 || status=$?
  [ "$status" -eq 0 ] || die "$what failed (exit $status; full output in $LOG)"
  LOG=""
}

# Installs a Debian package (apt-get update first), as root or through sudo.
apt_install_package() {
  local package=$1
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "installing $package needs root (no sudo)"
    sudo=(sudo -n)
  fi
  run_logged "apt-get update" ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get update -o DPkg::Lock::Timeout=300
  run_logged "apt-get install $package" ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=300 "$package"
}

# Returns 0 after installing, 1 when COMMAND was already there.
apt_install() {
  local package=$1 command=$2
  command -v "$command" >/dev/null 2>&1 && return 1
  apt_install_package "$package"
  command -v "$command" >/dev/null 2>&1 || die "$package installed but $command is still not on PATH"
  return 0
}
