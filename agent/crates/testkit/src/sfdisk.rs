//! Disk images made by `sfdisk` on sparse files, and tables read back by
//! `sfdisk --json` (which checks both GPT copies and their CRCs).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes the partition table `script` (sfdisk's input) to `path`.
pub fn sfdisk(path: &Path, script: &str) {
    use std::io::Write;
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("sfdisk (util-linux) is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "sfdisk {script:?}");
}

/// A sparse `disk.img` of `mib` MiB in `dir` with the table `script`.
pub fn sparse_disk(dir: &Path, mib: u64, script: &str) -> PathBuf {
    let path = dir.join("disk.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(mib << 20).unwrap();
    sfdisk(&path, script);
    path
}

/// `sfdisk --json` of `path`, which must succeed without a word on stderr.
pub fn sfdisk_json(path: &Path) -> serde_json::Value {
    let out = Command::new("sfdisk")
        .arg("--json")
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "sfdisk --json: {stderr}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
