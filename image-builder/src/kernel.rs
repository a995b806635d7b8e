//! The kernel side of the image: find the kernel and its modules directory
//! in an unpacked kernel package, pick the module closure of the wanted
//! drivers from `modules.dep`, and write trimmed index files that name only
//! what the image holds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Drivers a server or VM needs to reach its disks and the network, and the
/// filesystems the agent reads (config drives, ISO images, EFI partitions).
pub const WANTED: &[&str] = &[
    // virtual machines
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "virtio_net",
    "virtio_rng",
    // storage
    "nvme",
    "ahci",
    "ata_piix",
    "sd_mod",
    "sr_mod",
    "megaraid_sas",
    "mpt3sas",
    "hpsa",
    "smartpqi",
    "usb_storage",
    "uas",
    "xhci_pci",
    "ehci_pci",
    "uhci_hcd",
    // NICs
    "e1000",
    "e1000e",
    "igb",
    "igc",
    "ixgbe",
    "i40e",
    "ice",
    "bnxt_en",
    "bnx2x",
    "qede",
    "tg3",
    "mlx5_core",
    "r8169",
    "vmxnet3",
    // filesystems and what they request at mount time (no modprobe here)
    "vfat",
    "ext4",
    "xfs",
    "isofs",
    "nls_cp437",
    "nls_iso8859_1",
    "nls_utf8",
    // Debian's FAT default iocharset is "ascii"
    "nls_ascii",
    "efivarfs",
    "crc32c_generic",
    "8021q",
    // software RAID (the agent drives md itself; raid456 has raid5 and raid6)
    "md_mod",
    "raid0",
    "raid1",
    "raid10",
    "raid456",
    // bonds from network_data.json (loaded by init only when one is planned)
    "bonding",
    // IPMI: the BMC's LAN settings for the inventory (ipmi_si binds by
    // ACPI IPI0001 / SMBIOS type 38 modalias; ipmi_devintf gives /dev/ipmi0)
    "ipmi_msghandler",
    "ipmi_si",
    "ipmi_devintf",
];

/// Modules loaded at boot whatever devices exist (no modalias asks for them).
pub const ALWAYS: &[&str] = &[
    "crc32c_generic",
    "ext4",
    "xfs",
    "vfat",
    "isofs",
    "nls_cp437",
    "nls_iso8859_1",
    "nls_utf8",
    "nls_ascii",
    "efivarfs",
    "8021q",
    "md_mod",
    "raid0",
    "raid1",
    "raid10",
    "raid456",
    // no modalias: the character device for whichever IPMI driver binds
    "ipmi_devintf",
];

/// A kernel in an unpacked package tree (`boot/vmlinuz-V`, `lib/modules/V`).
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The bootable image.
    pub image: PathBuf,
    /// `lib/modules/<version>`.
    pub modules: PathBuf,
    /// The version string (`uname -r`).
    pub version: String,
}

impl Kernel {
    /// Finds the single kernel under `root`.
    pub fn find(root: &Path) -> Result<Self> {
        let mods = root.join("lib/modules");
        let mut versions: Vec<String> = std::fs::read_dir(&mods)
            .with_context(|| format!("reading {}", mods.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        versions.sort();
        let Some(version) = versions.pop() else {
            bail!("no kernel modules under {}", mods.display());
        };
        let image = root.join(format!("boot/vmlinuz-{version}"));
        if !image.exists() {
            bail!("{} missing", image.display());
        }
        let modules = mods.join(&version);
        if !modules.join("modules.dep").exists() {
            bail!("{}/modules.dep missing: run depmod -b", modules.display());
        }
        Ok(Self {
            image,
            modules,
            version,
        })
    }
}

fn normalise(n: &str) -> String {
    n.replace('-', "_")
}

fn name_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    normalise(file.split(".ko").next().unwrap_or(file))
}

/// The module files (relative paths) of `wanted` and all their
/// dependencies, from `modules.dep` text. Unknown names are returned apart
/// (built in, or not in this kernel).
pub fn closure(dep: &str, wanted: &[&str]) -> (BTreeSet<String>, Vec<String>) {
    let mut files = BTreeSet::new();
    let mut missing = Vec::new();
    for w in wanted {
        let w = normalise(w);
        match dep
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(p, _)| name_of(p) == w)
        {
            Some((p, deps)) => {
                files.insert(p.to_string());
                files.extend(deps.split_whitespace().map(String::from));
            }
            None => missing.push(w),
        }
    }
    (files, missing)
}

/// `modules.dep` / `modules.alias` reduced to the lines about `files`.
pub fn trim_index(dep: &str, alias: &str, files: &BTreeSet<String>) -> (String, String) {
    let names: BTreeSet<String> = files.iter().map(|f| name_of(f)).collect();
    let dep_out: String = dep
        .lines()
        .filter(|l| l.split_once(':').is_some_and(|(p, _)| files.contains(p)))
        .map(|l| format!("{l}\n"))
        .collect();
    let alias_out: String = alias
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|m| names.contains(&normalise(m)))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    (dep_out, alias_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/sound/snd.ko:
";

    #[test]
    fn preloaded_modules_are_shipped_and_ipmi_is_there() {
        for m in ALWAYS {
            assert!(WANTED.contains(m), "{m} is preloaded but not shipped");
        }
        // The BMC addresses in the inventory need the IPMI driver stack.
        for m in ["ipmi_msghandler", "ipmi_si", "ipmi_devintf"] {
            assert!(WANTED.contains(&m), "{m}");
        }
        assert!(ALWAYS.contains(&"ipmi_devintf"));
    }

    #[test]
    fn closure_takes_dependencies() {
        let (files, missing) = closure(DEP, &["nvme", "virtio_net", "virtio"]);
        assert_eq!(
            files.into_iter().collect::<Vec<_>>(),
            vec![
                "kernel/drivers/net/net_failover.ko",
                "kernel/drivers/net/virtio_net.ko",
                "kernel/drivers/nvme/host/nvme-core.ko",
                "kernel/drivers/nvme/host/nvme.ko",
                "kernel/net/core/failover.ko",
            ]
        );
        assert_eq!(missing, vec!["virtio"]);
    }

    #[test]
    fn index_keeps_only_included_modules() {
        let (files, _) = closure(DEP, &["nvme"]);
        let alias = "alias pci:v*d*sv*sd*bc01sc08i02* nvme\nalias char-major-116 snd\n";
        let (dep, alias) = trim_index(DEP, alias, &files);
        assert_eq!(dep.lines().count(), 2);
        assert_eq!(alias, "alias pci:v*d*sv*sd*bc01sc08i02* nvme\n");
    }
}
