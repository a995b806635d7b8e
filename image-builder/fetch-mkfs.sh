#!/usr/bin/env bash
# Stages the filesystem makers a partition image's ephemeral partition may
# ask for (`ephemeral_format`, Ironic's default ext4; IPA's ramdisk runs
# the same tools): Debian's mke2fs (as mkfs.ext2/3/4, with its
# mke2fs.conf) and mkfs.xfs, each with exactly its shared libraries and
# the dynamic loader (stage-dynamic.sh), from packages fetched into CACHE
# (nothing is installed on this machine). vfat and swap the agent writes
# itself.
#   image-builder/fetch-mkfs.sh CACHE   -> prints the staged root directory
set -euo pipefail
cache=$1
stage=$cache/mkfs-root
if [ ! -x "$stage/usr/sbin/mkfs.xfs" ] || [ ! -L "$stage/etc/mtab" ]; then
    STAGE_FILES="etc/mke2fs.conf=etc/mke2fs.conf" \
        "$(dirname "$0")/stage-dynamic.sh" "$stage.new" "$cache/mkfs-debs" \
        "e2fsprogs libext2fs2 libcom-err2 libblkid1 libuuid1 xfsprogs libinih1 liburcu8 libc6" \
        sbin/mke2fs=usr/sbin/mke2fs sbin/mkfs.xfs=usr/sbin/mkfs.xfs
    # mke2fs picks the filesystem from the name it is run as.
    for fs in ext2 ext3 ext4; do ln -s mke2fs "$stage.new/usr/sbin/mkfs.$fs"; done
    # mke2fs checks the mount table before it formats.
    ln -s /proc/self/mounts "$stage.new/etc/mtab"
    rm -rf "$stage"
    mv "$stage.new" "$stage"
fi
echo "$stage"
