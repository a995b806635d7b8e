//! The Redfish bed's Arm server (issue 33): the libvirt domain XML of an
//! aarch64 machine as [`super::redfish::Bmc::define`] defines it — QEMU's
//! `virt` board with a Cortex-A57 under TCG, AAVMF (Arm's UEFI) with the
//! spec's NVRAM file (Microsoft's keys enrolled and Secure Boot enforced
//! for `Firmware::UefiSecureBoot`), virtio disks and NICs, virtio-rng (a
//! Cortex-A57 has no RNDR) and an empty SCSI CD-ROM drive on a virtio-scsi
//! controller,
//! the bus sushy-tools' libvirt driver puts virtual media on for an
//! aarch64 domain (`_default_controller`: no IDE or SATA on `virt`) — and
//! the EFI system partition image Ironic embeds in the ISOs it builds for
//! such a machine (`[conductor] bootloader_by_arch`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use image_builder::arch::Arch;

use super::domain::{
    path_attr, write_domain_head, write_interfaces, xml_escape as esc, DomainHead,
};
use super::vm::{Boot, Bus, Firmware, VmSpec};
use crate::run;

/// AAVMF's code and NVRAM template (package qemu-efi-aarch64).
pub const AAVMF_CODE: &str = "/usr/share/AAVMF/AAVMF_CODE.fd";
/// The NVRAM template without enrolled keys (Secure Boot off).
pub const AAVMF_VARS: &str = "/usr/share/AAVMF/AAVMF_VARS.fd";
/// AAVMF's code for the NVRAM below (`Firmware::UefiSecureBoot`).
pub const AAVMF_CODE_MS: &str = "/usr/share/AAVMF/AAVMF_CODE.ms.fd";
/// The NVRAM template with Microsoft's keys enrolled and Secure Boot
/// enforced, as Arm servers ship.
pub const AAVMF_VARS_MS: &str = "/usr/share/AAVMF/AAVMF_VARS.ms.fd";

/// The libvirt domain XML for the aarch64 machine `spec` with its NICs on
/// `taps` and its serial console (the PL011) appended to `console`.
/// Virtio disks only; `Boot::Network` puts the first NIC first, `Boot::Disk`
/// the first disk (later the BMC decides).
pub fn domain_xml(spec: &VmSpec, taps: &[String], console: &Path) -> Result<String> {
    anyhow::ensure!(
        spec.arch == Arch::Aarch64,
        "{}: not an aarch64 machine",
        spec.name
    );
    anyhow::ensure!(taps.len() == spec.nics.len(), "one tap per NIC");
    anyhow::ensure!(
        !spec.ipmi
            && spec.blkdebug.is_none()
            && spec.multipath_disks.is_empty()
            && spec.usb_nic.is_none(),
        "{}: the Arm domain offers no IPMI simulator, blkdebug, multipath disks or USB NIC",
        spec.name
    );
    let (code, template, vars) = match &spec.firmware {
        Firmware::Uefi { vars } => (AAVMF_CODE, AAVMF_VARS, vars),
        Firmware::UefiSecureBoot { vars } => (AAVMF_CODE_MS, AAVMF_VARS_MS, vars),
        Firmware::Bios => bail!("{}: an Arm server has no BIOS (AAVMF only)", spec.name),
    };
    let mut x = String::new();
    // type='qemu': TCG, as on the x86 domains.
    let _ = writeln!(x, "<domain type='qemu'>");
    write_domain_head(
        &mut x,
        spec,
        &DomainHead {
            arch: "aarch64",
            machine: "virt",
            uefi: Some((code, template, vars.as_path())),
            cpu: "<model fallback='forbid'>cortex-a57</model>",
            emulator: "/usr/bin/qemu-system-aarch64",
        },
    );
    for (i, d) in spec.disks.iter().enumerate() {
        anyhow::ensure!(
            d.bus == Bus::Virtio && d.model.is_none(),
            "disk {}: the Arm domain has plain virtio disks only",
            d.serial
        );
        anyhow::ensure!(i < 26, "too many disks");
        if !d.path.exists() {
            std::fs::File::create(&d.path)
                .and_then(|f| f.set_len(d.size))
                .with_context(|| format!("creating disk {}", d.path.display()))?;
        }
        let boot = if i == 0 && matches!(spec.boot, Boot::Disk) {
            "<boot order='1'/>"
        } else {
            ""
        };
        let _ = writeln!(
            x,
            "    <disk type='file' device='disk'><driver name='qemu' type='raw' cache='unsafe'/><source file='{}'/><target dev='vd{}' bus='virtio'/><serial>{}</serial>{boot}</disk>",
            path_attr(&d.path),
            (b'a' + i as u8) as char,
            esc(&d.serial)
        );
    }
    let _ = writeln!(
        x,
        "    <controller type='scsi' index='0' model='virtio-scsi'/>"
    );
    // The virtual media drive, empty: sushy-tools replaces it on insert
    // (on the same SCSI bus) and removes it on eject.
    let _ = writeln!(
        x,
        "    <disk type='file' device='cdrom'><driver name='qemu' type='raw'/><target dev='sdx' bus='scsi'/><readonly/></disk>"
    );
    write_interfaces(&mut x, spec, taps);
    if let Boot::Direct { .. } = spec.boot {
        bail!(
            "{}: a direct kernel boot is not offered on a Redfish machine",
            spec.name
        );
    }
    let _ = writeln!(
        x,
        "    <serial type='file'><source path='{}' append='on'/><target port='0'/></serial>",
        path_attr(console)
    );
    let _ = writeln!(
        x,
        "    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>"
    );
    let _ = writeln!(x, "    <controller type='usb' model='none'/>");
    let _ = writeln!(x, "    <memballoon model='none'/>");
    let _ = writeln!(x, "  </devices>");
    let _ = writeln!(x, "</domain>");
    Ok(x)
}

/// The ESP image for Ironic's `[conductor] bootloader_by_arch` (aarch64),
/// made in `dir`: `/EFI/BOOT/BOOTAA64.EFI` is `shim` (the aarch64
/// ramdisk's `shimaa64.efi`), which starts `grubaa64.efi` beside it, made
/// from `grub`, as Metal3's ESP does with its distribution's shim and GRUB.
/// `grub` must be Debian's monolithic `grubaa64.efi` (`grub-efi-arm64-signed`,
/// see `testimage::Inputs::fetch_for`), which reads `$cmdpath/grub.cfg`:
/// booted from the ISO's El Torito image, that is the `EFI/BOOT/grub.cfg`
/// Ironic writes on the ISO (`[DEFAULT] grub_config_path`). The ramdisk's
/// own `grubaa64.efi` is Debian's network GRUB (prefix `/grub`, for TFTP)
/// and stops at a GRUB prompt there.
pub fn esp_image(dir: &Path, shim: &Path, grub: &Path) -> Result<PathBuf> {
    let esp = dir.join("esp-aarch64.img");
    run(Command::new("mkfs.vfat")
        .args(["-C", "-n", "ESP"])
        .arg(&esp)
        .arg("8192"))?;
    let mtools = |tool: &str| crate::mtools(tool, &esp);
    run(mtools("mmd").args(["::/EFI", "::/EFI/BOOT"]))?;
    for (from, to) in [(shim, "BOOTAA64.EFI"), (grub, "grubaa64.efi")] {
        anyhow::ensure!(from.exists(), "{} is missing", from.display());
        run(mtools("mcopy").arg(from).arg(format!("::/EFI/BOOT/{to}")))?;
    }
    Ok(esp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bed::{Disk, Nic};

    fn arm_spec(dir: &Path) -> VmSpec {
        let mut spec = VmSpec::new("arm-unit");
        spec.arch = Arch::Aarch64;
        spec.firmware = Firmware::Uefi {
            vars: dir.join("VARS.fd"),
        };
        spec.boot = Boot::Disk;
        spec.disks.push(Disk {
            path: dir.join("d0.img"),
            size: 1 << 20,
            bus: Bus::Virtio,
            serial: "arm-d0".into(),
            model: None,
        });
        spec.nics.push(Nic {
            mac: "52:54:00:00:00:01".into(),
        });
        spec
    }

    #[test]
    fn the_arm_domain_is_a_virt_board_under_aavmf_with_a_scsi_cd_drive() {
        let dir = tempfile::tempdir().unwrap();
        let spec = arm_spec(dir.path());
        let xml = domain_xml(&spec, &["tap9".into()], &dir.path().join("c.log")).unwrap();
        for want in [
            "<type arch='aarch64' machine='virt'>hvm</type>",
            "<model fallback='forbid'>cortex-a57</model>",
            &format!("type='pflash'>{AAVMF_CODE}</loader>"),
            &format!("<nvram template='{AAVMF_VARS}'>"),
            "<emulator>/usr/bin/qemu-system-aarch64</emulator>",
            "<controller type='scsi' index='0' model='virtio-scsi'/>",
            "device='cdrom'><driver name='qemu' type='raw'/><target dev='sdx' bus='scsi'/>",
            "<target dev='vda' bus='virtio'/><serial>arm-d0</serial><boot order='1'/>",
            "<target dev='tap9' managed='no'/>",
        ] {
            assert!(xml.contains(want), "{want:?} not in\n{xml}");
        }
        // No x86 devices: sushy-tools would put the CD on SATA or IDE.
        for unwanted in [
            "machine='q35'",
            "bus='sata'",
            "bus='ide'",
            "/OVMF/",
            "arch='x86_64'",
        ] {
            assert!(!xml.contains(unwanted), "{unwanted:?} in\n{xml}");
        }
    }

    #[test]
    fn what_the_arm_domain_cannot_be_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("c.log");
        let mut bios = arm_spec(dir.path());
        bios.firmware = Firmware::Bios;
        assert!(domain_xml(&bios, &["t".into()], &console).is_err());
        let mut sata = arm_spec(dir.path());
        sata.disks[0].bus = Bus::Sata;
        assert!(domain_xml(&sata, &["t".into()], &console).is_err());
        // Secure Boot: AAVMF with Microsoft's keys enrolled.
        let mut sb = arm_spec(dir.path());
        sb.firmware = Firmware::UefiSecureBoot {
            vars: dir.path().join("SB.fd"),
        };
        let xml = domain_xml(&sb, &["t".into()], &console).unwrap();
        assert!(
            xml.contains(&format!("<nvram template='{AAVMF_VARS_MS}'>")),
            "{xml}"
        );
        assert!(
            xml.contains(&format!("type='pflash'>{AAVMF_CODE_MS}</loader>")),
            "{xml}"
        );
        let mut x86 = arm_spec(dir.path());
        x86.arch = Arch::X86_64;
        assert!(domain_xml(&x86, &["t".into()], &console).is_err());
        assert!(domain_xml(&arm_spec(dir.path()), &[], &console).is_err());
    }
}
