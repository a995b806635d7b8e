#!/usr/bin/env bash
# Builds the deploy ramdisk into OUT (default target/ramdisk), with every
# driver of the classes image-builder covers (pass --drivers vm for the
# short VM list) and Debian's signed shim + GRUB for Secure Boot:
#   image-builder/build.sh [OUT] [image-builder build flags…]
# The static agent (build-agent.sh); Debian's kernel (the package
# linux-image-amd64 depends on, or $KERNEL_PACKAGE) and busybox-static are
# fetched into target/ramdisk-cache by fetch-kernel.sh (`apt-get download`
# unless a .deb is already there; nothing is installed on this machine);
# dropbear (fetch-ssh.sh) and mke2fs/mkfs.xfs (fetch-mkfs.sh) with their
# shared libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/ramdisk}
shift || true
cache=target/ramdisk-cache
mkdir -p "$cache"
agent=$(image-builder/build-agent.sh)

fetched=$(image-builder/fetch-kernel.sh "$cache")
kroot=$(sed -n 1p <<<"$fetched")
busybox=$(sed -n 2p <<<"$fetched")
ssh=$(image-builder/fetch-ssh.sh "$cache")
mkfs=$(image-builder/fetch-mkfs.sh "$cache")
firmware=$(image-builder/fetch-firmware.sh "$cache")
bootchain=$(image-builder/fetch-bootchain.sh "$cache")
cargo run --release --locked -q -p image-builder -- build --out "$out" \
    --kernel-root "$kroot" --agent "$agent" --busybox "$busybox" \
    --extra-root "$ssh" --extra-root "$mkfs" --firmware-root "$firmware" \
    --boot-chain-root "$bootchain" "$@"
