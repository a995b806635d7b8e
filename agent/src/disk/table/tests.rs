//! Tables made by `sfdisk` on sparse files; the results are read back by
//! `sfdisk --json`, which checks both GPT copies and their CRCs.

use super::*;
use std::path::Path;
use std::process::Command;

pub(crate) fn sfdisk(path: &Path, script: &str) {
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

pub(crate) fn sparse_disk(dir: &Path, mib: u64, script: &str) -> std::path::PathBuf {
    let path = dir.join("disk.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(mib << 20).unwrap();
    sfdisk(&path, script);
    path
}

fn sfdisk_json(path: &Path) -> serde_json::Value {
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

#[test]
fn gpt_gets_a_config_2_partition_in_the_last_64_mib_with_valid_crcs() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 256, "label: gpt\nsize=100MiB, name=root\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    assert_eq!((t.kind, t.parts.len()), (Kind::Gpt, 1));
    assert_eq!(t.parts[0].name, "root");
    let p = add_config_partition(&mut f, &t, 256 << 20).unwrap();
    assert_eq!(p.number, 2);
    assert_eq!(
        p.start,
        191 << 20,
        "aligned start, 64 MiB minus the backup GPT"
    );
    let again = read(&f, 512).unwrap().unwrap();
    assert_eq!(again.parts[1], p);
    let j = sfdisk_json(&path);
    let parts = j["partitiontable"]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[1]["name"], "config-2");
    assert_eq!(parts[1]["start"], p.start / 512);
}

#[test]
fn mbr_gets_a_primary_partition_and_a_full_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 128, "label: dos\nsize=32MiB, type=83\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    assert_eq!(t.kind, Kind::Mbr);
    let p = add_config_partition(&mut f, &t, 128 << 20).unwrap();
    assert_eq!((p.number, p.start, p.len), (2, 64 << 20, 64 << 20));
    let j = sfdisk_json(&path);
    assert_eq!(j["partitiontable"]["partitions"][1]["type"], "c");

    let full = "label: dos\nsize=8MiB\nsize=8MiB\nsize=8MiB\nsize=8MiB\n";
    let path = sparse_disk(dir.path(), 128, full);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    let e = add_config_partition(&mut f, &t, 128 << 20).unwrap_err();
    assert!(e.contains("4 primary partitions"), "{e}");
}

#[test]
fn a_disk_filled_by_the_image_is_refused_with_the_blocking_partition() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse_disk(dir.path(), 128, "label: gpt\nname=root\n");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let t = read(&f, 512).unwrap().unwrap();
    let e = add_config_partition(&mut f, &t, 128 << 20).unwrap_err();
    assert!(
        e.contains("no free space") && e.contains("partition 1"),
        "{e}"
    );
}

#[test]
fn no_table_and_damaged_gpt_are_told_apart() {
    let mut blank = vec![0u8; 1 << 20];
    assert!(read(&blank, 512).unwrap().is_none());
    blank[512..520].copy_from_slice(b"EFI PART");
    put_u32(&mut blank, 512 + 12, 92);
    assert!(read(&blank, 512).unwrap_err().contains("damaged"));
}
