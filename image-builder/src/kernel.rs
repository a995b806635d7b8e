//! The kernel side of the image: find the kernel and its modules directory
//! in an unpacked kernel package, pick the modules of a driver profile
//! (every module of the driver classes in [`CLASSES`], or the small VM list
//! [`WANTED`]) and their closure from `modules.dep`, count the coverage per
//! class, and write trimmed index files that name only what the image holds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A class of drivers, as the kernel's source tree groups them.
#[derive(Debug, Clone, Copy)]
pub struct Class {
    /// Short name used in the coverage report.
    pub name: &'static str,
    /// Module paths relative to the modules directory: a prefix ending in
    /// `/` takes every module below it, anything else names one module file
    /// without its `.ko…` suffix.
    pub paths: &'static [&'static str],
}

/// The driver classes a server may need to reach its disks and network,
/// and the filesystems the agent mounts or makes (ext2/3/4, xfs, btrfs,
/// vfat, ISO 9660 config drives and virtual media, efivarfs, and the
/// codepages FAT asks for). The full profile ships every module of these.
pub const CLASSES: &[Class] = &[
    Class {
        name: "ethernet",
        paths: &["kernel/drivers/net/ethernet/"],
    },
    Class {
        name: "bonding-team",
        paths: &["kernel/drivers/net/bonding/", "kernel/drivers/net/team/"],
    },
    Class {
        name: "vlan",
        paths: &["kernel/net/8021q/"],
    },
    Class {
        name: "nvme",
        paths: &["kernel/drivers/nvme/host/", "kernel/drivers/nvme/common/"],
    },
    Class {
        name: "ata-ahci",
        paths: &["kernel/drivers/ata/"],
    },
    Class {
        name: "scsi-raid",
        paths: &["kernel/drivers/scsi/", "kernel/drivers/message/"],
    },
    Class {
        name: "md-dm",
        paths: &["kernel/drivers/md/"],
    },
    Class {
        name: "virtio",
        paths: &[
            "kernel/drivers/virtio/",
            "kernel/drivers/net/virtio_net",
            "kernel/drivers/block/virtio_blk",
            "kernel/drivers/char/hw_random/virtio-rng",
            "kernel/drivers/char/virtio_console",
        ],
    },
    Class {
        name: "usb-storage",
        paths: &["kernel/drivers/usb/storage/", "kernel/drivers/usb/host/"],
    },
    Class {
        name: "usb-nic",
        paths: &["kernel/drivers/net/usb/"],
    },
    Class {
        name: "filesystems",
        paths: &[
            "kernel/fs/ext4/",
            "kernel/fs/xfs/",
            "kernel/fs/btrfs/",
            "kernel/fs/fat/",
            "kernel/fs/isofs/",
            "kernel/fs/efivarfs/",
            "kernel/fs/nls/",
        ],
    },
];

/// Which drivers an image carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// Every module of [`CLASSES`] plus [`WANTED`]: for real servers.
    #[default]
    Full,
    /// Only [`WANTED`]: virtual machines and small test images.
    Vm,
}

impl std::str::FromStr for Profile {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" => Ok(Self::Full),
            "vm" => Ok(Self::Vm),
            _ => bail!("unknown driver profile {s:?}: full or vm"),
        }
    }
}

impl Class {
    /// Whether the `modules.dep` path `file` belongs to this class.
    pub fn holds(&self, file: &str) -> bool {
        self.paths.iter().any(|p| {
            if p.ends_with('/') {
                file.starts_with(p)
            } else {
                file.strip_prefix(p)
                    .is_some_and(|rest| rest.starts_with(".ko"))
            }
        })
    }

    /// The module files of this class in `modules.dep` text.
    pub fn members(&self, dep: &str) -> BTreeSet<String> {
        dep.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(p, _)| p)
            .filter(|p| self.holds(p))
            .map(String::from)
            .collect()
    }
}

/// Modules of one class: how many the kernel has, how many the image holds,
/// and which it lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassCoverage {
    /// The class's name.
    pub name: &'static str,
    /// Modules the kernel has in the class.
    pub kernel: usize,
    /// Of those, modules in the image.
    pub included: usize,
    /// Module names the image lacks.
    pub absent: Vec<String>,
}

/// Per-class coverage of `files` (what the image holds) against `dep`.
pub fn coverage(dep: &str, files: &BTreeSet<String>) -> Vec<ClassCoverage> {
    CLASSES
        .iter()
        .map(|c| {
            let all = c.members(dep);
            let absent: Vec<String> = all
                .iter()
                .filter(|f| !files.contains(*f))
                .map(|f| name_of(f))
                .collect();
            ClassCoverage {
                name: c.name,
                kernel: all.len(),
                included: all.len() - absent.len(),
                absent,
            }
        })
        .collect()
}

/// The module names a profile asks for (before dependencies).
pub fn wanted(dep: &str, profile: Profile) -> Vec<String> {
    let mut out: Vec<String> = WANTED.iter().map(|w| normalise(w)).collect();
    if profile == Profile::Full {
        for c in CLASSES {
            out.extend(c.members(dep).iter().map(|f| name_of(f)));
        }
    }
    out.sort();
    out.dedup();
    out
}

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
    // multipath devices over a SAN LUN's paths (the agent assembles them;
    // there is no modprobe for the kernel to load the path selector itself)
    "dm_mod",
    "dm_multipath",
    "dm_round_robin",
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
    "dm_mod",
    "dm_multipath",
    "dm_round_robin",
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
pub fn closure<S: AsRef<str>>(dep: &str, wanted: &[S]) -> (BTreeSet<String>, Vec<String>) {
    let by_name: std::collections::HashMap<String, (&str, &str)> = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(p, deps)| (name_of(p), (p, deps)))
        .collect();
    let mut files = BTreeSet::new();
    let mut missing = Vec::new();
    for w in wanted {
        let w = normalise(w.as_ref());
        match by_name.get(&w) {
            Some((p, deps)) => {
                files.insert(p.to_string());
                files.extend(deps.split_whitespace().map(String::from));
            }
            None => missing.push(w),
        }
    }
    (files, missing)
}

/// `modules.dep` text with every module path given the `.xz` suffix the
/// image stores them under.
pub fn xz_paths(dep: &str) -> String {
    dep.lines()
        .map(|l| {
            let words: Vec<String> = l
                .split_whitespace()
                .map(|w| match w.strip_suffix(':') {
                    Some(p) => format!("{p}.xz:"),
                    None => format!("{w}.xz"),
                })
                .collect();
            format!("{}\n", words.join(" "))
        })
        .collect()
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
    fn classes_take_whole_directories_and_named_files() {
        let dep = "\
kernel/drivers/net/ethernet/intel/igb/igb.ko: kernel/drivers/dca/dca.ko
kernel/drivers/dca/dca.ko:
kernel/drivers/net/virtio_net.ko: kernel/net/core/failover.ko
kernel/drivers/net/virtio_netx.ko:
kernel/net/core/failover.ko:
kernel/drivers/message/fusion/mptsas.ko:
kernel/sound/snd.ko:
";
        let virtio = CLASSES.iter().find(|c| c.name == "virtio").unwrap();
        assert!(virtio.holds("kernel/drivers/net/virtio_net.ko"));
        assert!(!virtio.holds("kernel/drivers/net/virtio_netx.ko"));
        let w = wanted(dep, Profile::Full);
        assert!(w.contains(&"igb".to_string()) && w.contains(&"mptsas".to_string()));
        assert!(!w.contains(&"snd".to_string()));
        let (files, _) = closure(dep, &w);
        assert!(files.contains("kernel/drivers/dca/dca.ko"), "dependency");
        let cov = coverage(dep, &files);
        let eth = cov.iter().find(|c| c.name == "ethernet").unwrap();
        assert_eq!((eth.kernel, eth.included), (1, 1));
        // The VM profile leaves the fusion driver out, and says so.
        let (vm, _) = closure(dep, &wanted(dep, Profile::Vm));
        let scsi = coverage(dep, &vm)
            .into_iter()
            .find(|c| c.name == "scsi-raid")
            .unwrap();
        assert_eq!((scsi.kernel, scsi.included), (1, 0));
        assert_eq!(scsi.absent, vec!["mptsas"]);
    }

    #[test]
    fn compressed_paths_in_the_index() {
        assert_eq!(
            xz_paths("kernel/a/nvme.ko: kernel/a/nvme-core.ko\nkernel/a/nvme-core.ko:\n"),
            "kernel/a/nvme.ko.xz: kernel/a/nvme-core.ko.xz\nkernel/a/nvme-core.ko.xz:\n"
        );
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
