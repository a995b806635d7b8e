#!/usr/bin/env bash
# Install the unmodified PyPI release ironic==39.0.0 into a Python 3.11 venv,
# pinned by ci/ironic/constraints.txt, plus the Debian packages our flows need.
#
# usage: ci/ironic/install.sh [VENV_DIR]     (default: $REPO/target/ironic-venv)
#
# Idempotent: if VENV_DIR holds a stamp recording the sha256 of
# constraints.txt (and the ironic version), nothing is reinstalled. Otherwise
# the venv is (re)created from scratch. Environment:
#   PYTHON3_11   python3.11 interpreter to use (default: `command -v python3.11`,
#                then /root/.pyenv/versions/3.11.7/bin/python3.11)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IRONIC_VERSION=39.0.0
CONSTRAINTS="$HERE/constraints.txt"
VENV_DIR=${1:-$REPO/target/ironic-venv}
STAMP_NAME=.ci-ironic-stamp

log() { echo "ironic/install.sh: $*" >&2; }
die() { echo "ironic/install.sh: ERROR: $*" >&2; exit 1; }

[ -f "$CONSTRAINTS" ] || die "missing $CONSTRAINTS"

# ---------------------------------------------------------------- Debian ---
# genisoimage (or mkisofs): Ironic builds config drives given as a dict into
# an ISO on the conductor; without it deploys with a config drive fail with
# "Error generating the configdrive".
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found; install these packages by hand: $*"
    log "installing Debian packages: $*"
    if ! as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "$@"; then
        log "apt-get install failed; running apt-get update and retrying"
        as_root apt-get update \
            || die "apt-get update failed"
        as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "$@" \
            || die "apt-get install $* failed"
    fi
}

missing_debs=()
if ! command -v genisoimage >/dev/null 2>&1 && ! command -v mkisofs >/dev/null 2>&1; then
    missing_debs+=(genisoimage)
fi
command -v curl >/dev/null 2>&1 || missing_debs+=(curl)   # start.sh readiness probe
command -v setsid >/dev/null 2>&1 || missing_debs+=(util-linux)
if [ "${#missing_debs[@]}" -gt 0 ]; then
    apt_install "${missing_debs[@]}"
fi

# ---------------------------------------------------------------- venv -----
want_stamp="ironic==$IRONIC_VERSION constraints-sha256=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"

if [ -f "$VENV_DIR/$STAMP_NAME" ] && [ -x "$VENV_DIR/bin/ironic" ] \
        && [ "$(cat "$VENV_DIR/$STAMP_NAME")" = "$want_stamp" ]; then
    log "venv $VENV_DIR is up to date ($want_stamp)"
    exit 0
fi

find_python() {
    local cand
    for cand in "${PYTHON3_11:-}" "$(command -v python3.11 2>/dev/null || true)" \
                /root/.pyenv/versions/3.11.7/bin/python3.11; do
        [ -n "$cand" ] || continue
        # pyenv shims exist even when the version is not selectable: run it.
        if "$cand" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
                >/dev/null 2>&1; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}
PY=$(find_python) || die "no working python3.11 found (tried \$PYTHON3_11, \`command -v python3.11\`, /root/.pyenv/versions/3.11.7/bin/python3.11). Install Python 3.11 or set PYTHON3_11=/path/to/python3.11"
log "using $PY ($("$PY" --version 2>&1))"

if [ -e "$VENV_DIR" ]; then
    # Refuse to wipe something that is not a venv (e.g. a mistyped argument).
    if [ -d "$VENV_DIR" ] && { [ -f "$VENV_DIR/pyvenv.cfg" ] || [ -z "$(ls -A "$VENV_DIR")" ]; }; then
        log "removing stale venv $VENV_DIR"
        rm -rf "$VENV_DIR"
    else
        die "$VENV_DIR exists and is not a Python venv; refusing to delete it"
    fi
fi

mkdir -p "$(dirname "$VENV_DIR")"
log "creating venv $VENV_DIR"
"$PY" -m venv "$VENV_DIR" || die "python3.11 -m venv $VENV_DIR failed"

log "pip install -c constraints.txt ironic==$IRONIC_VERSION (about a minute)"
if ! "$VENV_DIR/bin/python" -m pip install --no-input -c "$CONSTRAINTS" "ironic==$IRONIC_VERSION"; then
    die "pip install ironic==$IRONIC_VERSION failed (venv left without stamp; rerun to retry)"
fi

"$VENV_DIR/bin/python" -c 'import ironic' \
    || die "ironic installed but cannot be imported"
for b in ironic ironic-dbsync; do
    [ -x "$VENV_DIR/bin/$b" ] || die "console script $VENV_DIR/bin/$b missing after install"
done

echo "$want_stamp" > "$VENV_DIR/$STAMP_NAME"
log "installed ironic==$IRONIC_VERSION into $VENV_DIR"
