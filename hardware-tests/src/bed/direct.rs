//! The deploy ramdisk booted straight from its kernel and initramfs (no
//! PXE, no firmware boot menu) with its agent pointed at the stand-in
//! conductor on the bed's bridge, on virtio disks kept as files; and the
//! partition table of such a disk file read back from the host. The
//! `ramdisk_qemu*` suites boot this machine (`ramdisk_qemu_aarch64` its
//! aarch64 twin under AAVMF).

use std::path::Path;
use std::process::Command;

use agent::testconductor::{Settings, TestConductor};
use image_builder::arch::Arch;

use super::{Boot, Bus, Disk, Firmware, MultipathDisk, Net, NetOptions, Nic, VmSpec, BRIDGE_IP};
use crate::run;

/// The stand-in conductor (default settings) where [`ramdisk_spec`]'s agent
/// looks it up: `BRIDGE_IP:6385`. Call it inside the bed's namespace
/// (`Net::block_on`).
pub async fn conductor() -> TestConductor {
    TestConductor::start_on(
        Settings::default(),
        format!("{BRIDGE_IP}:6385")
            .parse()
            .expect("a socket address"),
    )
    .await
    .expect("starting the stand-in conductor on the bed's bridge")
}

/// Virtio disks of `size` bytes with the serials `serials`, their files in
/// `dir` (created when the machine starts).
pub fn virtio_disks(dir: &Path, serials: &[&str], size: u64) -> Vec<Disk> {
    serials
        .iter()
        .map(|serial| Disk {
            path: dir.join(format!("{serial}.img")),
            size,
            bus: Bus::Virtio,
            serial: serial.to_string(),
            model: None,
        })
        .collect()
}

/// The bed (`name`) and [`ramdisk_spec`]'s machine with a SAN LUN on
/// several paths (`lun`) beside `disks`, as the multipath suites boot it:
/// 1.5 GiB of memory, the inspection callback on the stand-in conductor,
/// `extra_args` on the kernel command line.
pub fn multipath_machine(
    name: &str,
    ramdisk: &Path,
    mac: &str,
    disks: &[Disk],
    lun: MultipathDisk,
    extra_args: &str,
) -> anyhow::Result<(Net, VmSpec)> {
    let mut opts = NetOptions::pxe(name, ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts)?;
    let mut spec = ramdisk_spec(
        ramdisk,
        mac,
        disks,
        &format!(
            "ipa-inspection-callback-url=http://{BRIDGE_IP}:6385/v1/continue_inspection {extra_args}"
        ),
    );
    spec.memory_mb = 1536;
    spec.multipath_disks.push(lun);
    Ok((net, spec))
}

/// A machine named `vm` with one NIC (`mac`) and `disks` that boots the
/// ramdisk in `ramdisk` directly; its agent looks up the conductor at
/// `http://BRIDGE_IP:6385`. `extra_args` go on the kernel command line.
pub fn ramdisk_spec(ramdisk: &Path, mac: &str, disks: &[Disk], extra_args: &str) -> VmSpec {
    let mut spec = VmSpec::new("vm");
    spec.nics.push(Nic { mac: mac.into() });
    spec.disks.extend(disks.iter().cloned());
    spec.boot = Boot::Direct {
        kernel: ramdisk.join("deploy.kernel"),
        initrd: ramdisk.join("deploy.initramfs"),
        append: format!(
            "console=ttyS0 quiet panic=-1 BOOTIF=01-{} ipa-api-url=http://{BRIDGE_IP}:6385 {extra_args}",
            mac.replace(':', "-")
        ),
    };
    spec
}

/// [`ramdisk_spec`]'s machine as an aarch64 `virt` board (issue 33): AAVMF
/// with its NVRAM in `vars` (made from AAVMF's template when missing), which
/// starts the kernel QEMU hands it, on the PL011 console (`ttyAMA0`).
pub fn aarch64_ramdisk_spec(
    ramdisk: &Path,
    vars: &Path,
    mac: &str,
    disks: &[Disk],
    extra_args: &str,
) -> VmSpec {
    let mut spec = ramdisk_spec(ramdisk, mac, disks, extra_args);
    spec.arch = Arch::Aarch64;
    spec.firmware = Firmware::Uefi {
        vars: vars.to_path_buf(),
    };
    if let Boot::Direct { append, .. } = &mut spec.boot {
        *append = append.replacen(
            "console=ttyS0 ",
            &format!("console={} ", Arch::Aarch64.serial_console()),
            1,
        );
    }
    spec
}

/// `(start, length)` in bytes of each partition of a disk image (sfdisk);
/// none when it has no table sfdisk reads.
pub fn partitions(disk: &Path) -> Vec<(u64, u64)> {
    let out = run(Command::new("sfdisk").arg("--json").arg(disk)).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    v["partitiontable"]["partitions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["start"].as_u64().unwrap_or(0) * 512,
                        p["size"].as_u64().unwrap_or(0) * 512,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What libblkid finds in `len` bytes at `start` of a disk image
/// (`blkid -p -o export`: `TYPE=…`, `LABEL=…` lines); empty when nothing.
pub fn probe_partition(disk: &Path, start: u64, len: u64) -> String {
    run(Command::new("blkid")
        .args([
            "-p",
            "-o",
            "export",
            "-O",
            &start.to_string(),
            "-S",
            &len.to_string(),
        ])
        .arg(disk))
    .unwrap_or_default()
}
