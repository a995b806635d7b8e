#!/usr/bin/env bash
# Fetches Debian's kernel (the package linux-image-$DEB_ARCH depends on, or
# $KERNEL_PACKAGE) and busybox-static with `apt-get download` into CACHE
# (default target/ramdisk-cache) unless a .deb is already there, unpacks both
# (nothing is installed on this machine) and runs depmod on the kernel tree.
# Prints two lines: the unpacked kernel root (boot/vmlinuz-V, lib/modules/V)
# and the static busybox. Used by build.sh and by the test disk image
# (hardware-tests/src/testimage), so both boot the same kernel.
# DEB_ARCH (default amd64; arm64 for the aarch64 ramdisk, issue 33) picks
# Debian's architecture: packages are fetched as PKG:DEB_ARCH (dpkg knows
# arm64 once ci/install-aarch64 ran); give each architecture its own CACHE.
set -euo pipefail
cache=${1:-target/ramdisk-cache}
arch=${DEB_ARCH:-amd64}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One fetch at a time per cache: ci/test's host suites (the test disk
# images boot this kernel) may start while the ramdisk's build fetches it.
exec 9>"$cache/.fetch-kernel.lock"
flock 9

kpkg=${KERNEL_PACKAGE:-}
if [ -z "$kpkg" ]; then
    kdeb=$(ls "$cache"/linux-image-*-"$arch"_*_"$arch".deb 2>/dev/null | head -1 || true)
    if [ -z "$kdeb" ]; then
        kpkg=$(apt-cache depends "linux-image-$arch:$arch" | awk '/Depends: linux-image-/{sub(/:.*/, "", $2); print $2; exit}')
    fi
fi
if [ -n "$kpkg" ]; then
    kdeb=$(ls "$cache"/"$kpkg"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$kdeb" ]; then
        (cd "$cache" && apt-get download "$kpkg:$arch" >&2 2>/dev/null)
        kdeb=$(ls "$cache"/"$kpkg"_*.deb | head -1)
    fi
fi
if [ ! -x "$cache/bb/bin/busybox" ]; then
    bdeb=$(ls "$cache"/busybox-static_*_"$arch".deb 2>/dev/null | head -1 || true)
    if [ -z "$bdeb" ]; then
        (cd "$cache" && apt-get download "busybox-static:$arch" >&2 2>/dev/null)
        bdeb=$(ls "$cache"/busybox-static_*_"$arch".deb | head -1)
    fi
    dpkg-deb -x "$bdeb" "$cache/bb"
fi
kroot=$cache/kernel-$(basename "$kdeb" .deb)
if [ ! -d "$kroot/lib/modules" ]; then
    rm -rf "$kroot.tmp" && dpkg-deb -x "$kdeb" "$kroot.tmp"
    depmod -b "$kroot.tmp" "$(ls "$kroot.tmp/lib/modules")"
    mv "$kroot.tmp" "$kroot"
fi
echo "$kroot"
echo "$cache/bb/bin/busybox"
