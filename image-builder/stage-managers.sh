#!/usr/bin/env bash
# Stages an operator's executable hardware managers (agent/docs/own-steps.md)
# for the ramdisk: DIR (manifests, scripts, executables) at
# STAGE/etc/ironic-python-agent/managers, and for every dynamically linked
# ELF executable in DIR the dynamic loader it asks for and exactly the
# shared libraries it needs (its DT_NEEDED closure, read with readelf as
# stage-dynamic.sh does), into STAGE/lib/x86_64-linux-gnu where the
# ramdisk's loader looks. The libraries are taken from this machine (the
# build host): install the tool's Debian package here first (e.g.
# `apt-get install nvme-cli`) and copy its executable into DIR.
#   image-builder/stage-managers.sh DIR STAGE
# STAGE is replaced only once everything is in place. Static executables
# and scripts are copied as they are. x86_64 only: an ELF of another
# machine fails.
set -euo pipefail
dir=$1 stage=$2
[ -d "$dir" ] || { echo "stage-managers.sh: $dir is not a directory" >&2; exit 1; }
ls "$dir"/*.yaml >/dev/null 2>&1 ||
    { echo "stage-managers.sh: no manifest (*.yaml) in $dir: see agent/docs/own-steps.md" >&2; exit 1; }
libdir=lib/x86_64-linux-gnu
# Where this machine's loader finds libraries (Debian's multiarch paths first).
search=(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib)
mkdir -p "$(dirname "$stage")"
tmp=$(mktemp -d "$(dirname "$stage")/managers-stage.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/etc/ironic-python-agent"
cp -a "$dir" "$tmp/etc/ironic-python-agent/managers"
todo=()
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' \n')" = '177ELF' ] || continue
    machine=$(readelf -h "$f" | sed -n 's/^ *Machine: *//p')
    [ "$machine" = "Advanced Micro Devices X86-64" ] ||
        { echo "stage-managers.sh: ${f#"$dir"/} is an ELF for '$machine', not x86_64" >&2; exit 1; }
    interp=$(readelf -l "$f" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    [ -n "$interp" ] || continue # static
    if [ ! -e "$tmp$interp" ]; then
        real=$(readlink -f "$interp") && [ -f "$real" ] ||
            { echo "stage-managers.sh: ${f#"$dir"/} asks for the loader $interp, which this machine lacks" >&2; exit 1; }
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
            { echo "stage-managers.sh: $lib (needed by ${f#"$dir"/}) is not installed on this machine" >&2; exit 1; }
        install -D -m 0755 "$src" "$tmp/$libdir/$lib"
        todo+=("$src")
    done
done
rm -rf "$stage"
mv "$tmp" "$stage"
trap - EXIT
