#!/usr/bin/env bash
# Fetches Debian's `udev` package and unpacks it into target/udev (default)
# WITHOUT installing it: its package scripts would start systemd-udevd for
# the whole machine, replay ("coldplug") every device's events and reset the
# permissions of static /dev nodes. The tests run this systemd-udevd
# themselves, in a private mount namespace, acting only on loop devices they
# created (hardware-tests/src/udevd.rs). Idempotent.
#
# usage: ci/udev/install.sh [DIR]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DIR=${1:-$REPO/target/udev}
if [ -x "$DIR/systemd-udevd" ] && "$DIR/systemd-udevd" --version >/dev/null 2>&1; then
    exit 0
fi
rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp/deb"
# apt-get download runs as the _apt user where it can; a directory it can
# write keeps it from warning.
chmod 777 "$DIR.tmp/deb"
if ! (cd "$DIR.tmp/deb" && apt-get download -qq udev >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$DIR.tmp/deb" && apt-get download -qq udev >/dev/null)
fi
dpkg-deb -x "$DIR.tmp"/deb/udev_*.deb "$DIR.tmp/root"
# systemd-udevd is udevadm started under that name.
cp "$DIR.tmp/root/bin/udevadm" "$DIR.tmp/systemd-udevd"
cp -r "$DIR.tmp/root/lib/udev/rules.d" "$DIR.tmp/rules.d"
rm -rf "$DIR.tmp/root" "$DIR.tmp/deb"
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
echo "ci/udev/install.sh: systemd-udevd $("$DIR/systemd-udevd" --version | head -1) in $DIR" >&2
