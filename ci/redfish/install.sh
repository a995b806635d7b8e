#!/usr/bin/env bash
# Install the Redfish BMC of the test bed: Debian's libvirt daemon and QEMU
# driver (run privately by hardware-tests/src/bed/redfish.rs, never as a
# system service) and the unmodified PyPI release sushy-tools==2.2.0 with
# libvirt-python in a Python 3.11 venv pinned by ci/redfish/constraints.txt.
#
# usage: ci/redfish/install.sh [VENV_DIR]     (default: $REPO/target/redfish-venv)
#
# Idempotent: if VENV_DIR holds a stamp recording the sha256 of
# constraints.txt, the venv is left alone (~10 ms with the Debian packages
# present). Otherwise the venv is (re)created from scratch. Environment:
#   PYTHON3_11   python3.11 interpreter to use (default: `command -v python3.11`,
#                then /root/.pyenv/versions/3.11.7/bin/python3.11)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SUSHY_TOOLS_VERSION=2.2.0
LIBVIRT_PYTHON_VERSION=9.0.0
CONSTRAINTS="$HERE/constraints.txt"
VENV_DIR=${1:-$REPO/target/redfish-venv}
STAMP_NAME=.ci-redfish-stamp

log() { echo "redfish/install.sh: $*" >&2; }
die() { echo "redfish/install.sh: ERROR: $*" >&2; exit 1; }

[ -f "$CONSTRAINTS" ] || die "missing $CONSTRAINTS"

# ---------------------------------------------------------------- Debian ---
# libvirt-daemon + libvirt-daemon-driver-qemu: libvirtd and its QEMU driver.
#   Not libvirt-daemon-system: that one brings the system service, the
#   libvirt-qemu user and the default NAT network; the bed runs libvirtd
#   itself in a private mount namespace with its own configuration instead.
# libvirt-clients: virsh, with which the bed defines and removes its domain.
# libvirt-dev + pkg-config + gcc: libvirt-python is built from its sdist.
# genisoimage: the test's virtual-media ISO. ovmf and qemu-system-x86 come
# from ci/install-deps (the bed needs them anyway).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing_debs=()
for p in libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev pkg-config gcc genisoimage; do
    installed "$p" || missing_debs+=("$p")
done
if [ "${#missing_debs[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found; install these packages by hand: ${missing_debs[*]}"
    log "installing Debian packages: ${missing_debs[*]}"
    if ! as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null; then
        log "apt-get install failed; running apt-get update and retrying"
        as_root apt-get update -qq || die "apt-get update failed"
        as_root env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null \
            || die "apt-get install ${missing_debs[*]} failed"
    fi
fi

# ---------------------------------------------------------------- venv -----
want_stamp="sushy-tools==$SUSHY_TOOLS_VERSION libvirt-python==$LIBVIRT_PYTHON_VERSION constraints-sha256=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"

if [ -f "$VENV_DIR/$STAMP_NAME" ] && [ -x "$VENV_DIR/bin/sushy-emulator" ] \
        && [ "$(cat "$VENV_DIR/$STAMP_NAME")" = "$want_stamp" ]; then
    log "venv $VENV_DIR is up to date ($want_stamp)"
    exit 0
fi

find_python() {
    local cand
    for cand in "${PYTHON3_11:-}" "$(command -v python3.11 2>/dev/null || true)" \
                /root/.pyenv/versions/3.11.7/bin/python3.11; do
        [ -n "$cand" ] || continue
        if "$cand" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
                >/dev/null 2>&1; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}
PY=$(find_python) || die "no working python3.11 found (tried \$PYTHON3_11, \`command -v python3.11\`, /root/.pyenv/versions/3.11.7/bin/python3.11)"
log "using $PY ($("$PY" --version 2>&1))"

if [ -e "$VENV_DIR" ]; then
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

log "pip install -c constraints.txt sushy-tools==$SUSHY_TOOLS_VERSION libvirt-python==$LIBVIRT_PYTHON_VERSION (builds libvirt-python from its sdist)"
if ! "$VENV_DIR/bin/python" -m pip install -q --no-input -c "$CONSTRAINTS" \
        "sushy-tools==$SUSHY_TOOLS_VERSION" "libvirt-python==$LIBVIRT_PYTHON_VERSION"; then
    die "pip install failed (venv left without stamp; rerun to retry)"
fi

"$VENV_DIR/bin/python" -c 'import libvirt, sushy_tools.emulator.main' \
    || die "sushy-tools/libvirt-python installed but cannot be imported"
[ -x "$VENV_DIR/bin/sushy-emulator" ] || die "console script $VENV_DIR/bin/sushy-emulator missing after install"

echo "$want_stamp" > "$VENV_DIR/$STAMP_NAME"
log "installed sushy-tools==$SUSHY_TOOLS_VERSION and libvirt-python==$LIBVIRT_PYTHON_VERSION into $VENV_DIR"
