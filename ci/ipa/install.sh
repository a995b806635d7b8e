#!/usr/bin/env bash
# Installs the unmodified PyPI release ironic-python-agent==13.0.0 (the
# agent this one replaces) and etcd3gw into a Python 3.11 venv, pinned by
# ci/ipa/constraints.txt. Tests run IPA's own code from it where ours must
# interoperate with it (network burn-in pairing through tooz).
#
# usage: ci/ipa/install.sh [VENV_DIR]     (default: $REPO/target/ipa-venv)
# Idempotent: a stamp with the sha256 of constraints.txt skips the install.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CONSTRAINTS="$HERE/constraints.txt"
VENV_DIR=${1:-$REPO/target/ipa-venv}
want="ironic-python-agent==13.0.0 constraints-sha256=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"
if [ "$(cat "$VENV_DIR/.ci-ipa-stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
PY=${PYTHON3_11:-$(command -v python3.11 || echo /root/.pyenv/versions/3.11.7/bin/python3.11)}
if [ -e "$VENV_DIR" ]; then
    [ -f "$VENV_DIR/pyvenv.cfg" ] || { echo "ipa/install.sh: $VENV_DIR is not a venv; refusing to delete it" >&2; exit 1; }
    rm -rf "$VENV_DIR"
fi
echo "ipa/install.sh: creating $VENV_DIR (about 20 s)" >&2
"$PY" -m venv "$VENV_DIR"
"$VENV_DIR/bin/python" -m pip install -q --no-input -c "$CONSTRAINTS" \
    ironic-python-agent==13.0.0 etcd3gw
"$VENV_DIR/bin/python" -c 'import ironic_python_agent.config, ironic_python_agent.burnin, etcd3gw'
echo "$want" > "$VENV_DIR/.ci-ipa-stamp"
