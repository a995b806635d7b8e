//! Firmware for the ramdisk's drivers: the blobs each included module names
//! in its `.modinfo` (`firmware=` entries), copied from an unpacked tree of
//! Debian's firmware packages (`image-builder/fetch-firmware.sh`) into
//! `lib/firmware` as `NAME.xz`, which the kernel's loader decompresses. A name not found is
//! classified with the firmware index `fetch-firmware.sh` writes (which
//! Debian package provides which file, from DEP-11): missing upstream (no
//! Debian package has it; a driver whose device is absent never asks) or
//! not fetched (a package is missing from the fetch list: the build's
//! coverage check fails).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};

use crate::cpio::Entry;

/// The `firmware=` names in a module file (uncompressed `.ko`: the
/// `.modinfo` strings are NUL-separated `key=value` pairs).
pub fn names(module: &[u8]) -> BTreeSet<String> {
    module
        .split(|b| *b == 0)
        .filter_map(|s| s.strip_prefix(b"firmware="))
        .filter(|n| !n.is_empty() && n.iter().all(|b| b.is_ascii_graphic()))
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// Adds `lib/firmware/NAME` (and its parent directories) to the tree for
/// every wanted name found under `root/lib/firmware` (symbolic links
/// followed); returns the names not found and the bytes added.
pub fn add(
    t: &mut BTreeMap<String, Entry>,
    root: &Path,
    wanted: &BTreeSet<String>,
) -> Result<(Vec<String>, u64)> {
    let base = root.join("lib/firmware");
    let mut missing = Vec::new();
    let mut bytes = 0;
    t.insert("lib/firmware".into(), Entry::Dir { mode: 0o755 });
    for name in wanted {
        let src = base.join(name);
        let Ok(real) = std::fs::canonicalize(&src) else {
            missing.push(name.clone());
            continue;
        };
        if !real.starts_with(std::fs::canonicalize(&base)?) || !real.is_file() {
            missing.push(name.clone());
            continue;
        }
        let mut dir = String::from("lib/firmware");
        if let Some(parent) = Path::new(name).parent() {
            for c in parent.iter() {
                dir = format!("{dir}/{}", c.to_string_lossy());
                t.insert(dir.clone(), Entry::Dir { mode: 0o755 });
            }
        }
        let data = std::fs::read(&real).with_context(|| format!("reading {}", real.display()))?;
        bytes += data.len() as u64;
        // The kernel's loader tries NAME.xz when NAME is absent
        // (CONFIG_FW_LOADER_COMPRESS_XZ): stored compressed, the blobs
        // take a seventh of the RAM.
        t.insert(
            format!("lib/firmware/{name}.xz"),
            Entry::File {
                mode: 0o644,
                data: crate::cpio::xz(&data)?,
            },
        );
    }
    Ok((missing, bytes))
}

/// Which Debian package provides which firmware file.
#[derive(Debug, Default, Clone)]
pub struct Index(BTreeMap<String, String>);

impl Index {
    /// Parses `FILE PACKAGE` lines.
    pub fn parse(text: &str) -> Self {
        Self(
            text.lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    Some((w.next()?.to_string(), w.next()?.to_string()))
                })
                .collect(),
        )
    }

    /// Reads `root/firmware-index.txt`, if there.
    pub fn read(root: &Path) -> Option<Self> {
        std::fs::read_to_string(root.join("firmware-index.txt"))
            .ok()
            .map(|t| Self::parse(&t))
    }

    /// The package that provides `name`, if any does.
    pub fn package(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// Firmware named by the image's modules, and where each name stands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Coverage {
    /// Distinct names the modules give.
    pub named: usize,
    /// Names found and included.
    pub found: usize,
    /// Names no Debian package provides.
    pub missing_upstream: Vec<String>,
    /// Names a Debian package provides that was not fetched: `(name, package)`.
    pub not_fetched: Vec<(String, String)>,
    /// Names not found, with no index to tell why.
    pub unknown: Vec<String>,
    /// Bytes included.
    pub bytes: u64,
}

/// Classifies the names [`add`] did not find.
pub fn classify(named: usize, missing: Vec<String>, bytes: u64, index: Option<&Index>) -> Coverage {
    let mut c = Coverage {
        named,
        found: named - missing.len(),
        bytes,
        ..Coverage::default()
    };
    for m in missing {
        match index {
            None => c.unknown.push(m),
            Some(ix) => match ix.package(&m) {
                Some(p) => c.not_fetched.push((m, p.to_string())),
                None => c.missing_upstream.push(m),
            },
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_names_and_copies() {
        let ko = b"\x7fELF\0\0license=GPL\0firmware=tigon/tg3.bin\0firmware=rtl_nic/x.fw\0firmware=\0depends=\0";
        let n = names(ko);
        assert_eq!(
            n.iter().map(String::as_str).collect::<Vec<_>>(),
            ["rtl_nic/x.fw", "tigon/tg3.bin"]
        );
        let d = tempfile::tempdir().unwrap();
        let fw = d.path().join("lib/firmware/tigon");
        std::fs::create_dir_all(&fw).unwrap();
        std::fs::write(fw.join("tg3-real.bin"), b"blob").unwrap();
        std::os::unix::fs::symlink("tg3-real.bin", fw.join("tg3.bin")).unwrap();
        let mut t = BTreeMap::new();
        let (missing, bytes) = add(&mut t, d.path(), &n).unwrap();
        assert_eq!(missing, vec!["rtl_nic/x.fw".to_string()]);
        assert_eq!(bytes, 4);
        assert!(
            matches!(&t["lib/firmware/tigon/tg3.bin.xz"], Entry::File { data, .. } if data[..6] == *b"\xfd7zXZ\0")
        );
        assert!(matches!(&t["lib/firmware/tigon"], Entry::Dir { .. }));
    }

    #[test]
    fn missing_names_are_told_apart_by_the_index() {
        let ix =
            Index::parse("rtl_nic/x.fw firmware-realtek\ntigon/tg3.bin firmware-misc-nonfree\n");
        let c = classify(
            3,
            vec!["rtl_nic/x.fw".into(), "wd719x-risc.bin".into()],
            10,
            Some(&ix),
        );
        assert_eq!(c.found, 1);
        assert_eq!(c.missing_upstream, vec!["wd719x-risc.bin".to_string()]);
        assert_eq!(
            c.not_fetched,
            vec![("rtl_nic/x.fw".to_string(), "firmware-realtek".to_string())]
        );
        assert_eq!(classify(1, vec!["a".into()], 0, None).unknown, vec!["a"]);
    }
}
