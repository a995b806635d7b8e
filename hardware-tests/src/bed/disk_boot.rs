//! What a firmware makes of a disk file: the file booted in a plain QEMU
//! of the bed (SeaBIOS, the disk on virtio-blk, no NIC, so nothing but
//! the disk can boot), watched until the test image's marker line or the
//! firmware's "nothing to boot" message appears. The fault tests use it
//! to show a disk left by a failed or interrupted write boots nothing, and
//! that a disk whose libvirt domain boots it from a device libvirt does
//! not describe (a `blkdebug` disk) holds a deployed image that boots.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::{Boot, Bus, Disk, Firmware, Net, Vm, VmSpec};
use crate::testimage;

/// What the firmware did with the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Booted {
    /// The test image's system started and printed its marker line.
    Marker,
    /// The firmware found nothing to boot; the line it printed.
    Nothing(String),
}

/// Boots `disk` (a raw file no running machine has open) as the only disk
/// of a plain SeaBIOS machine named `name` on `net`, and returns what
/// happened and when: the line of `marker`'s system, or one of
/// [`testimage::no_boot_lines`]. Anything else within `timeout` (a loader
/// that hangs, QEMU exiting first) is an error naming the console file.
pub fn boot_disk_file(
    net: &Net,
    name: &str,
    disk: &Path,
    marker: &str,
    timeout: Duration,
) -> Result<(Booted, Duration)> {
    let size = std::fs::metadata(disk)?.len();
    let spec = VmSpec {
        firmware: Firmware::Bios,
        boot: Boot::Disk,
        disks: vec![Disk {
            path: disk.to_path_buf(),
            size,
            bus: Bus::Virtio,
            serial: "diskboot0".into(),
            model: None,
        }],
        ..VmSpec::new(name)
    };
    let mut vm = Vm::start(net, &spec)?;
    let line = testimage::marker_line(marker);
    let deadline = Instant::now() + timeout;
    loop {
        let console = vm.console();
        if console.contains(&line) {
            return Ok((Booted::Marker, vm.elapsed()));
        }
        if let Some(nothing) = testimage::no_boot_lines()
            .iter()
            .find(|l| console.contains(**l))
        {
            return Ok((Booted::Nothing(nothing.to_string()), vm.elapsed()));
        }
        if let Some(status) = vm.exited()? {
            bail!(
                "QEMU booting {} exited ({status}) before a marker or a no-boot message; console: {}",
                disk.display(),
                vm.console_path().display()
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "booting {}: neither {line:?} nor a no-boot message within {timeout:?}; console: {}",
                disk.display(),
                vm.console_path().display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
