//! The test image's initramfs: busybox with a shell-script `/init` that
//! prints the marker line and the config drive, and only the kernel
//! modules needed to see a disk on virtio-blk, virtio-scsi, NVMe or
//! AHCI/SATA and to read iso9660 and vfat. newc cpio (sorted, mtime 0,
//! owner 0:0), zstd-compressed.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use image_builder::cpio::{Entry, Writer};
use image_builder::kernel::{closure, Kernel};

use super::disk::ESP_LABEL;
use super::ignition::{APPLIED_BEGIN, APPLIED_END, APPLY_SH, FLATTEN_AWK};
use super::{
    marker_line, CMDLINE, CONFIG_DRIVE_BEGIN, CONFIG_DRIVE_END, CONFIG_DRIVE_UNMOUNTABLE,
    IGNITION_BEGIN, IGNITION_END, NO_CONFIG_DRIVE,
};

/// The modules loaded at boot, in this order (each after its dependencies).
pub const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "nvme",
    "ahci",
    "ata_piix",
    "sd_mod",
    "isofs",
    "vfat",
    "nls_cp437",
    "nls_ascii",
    "nls_iso8859_1",
    "nls_utf8",
];

/// busybox applets `/init` uses, linked in `/bin`.
const APPLETS: &[&str] = &[
    "sh", "mount", "insmod", "findfs", "cat", "echo", "sleep", "poweroff", // the init
    "awk", "base64", "mkdir", "dirname", "chmod", "printf", "find", "sort", "rm",
    "mktemp", // Ignition's stand-in
];

/// The `/init` script for `marker` (already checked to need no quoting).
pub fn init_script(marker: &str) -> String {
    let booted = marker_line(marker);
    format!(
        r#"#!/bin/sh
# The test image's init: say it booted, show the config drive, power off.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
    insmod "/lib/modules/$m" || echo "testimage: insmod $m failed"
done < /etc/modules.order
echo "{booted}"
echo "{CMDLINE} $(cat /proc/cmdline)"
# Config drives sit on the disk the system booted from: once its ESP (or a
# CoreOS-like image's `boot` filesystem) is visible, that disk's partitions are known; wait a little longer for
# config-2, at most 30 s in all.
dev=
esp=
i=0
while [ $i -lt 60 ]; do
    dev=$(findfs LABEL=config-2 2>/dev/null) && break
    dev=
    if [ -z "$esp" ] && {{ findfs LABEL={ESP_LABEL} || findfs LABEL=boot; }} >/dev/null 2>&1; then
        esp=$i
    fi
    if [ -n "$esp" ] && [ $((i - esp)) -ge 4 ]; then
        break
    fi
    sleep 0.5
    i=$((i + 1))
done
if [ -z "$dev" ]; then
    echo "{NO_CONFIG_DRIVE}"
elif mount -t iso9660 -o ro "$dev" /mnt 2>/dev/null || mount -t vfat -o ro "$dev" /mnt; then
    echo "{CONFIG_DRIVE_BEGIN} $dev"
    cat /mnt/openstack/latest/meta_data.json
    echo
    echo "{CONFIG_DRIVE_END}"
else
    echo "{CONFIG_DRIVE_UNMOUNTABLE} $dev"
fi
# The CoreOS-like image's stand-in for Ignition
# (hardware_tests::coreosimage::bootable_coreos_image): on a first boot
# (`ignition.firstboot` in the `boot` filesystem) it shows the config from
# where CoreOS's Ignition reads it, then applies its files and users to
# /sysroot (a tmpfs) and lists what it wrote (testimage/ignition.rs).
if bdev=$(findfs LABEL=boot 2>/dev/null) && mount -t vfat -o ro "$bdev" /boot 2>/dev/null; then
    if [ -f /boot/ignition.firstboot ] && [ -f /boot/ignition/config.ign ]; then
        echo "{IGNITION_BEGIN} $bdev"
        cat /boot/ignition/config.ign
        echo
        echo "{IGNITION_END}"
        mount -t tmpfs tmpfs /sysroot
        if out=$(/bin/ignition-apply /boot/ignition/config.ign /sysroot); then
            echo "{APPLIED_BEGIN}"
            echo "$out"
            echo "{APPLIED_END}"
        else
            echo "$out"
        fi
    fi
fi
echo "testimage: partitions:"
cat /proc/partitions
poweroff -f
"#
    )
}

/// Module files (relative to `lib/modules/<version>`) in load order:
/// each wanted module after its dependencies, each file once.
pub fn load_order(kernel: &Kernel) -> Result<Vec<String>> {
    let read = |f: &str| {
        std::fs::read_to_string(kernel.modules.join(f))
            .with_context(|| format!("reading {}/{f}", kernel.modules.display()))
    };
    let dep = read("modules.dep")?;
    let builtin = read("modules.builtin").unwrap_or_default();
    let (files, missing) = closure(&dep, MODULES);
    let index = agent::init::modules::ModuleIndex::parse("", &dep, &builtin);
    let absent: Vec<&String> = missing
        .iter()
        .filter(|m| !index.builtin.contains(*m))
        .collect();
    if !absent.is_empty() {
        bail!(
            "kernel {} has no module {absent:?} (neither built in nor in modules.dep)",
            kernel.version
        );
    }
    let mut order: Vec<String> = Vec::new();
    for m in MODULES {
        for f in index.load_order(m) {
            if !order.contains(&f) {
                order.push(f);
            }
        }
    }
    debug_assert!(order.iter().all(|f| files.contains(f)));
    Ok(order)
}

/// The zstd-compressed initramfs.
pub fn build(kernel: &Kernel, busybox: &std::path::Path, marker: &str) -> Result<Vec<u8>> {
    let mut t: BTreeMap<String, Entry> = BTreeMap::new();
    let dir = || Entry::Dir { mode: 0o755 };
    for d in [
        "bin",
        "boot",
        "dev",
        "etc",
        "lib",
        "lib/modules",
        "mnt",
        "proc",
        "sys",
        "sysroot",
        "tmp",
    ] {
        t.insert(d.into(), dir());
    }
    t.insert(
        "dev/console".into(),
        Entry::CharDev {
            mode: 0o600,
            major: 5,
            minor: 1,
        },
    );
    let read =
        |p: &std::path::Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    t.insert(
        "bin/busybox".into(),
        Entry::File {
            mode: 0o755,
            data: read(busybox)?,
        },
    );
    for a in APPLETS {
        t.insert(
            format!("bin/{a}"),
            Entry::Symlink {
                target: "busybox".into(),
            },
        );
    }
    t.insert(
        "bin/ignition-apply".into(),
        Entry::File {
            mode: 0o755,
            data: APPLY_SH.as_bytes().to_vec(),
        },
    );
    t.insert(
        "lib/ignition-flatten.awk".into(),
        Entry::File {
            mode: 0o644,
            data: FLATTEN_AWK.as_bytes().to_vec(),
        },
    );
    t.insert(
        "init".into(),
        Entry::File {
            mode: 0o755,
            data: init_script(marker).into_bytes(),
        },
    );
    let order = load_order(kernel)?;
    let mut list = String::new();
    for f in &order {
        let mut parent = String::from("lib/modules");
        if let Some(p) = std::path::Path::new(f).parent() {
            for comp in p.iter() {
                parent = format!("{parent}/{}", comp.to_string_lossy());
                t.insert(parent.clone(), dir());
            }
        }
        t.insert(
            format!("lib/modules/{f}"),
            Entry::File {
                mode: 0o644,
                data: read(&kernel.modules.join(f))?,
            },
        );
        list.push_str(f);
        list.push('\n');
    }
    t.insert(
        "etc/modules.order".into(),
        Entry::File {
            mode: 0o644,
            data: list.into_bytes(),
        },
    );
    let mut w = Writer::new(Vec::new(), 0);
    for (path, entry) in &t {
        w.add(path, entry)?;
    }
    let cpio = w.finish()?;
    Ok(zstd::bulk::compress(&cpio, 19)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_prints_the_marker_line_and_the_config_drive_markers() {
        let s = init_script("m-123");
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains(&format!("echo \"{}\"", marker_line("m-123"))));
        for l in [
            CONFIG_DRIVE_BEGIN,
            CONFIG_DRIVE_END,
            NO_CONFIG_DRIVE,
            CMDLINE,
            IGNITION_BEGIN,
            IGNITION_END,
            APPLIED_BEGIN,
            APPLIED_END,
        ] {
            assert!(s.contains(l), "{l}");
        }
        assert!(s.trim_end().ends_with("poweroff -f"));
    }
}
