#!/usr/bin/env bash
# Stages the SSH server for the ramdisk's debug access (`sshkey=` on the
# kernel command line): Debian's dropbear with exactly the shared libraries
# it needs and the dynamic loader (stage-dynamic.sh), from packages fetched
# into CACHE (nothing is installed on this machine).
#   image-builder/fetch-ssh.sh CACHE   -> prints the staged root directory
set -euo pipefail
cache=$1
stage=$cache/ssh-root
if [ ! -x "$stage/usr/sbin/dropbear" ]; then
    "$(dirname "$0")/stage-dynamic.sh" "$stage" "$cache/ssh-debs" \
        "dropbear-bin libc6 libcrypt1 libtomcrypt1 libtommath1 libgmp10 zlib1g" \
        usr/sbin/dropbear=usr/sbin/dropbear
fi
echo "$stage"
