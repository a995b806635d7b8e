#!/usr/bin/env bash
# Builds the bed's stand-in for a CoreOS live system (issue 47): what
# OpenShift boots instead of a deploy ramdisk, a whole systemd system run
# from RAM whose `ironic-agent.service` pulls the agent's container image
# and runs it with podman. Made from Debian packages only (mmdebstrap, with
# this machine's apt sources), around the kernel the deploy ramdisk boots
# (fetch-kernel.sh), with coreos-installer built from its crate
# (ci/install-deps) in /usr/bin as CoreOS has it:
#   image-builder/liveos.sh [OUT]    # default target/liveos
# OUT/deploy.kernel and OUT/deploy.initramfs (zstd cpio of the whole root;
# the kernel runs systemd as /init) boot as Ironic's deploy kernel and
# ramdisk, named as the deploy ramdisk's are so the bed serves either.
# What CoreOS's Ignition writes (the agent's configuration and unit) is not
# in it: the bed appends it per node as a second cpio archive, which the
# kernel unpacks over the first (liveos_config in hardware-tests).
# As on a CoreOS live system: /run/ostree-live exists (coreos-installer and
# the agent's container form read it as "this system runs from RAM"), the
# hostname is `localhost` until something sets it, every NIC asks DHCP
# (systemd-networkd) and network-online.target waits for an address.
# Root only (mmdebstrap's root mode). Reused when built from the same
# inputs (the stamp below); rebuilt otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/liveos}
cache=target/ramdisk-cache
installer=${COREOS_INSTALLER:-target/tools/bin/coreos-installer}
[ -x "$installer" ] || { echo "liveos.sh: no coreos-installer at $installer (ci/install-deps builds it)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "liveos.sh: mmdebstrap missing (ci/install-deps installs it)" >&2; exit 1; }
phase() { echo "liveos.sh: $*" >&2; }

packages=systemd,systemd-sysv,udev,dbus,podman,crun,conmon,iproute2,kmod,ca-certificates,util-linux,e2fsprogs,dosfstools,gdisk,mdadm
phase "fetching Debian's kernel"
kroot=$(DEB_ARCH=amd64 image-builder/fetch-kernel.sh "$cache" | sed -n 1p)
kver=$(ls "$kroot/lib/modules")
stamp=$(printf '%s\n' "$packages" "$kver" "$(sha256sum "$installer" "$0" | cut -c1-64)" | sha256sum | cut -c1-16)
if [ -e "$out/deploy.initramfs" ] && [ "$(cat "$out/stamp" 2>/dev/null)" = "$stamp" ]; then
    phase "$out is built from these inputs already"
    exit 0
fi
root=$out/root
rm -rf "$out"
mkdir -p "$out"

phase "installing Debian's systemd, podman and tools into $root (mmdebstrap)"
# Reproducible file dates: the packages' own, and the stamp's epoch for
# what dpkg and the hooks make.
export SOURCE_DATE_EPOCH=1700000000
mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$root" >&2

phase "the kernel's modules a QEMU guest, podman and coreos-installer use ($kver)"
# By name, with what they depend on (the kernel's modules.dep): virtio
# devices, the disks and CDs a bed machine has, software RAID, the
# filesystems coreos-installer and the agent mount (vfat with the code page
# and the I/O character set Debian's kernel defaults to, cp437 and ascii:
# without nls_ascii a FAT mount fails with EINVAL; with crc32c, which
# ext4's metadata checksums load through the crypto API: a soft
# dependency, not in modules.dep; without it mounting CoreOS's boot
# filesystem fails with ENOENT), overlay and loop for podman, and the USB
# NICs a BMC shares (cdc_ether, cdc_ncm).
wanted="virtio_pci virtio_blk virtio_net virtio_scsi virtio_rng sd_mod sr_mod cdrom isofs
    ahci nvme xhci_pci ehci_pci usb_storage uas usbnet cdc_ether cdc_ncm
    md_mod raid0 raid1 raid10 linear dm_mod overlay loop fuse ext4 xfs vfat nls_cp437 nls_ascii
    nls_iso8859_1 nls_utf8 efivarfs crc32c_generic crc32c_intel"
mods=lib/modules/$kver
need=$(for m in $wanted; do
    awk -v m="$m" -F: '{n=$1; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/-/, "_", n)}
        n == m {print $1; print $2}' "$kroot/$mods/modules.dep"
done | tr ' ' '\n' | sed '/^$/d' | sort -u)
for f in $need; do
    mkdir -p "$root/usr/$mods/$(dirname "$f")"
    cp -a "$kroot/$mods/$f" "$root/usr/$mods/$f"
done
cp -a "$kroot/$mods"/modules.order "$kroot/$mods"/modules.builtin* "$root/usr/$mods/"
depmod -b "$root/usr" "$kver"

phase "configuring it as a live system"
install -m 0755 "$installer" "$root/usr/bin/coreos-installer"
# /init: systemd, but not on the initramfs's own root. The kernel's rootfs
# cannot be pivoted away from, so crun's pivot_root(2) into a container
# fails there (EINVAL); CoreOS's live system runs on a root mounted by its
# initramfs. As switch_root does, but onto a bind mount of the unpacked
# root (switch_root would first delete the initramfs's files): move it
# over /, chroot into it, run systemd as PID 1.
cat >"$root/init" <<'INIT'
#!/bin/sh
set -e
mount -t proc proc /proc
mkdir -p /sysroot
mount --bind / /sysroot
umount /proc
cd /sysroot
mount --move . /
exec chroot . /usr/lib/systemd/systemd "$@"
INIT
chmod 0755 "$root/init"
echo localhost >"$root/etc/hostname"
: >"$root/etc/fstab"
# No password anywhere; the serial console shows the boot, nobody logs in.
sed -i 's/^root:[^:]*:/root:*:/' "$root/etc/shadow"
mkdir -p "$root/usr/lib/tmpfiles.d" "$root/etc/systemd/network" "$root/etc/modules-load.d"
echo 'f /run/ostree-live 0644 root root -' >"$root/usr/lib/tmpfiles.d/ostree-live.conf"
printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\nIPv6AcceptRA=yes\n' >"$root/etc/systemd/network/50-dhcp.network"
printf 'overlay\nloop\n' >"$root/etc/modules-load.d/podman.conf"
# The journal on the serial console too (the bed keeps the console: what
# podman and the agent in the container say is there when a flow fails).
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nForwardToConsole=yes\nTTYPath=/dev/ttyS0\nMaxLevelConsole=info\n' \
    >"$root/etc/systemd/journald.conf.d/console.conf"
systemctl --root="$root" enable systemd-networkd.service systemd-networkd-wait-online.service >/dev/null 2>&1
systemctl --root="$root" mask systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer \
    >/dev/null 2>&1 || true
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/boot "$root"/usr/lib/udev/hwdb.d

phase "packing the initramfs (zstd)"
cp "$kroot/boot/vmlinuz-$kver" "$out/deploy.kernel"
find "$root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + 2>/dev/null || true
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --reproducible --quiet) \
    | zstd -q -T0 -12 >"$out/deploy.initramfs"
rm -rf "$root"
echo "$stamp" >"$out/stamp"
ls -l "$out/deploy.kernel" "$out/deploy.initramfs" >&2
