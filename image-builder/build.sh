#!/usr/bin/env bash
# Builds the deploy ramdisk into OUT (default target/ramdisk), with every
# driver of the classes image-builder covers (pass --drivers vm for the
# short VM list) and Debian's signed shim + GRUB for Secure Boot:
#   image-builder/build.sh [--arch x86_64|aarch64] [OUT] [image-builder build flags…]
# The static agent (build-agent.sh); Debian's kernel (the package
# linux-image-amd64 depends on, or $KERNEL_PACKAGE) and busybox-static are
# fetched into target/ramdisk-cache by fetch-kernel.sh (`apt-get download`
# unless a .deb is already there; nothing is installed on this machine);
# dropbear (fetch-ssh.sh), mke2fs/mkfs.xfs (fetch-mkfs.sh) and crun, the
# container steps' OCI runtime (fetch-crun.sh), with their shared libraries.
# AGENT_BIN=PATH: that static agent instead of build-agent.sh's release
# build (ci/test-aarch64-short boots a `--drivers vm` ramdisk around the
# debug cross build it made for the unit tests).
# --arch aarch64 (issue 33; default OUT target/ramdisk-aarch64): the agent
# cross-built for aarch64 and everything else from Debian's arm64 packages
# (linux-image-arm64's kernel, busybox, dropbear, mkfs, the arm64 shim and
# GRUB), cached in target/ramdisk-cache-aarch64; the firmware packages are
# the same for both (architecture all) and stay in target/ramdisk-cache.
# Executable hardware managers (agent/docs/own-steps.md): pass
# `--managers DIR` after OUT; DIR (manifests and executables) lands at
# /etc/ironic-python-agent/managers in the initramfs, with the loader and
# shared libraries of every dynamic executable in it, from this machine
# (stage-managers.sh; for aarch64 from Debian's arm64 multiarch packages). managers-initrd.sh makes the same
# files an initrd to append at boot instead.
# Built by rustc itself, as build-agent.sh says (no RUSTC_WORKSPACE_WRAPPER).
set -euo pipefail
cd "$(dirname "$0")/.."
unset RUSTC_WORKSPACE_WRAPPER
arch=x86_64
if [ "${1:-}" = --arch ]; then
    arch=${2:?--arch needs x86_64 or aarch64}
    shift 2
fi
case $arch in
    x86_64) deb=amd64 default_out=target/ramdisk cache=target/ramdisk-cache ;;
    aarch64) deb=arm64 default_out=target/ramdisk-aarch64 cache=target/ramdisk-cache-aarch64 ;;
    *) echo "build.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2; exit 1 ;;
esac
out=${1:-$default_out}
shift || true
mkdir -p "$cache" target/ramdisk-cache
# Each phase is named on stderr as it starts: a log's last line (ci/demo
# shows it while it waits) then says what the build is doing, not the last
# thing a download printed minutes ago.
phase() { echo "build.sh: $*" >&2; }
[ -n "${AGENT_BIN:-}" ] || phase "building the static agent (release, $arch)"
agent=${AGENT_BIN:-$(image-builder/build-agent.sh --arch "$arch")}

export DEB_ARCH=$deb
phase "fetching Debian's kernel, busybox, ssh, mkfs tools, crun, firmware and boot chain ($deb)"
fetched=$(image-builder/fetch-kernel.sh "$cache")
kroot=$(sed -n 1p <<<"$fetched")
busybox=$(sed -n 2p <<<"$fetched")
ssh=$(image-builder/fetch-ssh.sh "$cache")
mkfs=$(image-builder/fetch-mkfs.sh "$cache")
crun=$(image-builder/fetch-crun.sh "$cache")
firmware=$(image-builder/fetch-firmware.sh target/ramdisk-cache)
bootchain=$(image-builder/fetch-bootchain.sh "$cache")
managers=()
for ((i = 1; i <= $#; i++)); do
    case ${!i} in
        --managers) j=$((i + 1)); managers=(--extra-root "$cache/managers-root"); mdir=${!j} ;;
        --managers=*) managers=(--extra-root "$cache/managers-root"); mdir=${!i#--managers=} ;;
    esac
done
if [ ${#managers[@]} -ne 0 ]; then
    image-builder/stage-managers.sh --arch "$arch" "$mdir" "$cache/managers-root"
fi
phase "assembling the ramdisk's tree and compressing its initramfs (image-builder)"
cargo run --release --locked -q -p image-builder -- build --out "$out" --arch "$arch" \
    --kernel-root "$kroot" --agent "$agent" --busybox "$busybox" \
    --extra-root "$ssh" --extra-root "$mkfs" --extra-root "$crun" --firmware-root "$firmware" \
    --boot-chain-root "$bootchain" "${managers[@]}" "$@"
