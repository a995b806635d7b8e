#!/usr/bin/env bash
# Fetches the Debian firmware packages the ramdisk's drivers load blobs from
# into CACHE and prints the unpacked tree (its lib/firmware). Debian ships
# them in the non-free-firmware component, which this machine's apt sources
# may not enable: a private apt state (lists, cache, sources) is made under
# CACHE from the machine's own Debian sources with that component, so the
# machine's apt configuration is not changed and nothing is installed.
# Next to lib/firmware it writes firmware-index.txt ("FILE PACKAGE" lines
# from Debian's DEP-11 metadata of main and non-free-firmware): every
# firmware file any Debian package provides, so image-builder can tell a
# blob we did not fetch (an error) from one Debian does not ship at all
# ("missing upstream").
#   image-builder/fetch-firmware.sh CACHE   -> prints the unpacked root
set -euo pipefail
cache=$(cd "$1" && pwd)
out=$cache/firmware-root
# Every package that holds a blob some module of the ramdisk's driver
# classes names (image-builder's coverage report fails on a named blob that
# the index places in a package missing here).
pkgs=(firmware-linux-free firmware-bnx2 firmware-bnx2x firmware-misc-nonfree firmware-realtek
      firmware-qlogic firmware-cavium firmware-myricom firmware-netronome firmware-netxen)
if [ -d "$out/lib/firmware" ] && [ "$(cat "$out/packages" 2>/dev/null)" = "${pkgs[*]}" ]; then
    echo "$out"
    exit 0
fi
apt=$cache/firmware-apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/debs"
# Our sources: the machine's Debian entries (deb822 or one-line format) with
# the component replaced.
src=$apt/sources.list
: > "$src"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1=="deb" && $0 ~ /debian/ && $0 !~ /security/ {print $1, $2, $3, "main non-free-firmware"}' "$f" >> "$src"
done
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"} /Types:[ \t]*deb/ && !/security/ {
            uri=""; suites="";
            for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); uri=$i }
                                  if ($i ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", $i); suites=$i } }
            n=split(suites, s, /[ \t]+/); split(uri, u, /[ \t]+/);
            for (j=1;j<=n;j++) if (s[j] !~ /-updates$/) print "deb", u[1], s[j], "main non-free-firmware" }' "$f" >> "$src"
done
[ -s "$src" ] || { echo "fetch-firmware.sh: no Debian source in this machine's apt configuration" >&2; exit 1; }
opts=(-o "Dir::Etc::SourceList=$src" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$apt/lists"
      -o "Dir::Cache::Archives=$apt/archives" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
      -o "APT::Sandbox::User=root" -q)
apt-get "${opts[@]}" update >&2
(cd "$apt/debs" && for p in "${pkgs[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || apt-get "${opts[@]}" download "$p" >&2; done)
tmp=$(mktemp -d "$cache/firmware-root.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for p in "${pkgs[@]}"; do dpkg-deb -x "$(ls "$apt/debs/${p}"_*.deb | head -1)" "$tmp"; done
for f in "$apt"/lists/*dep11_Components-amd64.yml.gz; do
    zcat "$f" | awk '/^Package:/{p=$2} /^ *- type: runtime/{r=1; next} r && /^ *file:/{print $2, p} {r=0}'
done | LC_ALL=C sort -u > "$tmp/firmware-index.txt"
[ -s "$tmp/firmware-index.txt" ] || { echo "fetch-firmware.sh: no DEP-11 firmware metadata in the apt lists" >&2; exit 1; }
echo "${pkgs[*]}" > "$tmp/packages"
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
