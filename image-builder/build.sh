#!/usr/bin/env bash
# Builds the deploy ramdisk into OUT (default target/ramdisk):
#   image-builder/build.sh [OUT] [image-builder build flags…]
# The static agent (build-agent.sh), Debian's kernel (the package
# linux-image-amd64 depends on, or $KERNEL_PACKAGE) and busybox-static are
# fetched with `apt-get download` into target/ramdisk-cache unless a .deb is
# already there; nothing is installed on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/ramdisk}
shift || true
cache=target/ramdisk-cache
mkdir -p "$cache"
agent=$(image-builder/build-agent.sh)

kpkg=${KERNEL_PACKAGE:-}
if [ -z "$kpkg" ]; then
    kdeb=$(ls "$cache"/linux-image-*-amd64_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$kdeb" ]; then
        kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
    fi
fi
if [ -n "$kpkg" ]; then
    kdeb=$(ls "$cache"/"$kpkg"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$kdeb" ]; then
        (cd "$cache" && apt-get download "$kpkg" 2>/dev/null)
        kdeb=$(ls "$cache"/"$kpkg"_*.deb | head -1)
    fi
fi
if [ ! -x "$cache/bb/bin/busybox" ]; then
    bdeb=$(ls "$cache"/busybox-static_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$bdeb" ]; then
        (cd "$cache" && apt-get download busybox-static 2>/dev/null)
        bdeb=$(ls "$cache"/busybox-static_*.deb | head -1)
    fi
    dpkg-deb -x "$bdeb" "$cache/bb"
fi
kroot=$cache/kernel-$(basename "$kdeb" .deb)
if [ ! -d "$kroot/lib/modules" ]; then
    rm -rf "$kroot.tmp" && dpkg-deb -x "$kdeb" "$kroot.tmp"
    depmod -b "$PWD/$kroot.tmp" "$(ls "$kroot.tmp/lib/modules")"
    mv "$kroot.tmp" "$kroot"
fi
ssh=$(image-builder/fetch-ssh.sh "$cache")
cargo run --release --locked -q -p image-builder -- build --out "$out" \
    --kernel-root "$kroot" --agent "$agent" --busybox "$cache/bb/bin/busybox" \
    --extra-root "$ssh" "$@"
