#!/usr/bin/env bash
# Stages the SSH server for the ramdisk's debug access (`sshkey=` on the
# kernel command line): Debian's dropbear with exactly the shared libraries
# it needs (its DT_NEEDED closure) and the dynamic loader, fetched with
# `apt-get download` into CACHE (nothing is installed on this machine).
#   image-builder/fetch-ssh.sh CACHE   -> prints the staged root directory
set -euo pipefail
cache=$1
stage=$cache/ssh-root
if [ -x "$stage/usr/sbin/dropbear" ]; then
    echo "$stage"
    exit 0
fi
debs=$cache/ssh-debs
mkdir -p "$debs"
pkgs=(dropbear-bin libc6 libcrypt1 libtomcrypt1 libtommath1 libgmp10 zlib1g)
for p in "${pkgs[@]}"; do
    ls "$debs"/"${p}"_*.deb >/dev/null 2>&1 || (cd "$debs" && apt-get download -q "$p" >/dev/null 2>&1)
done
x=$(mktemp -d "$cache/ssh-x.XXXXXX")
tmp=$(mktemp -d "$cache/ssh-root.XXXXXX")
trap 'rm -rf "$x" "$tmp"' EXIT
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$x"; done
install -D -m 0755 "$x/usr/sbin/dropbear" "$tmp/usr/sbin/dropbear"
# The loader at the path the binary asks for, then the DT_NEEDED closure.
interp=$(readelf -l "$x/usr/sbin/dropbear" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
install -D -m 0755 "$(readlink -f "$x$interp" 2>/dev/null || true)" "$tmp$interp" 2>/dev/null || {
    real=$(find "$x" -name "$(basename "$interp")" -type f | head -1)
    install -D -m 0755 "$real" "$tmp$interp"
}
todo=("$x/usr/sbin/dropbear")
seen=" "
while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}; todo=("${todo[@]:1}")
    for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
        case "$seen" in *" $lib "*) continue ;; esac
        seen="$seen$lib "
        src=$(find "$x" -name "$lib" \( -type f -o -type l \) | head -1)
        [ -n "$src" ] || { echo "fetch-ssh.sh: $lib not found in ${pkgs[*]}" >&2; exit 1; }
        src=$(readlink -f "$src")
        install -D -m 0755 "$src" "$tmp/lib/x86_64-linux-gnu/$lib"
        todo+=("$src")
    done
done
rm -rf "$stage"
mv "$tmp" "$stage"
echo "$stage"
