#!/usr/bin/env bash
# Stages dynamically linked Debian programs for the ramdisk: each PROGRAM
# (a path inside the packages, e.g. usr/sbin/dropbear) is installed at
# DEST (its path in the ramdisk) with exactly the shared libraries it
# needs (its DT_NEEDED closure, into the multiarch lib directory) and the dynamic
# loader it asks for. The packages are fetched with `apt-get download`
# into DEBS unless there already; nothing is installed on this machine.
#   image-builder/stage-dynamic.sh STAGE DEBS "PKG…" PROGRAM=DEST…
# STAGE is replaced only once everything is in place (an interrupted run
# leaves no half-made stage).
# DEB_ARCH (default amd64; arm64 for the aarch64 ramdisk) is the Debian
# architecture of the packages (fetched as PKG:DEB_ARCH) and names the
# multiarch library directory (lib/aarch64-linux-gnu for arm64).
set -euo pipefail
stage=$1 debs=$2
read -r -a pkgs <<<"$3"
shift 3
arch=${DEB_ARCH:-amd64}
case $arch in
    amd64) libdir=lib/x86_64-linux-gnu ;;
    arm64) libdir=lib/aarch64-linux-gnu ;;
    *) echo "stage-dynamic.sh: unknown DEB_ARCH '$arch' (amd64 or arm64)" >&2; exit 1 ;;
esac
mkdir -p "$debs"
for p in "${pkgs[@]}"; do
    ls "$debs"/"${p}"_*_"$arch".deb >/dev/null 2>&1 || (cd "$debs" && apt-get download -q "$p:$arch" >/dev/null 2>&1) ||
        { echo "stage-dynamic.sh: cannot download the package $p:$arch" >&2; exit 1; }
done
parent=$(dirname "$stage")
x=$(mktemp -d "$parent/stage-x.XXXXXX")
tmp=$(mktemp -d "$parent/stage-root.XXXXXX")
trap 'rm -rf "$x" "$tmp"' EXIT
for p in "${pkgs[@]}"; do dpkg-deb -x "$(ls "$debs"/"${p}"_*_"$arch".deb | head -1)" "$x"; done
todo=()
for spec in "$@"; do
    prog=${spec%%=*} dest=${spec#*=}
    [ -f "$x/$prog" ] || { echo "stage-dynamic.sh: $prog is not in ${pkgs[*]}" >&2; exit 1; }
    install -D -m 0755 "$x/$prog" "$tmp/$dest"
    todo+=("$x/$prog")
    # The loader at the path the program asks for.
    interp=$(readelf -l "$x/$prog" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    if [ -n "$interp" ] && [ ! -e "$tmp$interp" ]; then
        real=$(readlink -f "$x$interp" 2>/dev/null || true)
        [ -f "$real" ] || real=$(find "$x" -name "$(basename "$interp")" -type f | head -1)
        [ -n "$real" ] || { echo "stage-dynamic.sh: the loader $interp is not in ${pkgs[*]}" >&2; exit 1; }
        install -D -m 0755 "$real" "$tmp$interp"
    fi
done
seen=" "
while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}; todo=("${todo[@]:1}")
    for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
        case "$seen" in *" $lib "*) continue ;; esac
        seen="$seen$lib "
        src=$(find "$x" -name "$lib" \( -type f -o -type l \) | head -1)
        [ -n "$src" ] || { echo "stage-dynamic.sh: $lib not found in ${pkgs[*]}" >&2; exit 1; }
        src=$(readlink -f "$src")
        install -D -m 0755 "$src" "$tmp/$libdir/$lib"
        todo+=("$src")
    done
done
# Extra files the caller copies from the unpacked packages: STAGE_FILES
# holds "SRC=DEST" pairs (e.g. etc/mke2fs.conf=etc/mke2fs.conf).
for spec in ${STAGE_FILES:-}; do
    install -D -m 0644 "$x/${spec%%=*}" "$tmp/${spec#*=}"
done
rm -rf "$stage"
mv "$tmp" "$stage"
