#!/usr/bin/env bash
# Fetches Debian's signed UEFI boot chain for Secure Boot network boot —
# shim-signed (shimx64.efi, signed by Microsoft's UEFI CA, carrying Debian's
# key) and grub-efi-amd64-signed (grubnetx64.efi, signed by Debian) — with
# `apt-get download` into CACHE unless there, unpacks them (nothing is
# installed) and prints the unpacked root.
#   image-builder/fetch-bootchain.sh CACHE   -> prints the root
# DEB_ARCH=arm64 (issue 33): the same from the arm64 packages (shimaa64.efi,
# grub-efi-arm64-signed's grubnetaa64.efi).
set -euo pipefail
cache=$(cd "$1" && pwd)
out=$cache/bootchain-root
arch=${DEB_ARCH:-amd64}
case $arch in
    amd64) pkgs=(shim-signed grub-efi-amd64-signed) shim=shimx64.efi.signed ;;
    arm64) pkgs=(shim-signed grub-efi-arm64-signed) shim=shimaa64.efi.signed ;;
    *) echo "fetch-bootchain.sh: unknown DEB_ARCH '$arch' (amd64 or arm64)" >&2; exit 1 ;;
esac
if [ -f "$out/usr/lib/shim/$shim" ] && [ "$(cat "$out/packages" 2>/dev/null)" = "${pkgs[*]}" ]; then
    echo "$out"
    exit 0
fi
debs=$cache/bootchain-debs
mkdir -p "$debs"
for p in "${pkgs[@]}"; do
    ls "$debs/${p}"_*_"$arch".deb >/dev/null 2>&1 || (cd "$debs" && apt-get download -q "$p:$arch" >&2 2>/dev/null)
done
tmp=$(mktemp -d "$cache/bootchain-root.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for p in "${pkgs[@]}"; do dpkg-deb -x "$(ls "$debs/${p}"_*_"$arch".deb | head -1)" "$tmp"; done
echo "${pkgs[*]}" > "$tmp/packages"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
