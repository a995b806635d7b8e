#!/usr/bin/env bash
# Stages the OCI runtime of the container steps (IPA's
# ContainerHardwareManager; agent/crates/contents/src/container_steps/): Debian's crun with
# exactly the shared libraries it needs and the dynamic loader
# (stage-dynamic.sh), and podman's default seccomp profile (the containers
# project's seccomp.json from Debian's golang-github-containers-common, at
# the path podman reads; the agent confines every step that is not
# --privileged with it and refuses to run one without it), from packages
# fetched into CACHE (nothing is installed on this machine). The agent
# pulls and unpacks images itself and runs them with `crun run`.
#   image-builder/fetch-crun.sh CACHE   -> prints the staged root directory
set -euo pipefail
cache=$1
stage=$cache/crun-root
debs=$cache/crun-debs
profile=usr/share/containers/seccomp.json
if [ ! -x "$stage/usr/bin/crun" ] || [ ! -f "$stage/$profile" ]; then
    "$(dirname "$0")/stage-dynamic.sh" "$stage" "$debs" \
        "crun libc6 libcap2 libseccomp2 libsystemd0 libyajl2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1" \
        usr/bin/crun=usr/bin/crun
    # Architecture `all`: one package for every ramdisk.
    pkg=golang-github-containers-common
    ls "$debs"/${pkg}_*_all.deb >/dev/null 2>&1 || (cd "$debs" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        { echo "fetch-crun.sh: cannot download the package $pkg" >&2; exit 1; }
    x=$(mktemp -d "$cache/containers-common.XXXXXX")
    trap 'rm -rf "$x"' EXIT
    dpkg-deb -x "$(ls "$debs"/${pkg}_*_all.deb | head -1)" "$x"
    [ -f "$x/$profile" ] || { echo "fetch-crun.sh: $profile is not in $pkg" >&2; exit 1; }
    install -D -m 0644 "$x/$profile" "$stage/$profile"
fi
echo "$stage"
