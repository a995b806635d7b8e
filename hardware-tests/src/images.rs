//! Small disk images made with sfdisk for the host-mode deploy tests, and
//! their sha256 as Ironic's `image_os_hash_value`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

/// A sparse file of `size` bytes at `path` partitioned by `script` (an
/// sfdisk script, e.g. `label: gpt\nname=root\n`).
pub fn sfdisk_image(path: &Path, size: u64, script: &str) -> Result<()> {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .with_context(|| format!("creating {}", path.display()))?;
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("sfdisk (package fdisk)")?;
    child
        .stdin
        .take()
        .context("sfdisk's stdin")?
        .write_all(script.as_bytes())?;
    ensure!(
        child.wait()?.success(),
        "sfdisk failed on {}",
        path.display()
    );
    Ok(())
}

/// The sha256 of `data` in lower-case hex.
pub fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
