//! The ramdisk under the names Metal3 uses, next to `deploy.kernel` and
//! `deploy.initramfs`: `ironic-python-agent.kernel` and
//! `ironic-python-agent.initramfs` (what Metal3's Ironic serves and
//! `deploy_kernel`/`deploy_ramdisk` point at), and the archive Metal3's IPA
//! downloader fetches and unpacks: `ironic-python-agent.tar` and the same
//! gzipped as `ironic-python-agent.tar.gz` (the downloader strips `.tar.gz`
//! to find `ironic-python-agent.{kernel,initramfs}` inside). The aarch64
//! image uses the base name `ironic-python-agent_aarch64` for all four
//! (ironic-image serves `ironic-python-agent_<arch>.{kernel,initramfs}`
//! per architecture: `Arch::metal3_name`). Entries are
//! written with fixed times and owners, so equal inputs give equal bytes.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// The base name Metal3 expects for x86_64 (and as its default).
pub const NAME: &str = "ironic-python-agent";

/// Writes the Metal3 files named `name`.* into `out` from `kernel` and `initramfs`.
pub fn write(out: &Path, name: &str, kernel: &Path, initramfs: &Path) -> Result<()> {
    let files = [
        (format!("{name}.kernel"), kernel),
        (format!("{name}.initramfs"), initramfs),
    ];
    for (name, src) in &files {
        std::fs::copy(src, out.join(name))
            .with_context(|| format!("copying {} to {name}", src.display()))?;
    }
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    for (name, src) in &files {
        let bytes = std::fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        let mut h = tar::Header::new_ustar();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, name, &bytes[..])
            .with_context(|| format!("adding {name} to the archive"))?;
    }
    let archive = tar.into_inner().context("finishing the archive")?;
    let path = out.join(format!("{name}.tar"));
    std::fs::write(&path, &archive).with_context(|| format!("writing {}", path.display()))?;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    gz.write_all(&archive)?;
    let path = out.join(format!("{name}.tar.gz"));
    std::fs::write(&path, gz.finish()?).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnu_tar_unpacks_what_metal3_looks_for_and_bytes_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let (k, i) = (
            dir.path().join("deploy.kernel"),
            dir.path().join("deploy.initramfs"),
        );
        std::fs::write(&k, b"kernel bytes").unwrap();
        std::fs::write(&i, vec![7u8; 70_000]).unwrap();
        write(dir.path(), NAME, &k, &i).unwrap();
        let first = std::fs::read(dir.path().join("ironic-python-agent.tar.gz")).unwrap();
        for archive in ["ironic-python-agent.tar", "ironic-python-agent.tar.gz"] {
            let x = dir.path().join(format!("x-{archive}"));
            std::fs::create_dir(&x).unwrap();
            // As the downloader does: tar -xaf.
            let ok = std::process::Command::new("tar")
                .arg("-xaf")
                .arg(dir.path().join(archive))
                .arg("-C")
                .arg(&x)
                .status()
                .unwrap()
                .success();
            assert!(ok, "tar -xaf {archive}");
            assert_eq!(
                std::fs::read(x.join("ironic-python-agent.kernel")).unwrap(),
                b"kernel bytes"
            );
            assert_eq!(
                std::fs::read(x.join("ironic-python-agent.initramfs"))
                    .unwrap()
                    .len(),
                70_000
            );
        }
        assert_eq!(
            std::fs::read(dir.path().join("ironic-python-agent.kernel")).unwrap(),
            b"kernel bytes"
        );
        write(dir.path(), NAME, &k, &i).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("ironic-python-agent.tar.gz")).unwrap(),
            first,
            "same inputs, same bytes"
        );
        // Per architecture: the archive holds the files under its own name.
        let arm = "ironic-python-agent_aarch64";
        write(dir.path(), arm, &k, &i).unwrap();
        let x = dir.path().join("x-arm");
        std::fs::create_dir(&x).unwrap();
        let ok = std::process::Command::new("tar")
            .arg("-xaf")
            .arg(dir.path().join(format!("{arm}.tar.gz")))
            .arg("-C")
            .arg(&x)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        assert_eq!(
            std::fs::read(x.join(format!("{arm}.kernel"))).unwrap(),
            b"kernel bytes"
        );
        assert!(x.join(format!("{arm}.initramfs")).exists());
    }
}
