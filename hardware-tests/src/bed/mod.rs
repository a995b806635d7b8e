//! The QEMU test bed: virtual machines that PXE-boot the deploy ramdisk on a
//! network that exists only inside a namespace the test creates.
//!
//! * [`Net`]: a network namespace with a bridge (`10.99.0.1/24`,
//!   `fd99::1/64`), dnsmasq on it (DHCP with MAC reservations, router
//!   advertisements, TFTP of iPXE's boot script, the ramdisk's kernel and
//!   initramfs, or the URL of Ironic's `boot.ipxe` for iPXE clients, and
//!   iPXE for UEFI PXE clients, or Ironic's own TFTP root and loader
//!   ([`NetOptions::ironic_tftp`]); an IPv6-only bed has only `fd99::1/64`,
//!   no dnsmasq and drops every IPv4 frame), a way to run async test
//!   code whose sockets live in the namespace ([`Net::block_on`]) and to
//!   start programs in it ([`Net::spawn`]).
//! * [`Vm`]: QEMU (TCG, `-cpu qemu64,+rdrand`, q35) with SeaBIOS or OVMF
//!   (its NVRAM kept in a file across boots), disks on virtio-blk, NVMe,
//!   SATA (AHCI) or virtio-scsi with set serials and models, NICs with set
//!   MACs on taps in the bridge; boots from the network, its disk, or a
//!   kernel given directly. The serial console goes to a file under
//!   `target/bed-logs/` that every failure message names.
//! * [`lldp::Switch`]: LLDP frames sent into the bridge, as a switch port would.
//! * [`deploy`]: a machine to deploy to through the test conductor, then
//!   booted from its disk (the deploy suite and the demo).
//! * [`redfish`]: a real Redfish BMC (sushy-tools' emulator with its libvirt
//!   driver, a private libvirtd) running bed machines as libvirt domains:
//!   power, boot device and virtual media set over Redfish.
//! * [`domain`]: the libvirt domain XML of the BMC's x86_64 machines and
//!   the lines every architecture's domain starts with.
//! * [`arm_domain`]: the BMC's aarch64 machines (the `virt` board under
//!   AAVMF) and the arm64 ESP Ironic puts on their virtual-media ISOs;
//!   [`arm_flow`]: the files Ironic serves them, Ironic's
//!   per-architecture configuration and the ISO it inserted;
//!   [`arm_pxe`]: Ironic's `pxe` boot interface (GRUB over TFTP from its
//!   own `tftp_root`, optionally under Secure Boot) for them;
//!   [`arm_server`]: the flow from enrolment to the deployed disk's boot.
//! * [`coreos_disk`]: what `install_coreos` left on a machine's disk file,
//!   read through a read-only loop device after the machine is off.
//! * [`disk_boot`]: a disk file booted in a plain SeaBIOS machine: the
//!   test image's marker, or the firmware finding nothing to boot.
//! * [`ssh`]: password logins to a guest from inside the namespace.
//! * [`vmedia_disc`]: the conductor certificate, its TLS server side and
//!   the `config-2` disc carrying its CA, for ramdisks booted directly.
//! * [`http_root`]: Ironic's `http_root` served on the bed's network, with
//!   its access log.
//! * [`ironic_flow`]: real Ironic taking a machine behind the Redfish BMC
//!   through inspection, cleaning, deploy and undeploy with its `ipxe` boot
//!   interface, the bed only watching (the Ironic-drives-the-ramdisk test
//!   and the demo).
//!
//! Everything is removed on drop, also when a test fails: QEMU, dnsmasq and
//! other processes are killed by PID, taps and the namespace deleted.

pub mod arm_domain;
pub mod arm_flow;
pub mod arm_pxe;
pub mod arm_server;
pub mod arm_suite;
pub mod coreos_disk;
pub mod deploy;
pub mod direct;
pub mod dirty_disk;
pub mod disk_boot;
pub mod domain;
pub mod http_root;
mod ipv4_drop;
pub mod ironic_flow;
pub mod liveos;
pub mod lldp;
pub mod metal3;
pub mod net;
pub mod qmp;
pub mod redfish;
pub mod ssh;
pub mod vm;
pub mod vmedia_disc;

pub use net::{IronicTftp, Net, NetOptions, Proc, BRIDGE_IP, BRIDGE_IP6};
pub use vm::{Boot, Bus, Disk, Firmware, MultipathDisk, Nic, Vm, VmSpec};

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{repo_root, run};

/// The deploy ramdisk to boot: `$RAMDISK_DIR`, else `target/ramdisk`,
/// built by `image-builder/build.sh` when it is missing.
pub fn ramdisk_dir() -> Result<PathBuf> {
    let dir = ramdisk_location();
    if !ramdisk_built(&dir) {
        build_ramdisk(&dir, None)?;
    }
    Ok(dir)
}

/// Where [`ramdisk_dir`] looks: `$RAMDISK_DIR`, else `target/ramdisk`.
pub fn ramdisk_location() -> PathBuf {
    std::env::var_os("RAMDISK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ramdisk"))
}

/// Whether `dir` holds a built ramdisk.
pub fn ramdisk_built(dir: &Path) -> bool {
    dir.join("deploy.initramfs").exists()
}

/// Builds the deploy ramdisk into `dir` with `image-builder/build.sh`;
/// with `log`, the build's output goes there as it is made (the demo shows
/// its last line while it waits), else it is kept for the error.
pub fn build_ramdisk(dir: &Path, log: Option<&Path>) -> Result<()> {
    build_ramdisk_with(&[], dir, log).context("building the deploy ramdisk")
}

/// [`build_ramdisk`] with `build.sh`'s `args` before the directory.
fn build_ramdisk_with(args: &[&str], dir: &Path, log: Option<&Path>) -> Result<()> {
    let mut cmd = Command::new(repo_root().join("image-builder/build.sh"));
    cmd.args(args).arg(dir);
    let Some(log) = log else {
        return run(&mut cmd).map(drop);
    };
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let status = cmd
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .with_context(|| format!("running {cmd:?}"))?;
    anyhow::ensure!(
        status.success(),
        "image-builder/build.sh failed ({status}); its output: {}",
        log.display()
    );
    Ok(())
}

/// Where [`aarch64_ramdisk_dir`] looks: `$RAMDISK_AARCH64_DIR`, else
/// `target/ramdisk-aarch64`.
pub fn aarch64_ramdisk_location() -> PathBuf {
    std::env::var_os("RAMDISK_AARCH64_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ramdisk-aarch64"))
}

/// Builds the aarch64 deploy ramdisk (issue 33) into `dir` with
/// `image-builder/build.sh --arch aarch64`, its output in `log` as for
/// [`build_ramdisk`].
pub fn build_aarch64_ramdisk(dir: &Path, log: Option<&Path>) -> Result<()> {
    build_ramdisk_with(&["--arch", "aarch64"], dir, log)
        .context("building the aarch64 deploy ramdisk")
}

/// The aarch64 deploy ramdisk (issue 33): [`aarch64_ramdisk_location`],
/// built by `image-builder/build.sh --arch aarch64` when it is missing.
pub fn aarch64_ramdisk_dir() -> Result<PathBuf> {
    let dir = aarch64_ramdisk_location();
    if !ramdisk_built(&dir) {
        build_aarch64_ramdisk(&dir, None)?;
    }
    Ok(dir)
}

/// Where consoles and server logs of a test are kept (not deleted, so a
/// failure can be read afterwards): `target/bed-logs/<test>`.
pub fn logs_dir(test: &str) -> Result<PathBuf> {
    let dir = repo_root().join("target/bed-logs").join(test);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Debian's iPXE for UEFI PXE clients (`snponly.efi`, which drives the
/// NIC through the firmware's own network driver), fetched once with
/// `apt-get download` into `target/ramdisk-cache/ipxe` and never installed.
pub fn ipxe_efi() -> Result<PathBuf> {
    let cache = repo_root().join("target/ramdisk-cache");
    let file = cache.join("ipxe/usr/lib/ipxe/snponly.efi");
    if file.exists() {
        return Ok(file);
    }
    std::fs::create_dir_all(&cache)?;
    let dl = tempfile::tempdir_in(&cache)?;
    run(Command::new("apt-get")
        .args(["download", "-q", "ipxe"])
        .current_dir(dl.path()))
    .context("fetching Debian's ipxe package for UEFI PXE")?;
    let deb = std::fs::read_dir(dl.path())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download ipxe left no .deb")?;
    // Unpacked beside the download, then renamed into place: tests running
    // at once never see a half-unpacked tree (the loser's rename fails and
    // the winner's tree is used).
    let tmp = dl.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    let _ = std::fs::rename(&tmp, cache.join("ipxe"));
    anyhow::ensure!(file.exists(), "the ipxe package has no {}", file.display());
    Ok(file)
}
