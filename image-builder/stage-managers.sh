#!/usr/bin/env bash
# Stages an operator's executable hardware managers (agent/docs/own-steps.md)
# for the ramdisk of ARCH (x86_64 by default, or aarch64): DIR (manifests,
# scripts, executables) at STAGE/etc/ironic-python-agent/managers, and for
# every dynamically linked ELF executable in DIR the dynamic loader it asks
# for and exactly the shared libraries it needs (its DT_NEEDED closure, read
# with readelf as stage-dynamic.sh does), into STAGE/lib/<triplet> where the
# ramdisk's loader looks. The libraries are taken from this machine (the
# build host), from Debian's multiarch directories: install the tool's
# Debian package here first (`apt-get install nvme-cli`, or for an aarch64
# ramdisk `apt-get install nvme-cli:arm64` after `dpkg --add-architecture
# arm64`, which ci/install-aarch64 does) and copy its executable into DIR.
#   image-builder/stage-managers.sh [--arch ARCH] DIR STAGE
# STAGE is replaced only once everything is in place. Static executables
# and scripts are copied as they are. An ELF for another machine than ARCH
# fails, naming it.
set -euo pipefail
arch=x86_64
if [ "${1:-}" = --arch ]; then
    arch=${2:?--arch needs x86_64 or aarch64}
    shift 2
fi
case $arch in
    # readelf's name of the machine, Debian's multiarch triplet.
    x86_64) elf_machine="Advanced Micro Devices X86-64" triplet=x86_64-linux-gnu ;;
    aarch64) elf_machine="AArch64" triplet=aarch64-linux-gnu ;;
    *) echo "stage-managers.sh: unknown architecture '$arch' (x86_64 or aarch64)" >&2; exit 1 ;;
esac
dir=${1:?usage: stage-managers.sh [--arch ARCH] DIR STAGE} stage=${2:?usage: stage-managers.sh [--arch ARCH] DIR STAGE}
[ -d "$dir" ] || { echo "stage-managers.sh: $dir is not a directory" >&2; exit 1; }
ls "$dir"/*.yaml >/dev/null 2>&1 ||
    { echo "stage-managers.sh: no manifest (*.yaml) in $dir: see agent/docs/own-steps.md" >&2; exit 1; }
libdir=lib/$triplet
# Where this machine keeps ARCH's libraries: Debian's multiarch paths first;
# the native loader's own directories only for the native architecture.
search=(/lib/$triplet /usr/lib/$triplet)
if [ "$arch" = "$(uname -m)" ]; then search+=(/lib64 /usr/lib64 /lib /usr/lib); fi
mkdir -p "$(dirname "$stage")"
tmp=$(mktemp -d "$(dirname "$stage")/managers-stage.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/etc/ironic-python-agent"
cp -a "$dir" "$tmp/etc/ironic-python-agent/managers"
todo=()
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' \n')" = '177ELF' ] || continue
    machine=$(readelf -h "$f" | sed -n 's/^ *Machine: *//p')
    [ "$machine" = "$elf_machine" ] ||
        { echo "stage-managers.sh: ${f#"$dir"/} is an ELF for '$machine', not $arch" >&2; exit 1; }
    interp=$(readelf -l "$f" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    [ -n "$interp" ] || continue # static
    if [ ! -e "$tmp$interp" ]; then
        real=$(readlink -f "$interp") && [ -f "$real" ] || real=
        # A foreign architecture's loader: in its multiarch directory.
        for d in "${search[@]}"; do
            [ -z "$real" ] || break
            if [ -e "$d/${interp##*/}" ]; then real=$(readlink -f "$d/${interp##*/}"); fi
        done
        [ -n "$real" ] ||
            { echo "stage-managers.sh: ${f#"$dir"/} asks for the loader $interp, which this machine lacks for $arch" >&2; exit 1; }
        install -D -m 0755 "$real" "$tmp$interp"
    fi
    todo+=("$f")
done < <(find "$dir" -type f -print0 | sort -z)
seen=" "
while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}; todo=("${todo[@]:1}")
    for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
        case "$seen" in *" $lib "*) continue ;; esac
        seen="$seen$lib "
        src=
        for d in "${search[@]}"; do
            if [ -e "$d/$lib" ]; then src=$(readlink -f "$d/$lib"); break; fi
        done
        [ -n "$src" ] ||
            { echo "stage-managers.sh: $lib (needed by ${f#"$dir"/}) is not installed on this machine for $arch (looked in ${search[*]})" >&2; exit 1; }
        install -D -m 0755 "$src" "$tmp/$libdir/$lib"
        todo+=("$src")
    done
done
rm -rf "$stage"
mv "$tmp" "$stage"
trap - EXIT
