#!/usr/bin/env bash
# Makes an extra initrd for the deploy ramdisk holding an operator's
# executable hardware managers (agent/docs/own-steps.md): DIR at
# /etc/ironic-python-agent/managers with the loader and shared libraries
# of every dynamically linked executable in it (stage-managers.sh), as a
# gzip-compressed newc cpio archive. Append it at boot, as Metal3 appends
# its CA (the kernel unpacks concatenated initramfs archives in order, a
# later file replacing an earlier one):
#   image-builder/managers-initrd.sh [--arch ARCH] DIR OUT.cpio.gz
#   cat deploy.initramfs OUT.cpio.gz > deploy-with-managers.initramfs
# or a second `initrd` line in iPXE/GRUB. The same bytes every time for the
# same inputs (owner root, mtimes zero, sorted).
set -euo pipefail
arch=(--arch x86_64)
if [ "${1:-}" = --arch ]; then
    arch=(--arch "${2:?--arch needs x86_64 or aarch64}")
    shift 2
fi
dir=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/managers-initrd.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$here/stage-managers.sh" "${arch[@]}" "$dir" "$work/root"
find "$work/root" -exec touch -h -d @0 {} +
(cd "$work/root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -n -9 >"$work/out"
mv "$work/out" "$out"
