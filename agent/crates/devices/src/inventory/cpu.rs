//! Processors: model, logical count, sockets, architecture, flags and
//! frequency, from `/proc/cpuinfo` and `/sys/devices/system/cpu` (what
//! `lscpu` reads, PROTOCOL.md §4.1).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{read_attr, under};

/// `inventory.cpu`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    /// Model name (`AMD EPYC`, `Intel(R) Xeon(R) Gold 6230`).
    pub model_name: Option<String>,
    /// Maximum (else current) frequency in MHz, as a string like `"3900.0000"`.
    pub frequency: Option<String>,
    /// Logical CPUs online.
    pub count: u32,
    /// `x86_64`, `aarch64`, ...
    pub architecture: String,
    /// Feature flags.
    pub flags: Vec<String>,
    /// Physical packages.
    pub socket_count: u32,
}

/// What `/proc/cpuinfo` says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuInfo {
    /// Number of `processor` blocks.
    pub processors: u32,
    /// `model name` (x86), or on Arm the core's name decoded from `CPU
    /// implementer` and `CPU part` as lscpu does (`cpu_arm`).
    pub model_name: Option<String>,
    /// `flags` (x86) or `Features` (Arm) of the first block.
    pub flags: Vec<String>,
    /// `cpu MHz` of the first block.
    pub mhz: Option<f64>,
    /// Distinct `physical id` values.
    pub physical_ids: BTreeSet<String>,
}

/// Parses `/proc/cpuinfo` text.
pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut first = true;
    let (mut arm_implementer, mut arm_part) = (None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            if line.trim().is_empty() && info.processors > 0 {
                first = false;
            }
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => info.processors += 1,
            "model name" if first && !value.is_empty() => info.model_name = Some(value.to_string()),
            "flags" | "Features" if first => {
                info.flags = value.split_whitespace().map(String::from).collect()
            }
            "cpu MHz" if first => info.mhz = value.parse().ok(),
            "physical id" => {
                info.physical_ids.insert(value.to_string());
            }
            "CPU implementer" if first => arm_implementer = Some(value.to_string()),
            "CPU part" if first => arm_part = Some(value.to_string()),
            _ => {}
        }
    }
    if info.model_name.is_none() {
        info.model_name =
            super::cpu_arm::model_name(arm_implementer.as_deref(), arm_part.as_deref());
    }
    info
}

/// Formats a frequency in MHz as lscpu does (four decimals).
pub fn format_mhz(mhz: f64) -> String {
    format!("{mhz:.4}")
}

/// Reads the CPU facts under `root`.
pub fn read(root: &Path) -> Result<Cpu> {
    let path = under(root, "/proc/cpuinfo");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let info = parse_cpuinfo(&text);
    let cpu_dir = under(root, "/sys/devices/system/cpu");

    // Sockets: distinct package ids in sysfs, else cpuinfo's physical ids.
    let mut packages = BTreeSet::new();
    let mut max_khz: Option<u64> = None;
    if let Ok(entries) = std::fs::read_dir(&cpu_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name
                .strip_prefix("cpu")
                .and_then(|n| n.parse::<u32>().ok())
                .is_none()
            {
                continue;
            }
            if let Some(p) = read_attr(&e.path().join("topology/physical_package_id")) {
                packages.insert(p);
            }
            if let Some(khz) = read_attr(&e.path().join("cpufreq/cpuinfo_max_freq"))
                .and_then(|v| v.parse::<u64>().ok())
            {
                max_khz = Some(max_khz.map_or(khz, |m| m.max(khz)));
            }
        }
    }
    let socket_count = if !packages.is_empty() {
        packages.len()
    } else {
        info.physical_ids.len().max(1)
    } as u32;
    let frequency = max_khz
        .map(|k| format_mhz(k as f64 / 1000.0))
        .or_else(|| info.mhz.map(format_mhz));
    Ok(Cpu {
        model_name: info.model_name,
        frequency,
        count: info.processors,
        architecture: architecture(root),
        flags: info.flags,
        socket_count,
    })
}

/// The machine architecture: `/proc/sys/kernel/arch` (Linux ≥ 5.x), else
/// the one this binary was built for when reading the live system.
fn architecture(root: &Path) -> String {
    read_attr(&under(root, "/proc/sys/kernel/arch")).unwrap_or_else(|| {
        if root == Path::new("/") {
            std::env::consts::ARCH.to_string()
        } else {
            "unknown".to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_cpuinfo() {
        let text =
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6230\n\
                    cpu MHz\t\t: 2100.000\nphysical id\t: 0\nflags\t\t: fpu vmx lm\n\n\
                    processor\t: 1\nmodel name\t: other\nphysical id\t: 1\nflags\t\t: fpu\n\n";
        let i = parse_cpuinfo(text);
        assert_eq!(i.processors, 2);
        assert_eq!(i.model_name.as_deref(), Some("Intel(R) Xeon(R) Gold 6230"));
        assert_eq!(i.flags, ["fpu", "vmx", "lm"]);
        assert_eq!(i.mhz, Some(2100.0));
        assert_eq!(i.physical_ids.len(), 2);
        assert_eq!(format_mhz(3900.0), "3900.0000");
    }

    #[test]
    fn arm_cpuinfo_without_model_name() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\n\
                    CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\nprocessor\t: 1\nFeatures\t: fp\n";
        let i = parse_cpuinfo(text);
        assert_eq!(i.processors, 2);
        assert_eq!(i.flags, ["fp", "asimd", "evtstrm"]);
        assert_eq!(i.model_name.as_deref(), Some("Neoverse-N1"));
    }

    /// QEMU's `virt` machine with `-cpu cortex-a57 -smp 2` under Debian's
    /// 6.1 arm64 kernel: no `model name`, no `cpu MHz`, no `physical id`.
    const VIRT_A57: &str = "processor\t: 0\nBogoMIPS\t: 125.00\n\
        Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\n\
        CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n\
        CPU part\t: 0xd07\nCPU revision\t: 0\n\n\
        processor\t: 1\nBogoMIPS\t: 125.00\n\
        Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\n\
        CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\n\
        CPU part\t: 0xd07\nCPU revision\t: 0\n\n";

    #[test]
    fn arm_machine_from_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("proc/sys/kernel")).unwrap();
        std::fs::write(root.join("proc/cpuinfo"), VIRT_A57).unwrap();
        std::fs::write(root.join("proc/sys/kernel/arch"), "aarch64\n").unwrap();
        for n in 0..2 {
            let topo = root.join(format!("sys/devices/system/cpu/cpu{n}/topology"));
            std::fs::create_dir_all(&topo).unwrap();
            std::fs::write(topo.join("physical_package_id"), "0\n").unwrap();
        }
        let cpu = read(root).unwrap();
        assert_eq!(cpu.architecture, "aarch64");
        assert_eq!(cpu.model_name.as_deref(), Some("Cortex-A57"));
        assert_eq!(cpu.count, 2);
        assert_eq!(cpu.socket_count, 1);
        assert_eq!(cpu.flags.len(), 9);
        assert_eq!(cpu.flags[..2], ["fp", "asimd"]);
        // No cpufreq in the guest and no `cpu MHz` on Arm: unknown, not 0.
        assert_eq!(cpu.frequency, None);

        // Without the arch sysctl a fixture's architecture is unknown, not
        // the one the agent was built for.
        std::fs::remove_file(root.join("proc/sys/kernel/arch")).unwrap();
        assert_eq!(read(root).unwrap().architecture, "unknown");
        assert!(read(&root.join("missing")).is_err());
    }
}
