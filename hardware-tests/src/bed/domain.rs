//! The libvirt domain XML of the Redfish bed's machines: the lines every
//! architecture's domain starts with (`write_domain_head`), and the
//! x86_64 machine ([`domain_xml`]: q35, SeaBIOS or OVMF, its disks, NICs,
//! the virtual-media CD-ROM drive, a blkdebug disk through QEMU's command
//! line). The Arm machine is [`super::arm_domain`]'s.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::vm::{Boot, Bus, Firmware, VmSpec, OVMF_CODE, OVMF_VARS};

pub(crate) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

pub(crate) fn path_attr(p: &Path) -> String {
    xml_escape(&p.display().to_string())
}

/// What sets one architecture's libvirt domain apart in its first lines.
pub(crate) struct DomainHead<'a> {
    /// libvirt's `arch` (`x86_64`, `aarch64`).
    pub arch: &'a str,
    /// libvirt's `machine` (`q35`, `virt`).
    pub machine: &'a str,
    /// UEFI: the firmware's code, its NVRAM template and the machine's
    /// own NVRAM file; `None` for the BIOS.
    pub uefi: Option<(&'a str, &'a str, &'a Path)>,
    /// The `<cpu>` element's inside.
    pub cpu: &'a str,
    /// The QEMU binary.
    pub emulator: &'a str,
}

/// The lines after `<domain …>` up to `<devices>` and the emulator: name,
/// memory, CPUs, firmware, features, CPU model, clock and what power-off,
/// reboot and crash do.
pub(crate) fn write_domain_head(x: &mut String, spec: &VmSpec, h: &DomainHead) {
    let _ = writeln!(x, "  <name>{}</name>", xml_escape(&spec.name));
    let _ = writeln!(x, "  <memory unit='MiB'>{}</memory>", spec.memory_mb);
    let _ = writeln!(x, "  <vcpu>{}</vcpu>", spec.cpus);
    let _ = writeln!(x, "  <os>");
    let _ = writeln!(
        x,
        "    <type arch='{}' machine='{}'>hvm</type>",
        h.arch, h.machine
    );
    if let Some((code, template, vars)) = h.uefi {
        let _ = writeln!(
            x,
            "    <loader readonly='yes' secure='no' type='pflash'>{code}</loader>"
        );
        let _ = writeln!(
            x,
            "    <nvram template='{template}'>{}</nvram>",
            path_attr(vars)
        );
    }
    let _ = writeln!(x, "  </os>");
    let _ = writeln!(x, "  <features><acpi/></features>");
    let _ = writeln!(
        x,
        "  <cpu mode='custom' match='exact' check='none'>{}</cpu>",
        h.cpu
    );
    let _ = writeln!(x, "  <clock offset='utc'/>");
    let _ = writeln!(
        x,
        "  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>"
    );
    let _ = writeln!(x, "  <devices>");
    let _ = writeln!(x, "    <emulator>{}</emulator>", h.emulator);
}

/// The `<interface>` of each of `spec`'s NICs, on its tap in `taps`: a
/// virtio NIC, the first one first in the boot order for `Boot::Network`.
pub(crate) fn write_interfaces(x: &mut String, spec: &VmSpec, taps: &[String]) {
    for (i, (nic, tap)) in spec.nics.iter().zip(taps).enumerate() {
        let boot = if i == 0 && matches!(spec.boot, Boot::Network) {
            "<boot order='1'/>"
        } else {
            ""
        };
        let _ = writeln!(
            x,
            "    <interface type='ethernet'><mac address='{}'/><target dev='{}' managed='no'/><model type='virtio'/>{boot}</interface>",
            xml_escape(&nic.mac),
            xml_escape(tap)
        );
    }
}

/// The libvirt domain XML for `spec` with its NICs on `taps`.
pub fn domain_xml(spec: &VmSpec, taps: &[String], console: &Path) -> Result<String> {
    anyhow::ensure!(
        !spec.ipmi,
        "{}: the IPMI simulator is not offered on a Redfish machine",
        spec.name
    );
    anyhow::ensure!(taps.len() == spec.nics.len(), "one tap per NIC");
    let mut x = String::new();
    // type='qemu': TCG, as this machine's KVM cannot boot a stock kernel.
    // A blkdebug disk is not something libvirt 9.0 can describe: it goes
    // to QEMU's command line (libvirt's `qemu:commandline` namespace).
    let _ = writeln!(
        x,
        "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"
    );
    let uefi = match &spec.firmware {
        Firmware::Uefi { vars } => Some((OVMF_CODE, OVMF_VARS, vars.as_path())),
        _ => None,
    };
    write_domain_head(
        &mut x,
        spec,
        &DomainHead {
            arch: "x86_64",
            machine: "q35",
            uefi,
            cpu: "<model fallback='forbid'>qemu64</model><feature policy='require' name='rdrand'/>",
            emulator: "/usr/bin/qemu-system-x86_64",
        },
    );
    let (mut vd, mut sd) = (0u8, 0u8);
    let mut scsi = false;
    let mut blkdebug = None;
    for (i, d) in spec.disks.iter().enumerate() {
        if !d.path.exists() {
            std::fs::File::create(&d.path)
                .and_then(|f| f.set_len(d.size))
                .with_context(|| format!("creating disk {}", d.path.display()))?;
        }
        let (dev, bus) = match d.bus {
            Bus::Virtio => {
                vd += 1;
                (format!("vd{}", (b'a' + vd - 1) as char), "virtio")
            }
            Bus::Sata | Bus::Scsi => {
                sd += 1;
                anyhow::ensure!(sd < 23, "too many sd disks");
                let bus = if d.bus == Bus::Sata { "sata" } else { "scsi" };
                scsi |= d.bus == Bus::Scsi;
                (format!("sd{}", (b'a' + sd - 1) as char), bus)
            }
            Bus::Nvme | Bus::Usb => bail!(
                "disk {}: the Redfish bed's domains have virtio, SATA and SCSI disks only",
                d.serial
            ),
        };
        let mut extra = String::new();
        if let Some(model) = &d.model {
            anyhow::ensure!(
                d.bus == Bus::Scsi,
                "disk {}: libvirt sets a model (product) on SCSI disks only",
                d.serial
            );
            let _ = write!(extra, "<product>{}</product>", xml_escape(model));
        }
        if i == 0 && matches!(spec.boot, Boot::Disk) {
            extra.push_str("<boot order='1'/>");
        }
        if i == 0 {
            if let Some(rules) = &spec.blkdebug {
                anyhow::ensure!(
                    d.bus == Bus::Virtio && extra.is_empty(),
                    "disk {}: a blkdebug disk is a plain virtio disk",
                    d.serial
                );
                blkdebug = Some(blkdebug_args(rules, &d.path, &d.serial));
                continue;
            }
        }
        let _ = writeln!(
            x,
            "    <disk type='file' device='disk'><driver name='qemu' type='raw' cache='unsafe'/><source file='{}'/><target dev='{dev}' bus='{bus}'/><serial>{}</serial>{extra}</disk>",
            path_attr(&d.path),
            xml_escape(&d.serial)
        );
    }
    // A LUN on several paths: the same file as several shareable SCSI
    // disks with one serial and WWN (libvirt gives QEMU share-rw=on).
    for d in &spec.multipath_disks {
        if !d.path.exists() {
            std::fs::File::create(&d.path)
                .and_then(|f| f.set_len(d.size))
                .with_context(|| format!("creating disk {}", d.path.display()))?;
        }
        let wwn = d.wwn.trim_start_matches("0x");
        anyhow::ensure!(
            wwn.len() == 16 && wwn.bytes().all(|b| b.is_ascii_hexdigit()),
            "multipath disk {}: libvirt takes a WWN of 16 hex digits, not {}",
            d.serial,
            d.wwn
        );
        for _ in 0..d.paths {
            sd += 1;
            anyhow::ensure!(sd < 23, "too many sd disks");
            scsi = true;
            let _ = writeln!(
                x,
                "    <disk type='file' device='disk'><driver name='qemu' type='raw' cache='none'/><source file='{}'/><target dev='sd{}' bus='scsi'/><shareable/><serial>{}</serial><wwn>{wwn}</wwn></disk>",
                path_attr(&d.path),
                (b'a' + sd - 1) as char,
                xml_escape(&d.serial)
            );
        }
    }
    if scsi {
        let _ = writeln!(x, "    <controller type='scsi' model='virtio-scsi'/>");
    }
    // The virtual media drive, empty (sushy-tools replaces it on insert and
    // removes it on eject).
    let _ = writeln!(
        x,
        "    <disk type='file' device='cdrom'><driver name='qemu' type='raw'/><target dev='sdx' bus='sata'/><readonly/></disk>"
    );
    write_interfaces(&mut x, spec, taps);
    match &spec.boot {
        Boot::Network | Boot::Disk => {}
        Boot::Direct { .. } => bail!(
            "{}: a direct kernel boot is not offered on a Redfish machine",
            spec.name
        ),
    }
    let _ = writeln!(
        x,
        "    <serial type='file'><source path='{}' append='on'/><target port='0'/></serial>",
        path_attr(console)
    );
    // A USB NIC needs a USB controller; libvirt 9.0 has no `<interface>`
    // for QEMU's usb-net, so the device goes to QEMU's command line.
    let mut args = blkdebug.unwrap_or_default();
    if let Some(mac) = &spec.usb_nic {
        let _ = writeln!(x, "    <controller type='usb' model='qemu-xhci'/>");
        args.extend(usb_nic_args(mac));
    } else {
        let _ = writeln!(x, "    <controller type='usb' model='none'/>");
    }
    let _ = writeln!(x, "    <memballoon model='none'/>");
    let _ = writeln!(x, "  </devices>");
    if !args.is_empty() {
        let _ = writeln!(x, "  <qemu:commandline>");
        for arg in args {
            let _ = writeln!(x, "    <qemu:arg value='{}'/>", xml_escape(&arg));
        }
        let _ = writeln!(x, "  </qemu:commandline>");
    }
    let _ = writeln!(x, "</domain>");
    Ok(x)
}

/// QEMU arguments for a USB network device with `mac` on the domain's xHCI
/// controller (libvirt names its bus `usb.0`), on a hub port of its own:
/// no traffic leaves it. In JSON, as libvirt gives its devices: QEMU 7.2
/// creates every `-device` in the older syntax before any in JSON, so an
/// older-syntax one would not find the controller's bus.
fn usb_nic_args(mac: &str) -> Vec<String> {
    let device = serde_json::json!({
        "driver": "usb-net", "netdev": "usbnic0", "mac": mac, "bus": "usb.0",
    });
    vec![
        "-netdev".into(),
        "hubport,id=usbnic0,hubid=9".into(),
        "-device".into(),
        device.to_string(),
    ]
}

/// QEMU arguments for a virtio disk on `image` behind QEMU's `blkdebug`
/// driver with the rule file `rules` (raw format over blkdebug over the
/// file, so the raw driver's `read_aio`/`write_aio` events fire the rules).
fn blkdebug_args(rules: &Path, image: &Path, serial: &str) -> Vec<String> {
    let node = serde_json::json!({
        "driver": "raw",
        "node-name": "faulty0",
        "cache": {"direct": false, "no-flush": true},
        "file": {
            "driver": "blkdebug",
            "config": rules.display().to_string(),
            "image": {"driver": "file", "filename": image.display().to_string()},
        },
    });
    vec![
        "-blockdev".into(),
        node.to_string(),
        "-device".into(),
        // An integrated device on the root bus, in a slot libvirt leaves
        // free (its root ports take slots 1 and up; QEMU sees these
        // arguments before libvirt's devices, so it must not pick a slot).
        format!("virtio-blk-pci,drive=faulty0,serial={serial},bus=pcie.0,addr=0x10"),
    ]
}
