//! What is on a disk, as libblkid sees it: partition table type and UUID,
//! or a filesystem directly on the disk (type, UUID, label). Read-only:
//! the device is opened for reading and probed with `do_safe_probe`.
//! Shown by `agent inventory --human` and `agent root-disk`; not part of
//! IPA's inventory document.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use blkid::prober::ProbeState;
use blkid::{PartitionsFlags, SuperblocksFlags};

/// Signatures found at the start of a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signatures {
    /// `gpt`, `dos`, ...
    pub pttype: Option<String>,
    /// Disk identifier of the table.
    pub ptuuid: Option<String>,
    /// Filesystem or other superblock type (`ext4`, `LVM2_member`, ...).
    pub fstype: Option<String>,
    /// Its UUID.
    pub uuid: Option<String>,
    /// Its label.
    pub label: Option<String>,
}

impl Signatures {
    /// One short line: `gpt 1b2c… ` / `ext4 "root" 3f1e…` / `empty`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.pttype {
            parts.push(format!(
                "{t} table {}",
                self.ptuuid.as_deref().unwrap_or("")
            ));
        }
        if let Some(t) = &self.fstype {
            let label = self
                .label
                .as_deref()
                .map(|l| format!(" {l:?}"))
                .unwrap_or_default();
            parts.push(format!("{t}{label} {}", self.uuid.as_deref().unwrap_or("")));
        }
        if parts.is_empty() {
            "no signature".into()
        } else {
            parts.join(", ").replace("  ", " ").trim().to_string()
        }
    }

    fn from_values(v: &HashMap<String, String>) -> Self {
        let get = |k: &str| v.get(k).filter(|s| !s.is_empty()).cloned();
        Self {
            pttype: get("PTTYPE"),
            ptuuid: get("PTUUID"),
            fstype: get("TYPE"),
            uuid: get("UUID"),
            label: get("LABEL"),
        }
    }
}

/// Probes `dev` read-only.
pub fn probe(dev: &Path) -> Result<Signatures> {
    let file = File::open(dev).with_context(|| format!("opening {} for reading", dev.display()))?;
    let pr = crate::disk::erase::prober(
        &file,
        SuperblocksFlags::TYPE | SuperblocksFlags::UUID | SuperblocksFlags::LABEL,
        PartitionsFlags::empty(),
    )?;
    match pr.do_safe_probe().context("probing with libblkid")? {
        ProbeState::Success => Ok(Signatures::from_values(&pr.get_values_map()?)),
        _ => Ok(Signatures::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cmd: &mut std::process::Command) {
        agent_base::tool::run(cmd).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn partition_tables_filesystems_and_empty_disks() {
        let dir = tempfile::tempdir().unwrap();
        let gpt = dir.path().join("gpt.img");
        std::fs::File::create(&gpt)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let mut sfdisk = std::process::Command::new("sfdisk");
        sfdisk
            .arg("--quiet")
            .arg(&gpt)
            .stdin(std::process::Stdio::piped());
        let mut child = sfdisk.spawn().expect("sfdisk (package fdisk)");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"label: gpt\nlabel-id: 0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0\n,,L\n")
            .unwrap();
        assert!(child.wait().unwrap().success());
        let s = probe(&gpt).unwrap();
        assert_eq!(s.pttype.as_deref(), Some("gpt"));
        assert_eq!(
            s.ptuuid.as_deref(),
            Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
        );
        assert_eq!(
            s.summary(),
            "gpt table 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
        );

        let fs = dir.path().join("fs.img");
        std::fs::File::create(&fs)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        run(std::process::Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-L",
                "rootfs",
                "-U",
                "6a1c2e3f-0000-4000-8000-00000000beef",
            ])
            .arg(&fs));
        let s = probe(&fs).unwrap();
        assert_eq!(s.fstype.as_deref(), Some("ext4"));
        assert_eq!(s.label.as_deref(), Some("rootfs"));
        assert_eq!(
            s.uuid.as_deref(),
            Some("6a1c2e3f-0000-4000-8000-00000000beef")
        );
        assert_eq!(s.pttype, None);

        let empty = dir.path().join("e.img");
        std::fs::File::create(&empty)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        assert_eq!(probe(&empty).unwrap(), Signatures::default());
        assert_eq!(Signatures::default().summary(), "no signature");
    }
}
