#!/usr/bin/env bash
# Fetches the Debian firmware packages the ramdisk's drivers load blobs from
# into CACHE and prints the unpacked tree (its lib/firmware). Debian ships
# them in the non-free-firmware component, which this machine's apt sources
# may not enable: a private apt state (lists, cache, sources) is made under
# CACHE from the machine's own Debian sources with that component, so the
# machine's apt configuration is not changed and nothing is installed.
#   image-builder/fetch-firmware.sh CACHE   -> prints the unpacked root
set -euo pipefail
cache=$(cd "$1" && pwd)
out=$cache/firmware-root
if [ -d "$out/lib/firmware" ]; then
    echo "$out"
    exit 0
fi
# The packages holding the blobs of the NIC and storage drivers the
# ramdisk carries (bnx2x, tg3, qed/qla, rtl_nic, ice DDP, i915 is not wanted).
pkgs=(firmware-bnx2 firmware-bnx2x firmware-misc-nonfree firmware-realtek firmware-qlogic)
apt=$cache/firmware-apt
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/debs"
# Our sources: the machine's Debian entries (deb822 or one-line format) with
# the component replaced.
src=$apt/sources.list
: > "$src"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1=="deb" && $0 ~ /debian/ && $0 !~ /security/ {print $1, $2, $3, "non-free-firmware"}' "$f" >> "$src"
done
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"} /Types:[ \t]*deb/ && !/security/ {
            uri=""; suites="";
            for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); uri=$i }
                                  if ($i ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", $i); suites=$i } }
            n=split(suites, s, /[ \t]+/); split(uri, u, /[ \t]+/);
            for (j=1;j<=n;j++) if (s[j] !~ /-updates$/) print "deb", u[1], s[j], "non-free-firmware" }' "$f" >> "$src"
done
[ -s "$src" ] || { echo "fetch-firmware.sh: no Debian source in this machine's apt configuration" >&2; exit 1; }
opts=(-o "Dir::Etc::SourceList=$src" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$apt/lists"
      -o "Dir::Cache::Archives=$apt/archives" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
      -o "APT::Sandbox::User=root" -q)
apt-get "${opts[@]}" update >&2
(cd "$apt/debs" && for p in "${pkgs[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || apt-get "${opts[@]}" download "$p" >&2; done)
tmp=$(mktemp -d "$cache/firmware-root.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for d in "$apt/debs"/*.deb; do dpkg-deb -x "$d" "$tmp"; done
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
