#!/usr/bin/env bash
# Stages the OCI runtime of the container steps (IPA's
# ContainerHardwareManager; agent/src/container_steps/): Debian's crun with
# exactly the shared libraries it needs and the dynamic loader
# (stage-dynamic.sh), from packages fetched into CACHE (nothing is
# installed on this machine). The agent pulls and unpacks images itself
# and runs them with `crun run`.
#   image-builder/fetch-crun.sh CACHE   -> prints the staged root directory
set -euo pipefail
cache=$1
stage=$cache/crun-root
if [ ! -x "$stage/usr/bin/crun" ]; then
    "$(dirname "$0")/stage-dynamic.sh" "$stage" "$cache/crun-debs" \
        "crun libc6 libcap2 libseccomp2 libsystemd0 libyajl2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1" \
        usr/bin/crun=usr/bin/crun
fi
echo "$stage"
