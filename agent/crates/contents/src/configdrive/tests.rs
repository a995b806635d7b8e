//! Placement on sparse files: a real ISO9660 config drive (made by
//! `genisoimage`, as Ironic makes it) must be readable by libblkid with the
//! label `config-2` afterwards.

use super::*;
use agent_testkit::sparse_disk;
use std::path::PathBuf;

/// A config-2 ISO as Ironic renders it (`genisoimage -V config-2 -J -r`).
pub(crate) fn config_iso(dir: &Path) -> Vec<u8> {
    let tree = dir.join("cd");
    std::fs::create_dir_all(tree.join("openstack/latest")).unwrap();
    std::fs::write(
        tree.join("openstack/latest/meta_data.json"),
        r#"{"uuid": "test"}"#,
    )
    .unwrap();
    let iso = dir.join("cd.iso");
    let st = std::process::Command::new("genisoimage")
        .args(["-quiet", "-o"])
        .arg(&iso)
        .args([
            "-ldots",
            "-allow-lowercase",
            "-allow-multidot",
            "-l",
            "-publisher",
            "test",
        ])
        .args(["-J", "-r", "-V", "config-2"])
        .arg(&tree)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("genisoimage is installed");
    assert!(st.success());
    std::fs::read(iso).unwrap()
}

fn label_of(path: &PathBuf, p: &Part) -> Option<String> {
    probe_label(&File::open(path).unwrap(), p.start, p.len)
}

#[test]
fn new_gpt_partition_holds_a_readable_config_2_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let iso = config_iso(dir.path());
    let disk = sparse_disk(dir.path(), 200, "label: gpt\nsize=50MiB, name=root\n");
    assert_eq!(check_partitioned(&disk).unwrap(), 1);
    let placed = write(&disk, &iso).unwrap();
    assert!(!placed.reused);
    assert_eq!(placed.part.number, 2);
    assert_eq!(placed.label.as_deref(), Some("config-2"));
    assert_eq!(label_of(&disk, &placed.part).as_deref(), Some("config-2"));
    // A second deploy's config drive reuses the partition.
    let again = write(&disk, &iso).unwrap();
    assert!(again.reused);
    assert_eq!(again.part, placed.part);
}

#[test]
fn mbr_image_with_a_config_2_filesystem_is_reused_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let iso = config_iso(dir.path());
    let disk = sparse_disk(dir.path(), 64, "label: dos\nsize=16MiB\nsize=8MiB\n");
    let t = table::read(&File::open(&disk).unwrap(), 512)
        .unwrap()
        .unwrap();
    let second = t.parts[1].clone();
    let mut f = OpenOptions::new().write(true).open(&disk).unwrap();
    Disk::write_at(&mut f, &iso, second.start).unwrap();
    let placed = write(&disk, &iso).unwrap();
    assert!(placed.reused);
    assert_eq!(placed.part, second);
}

#[test]
fn failures_name_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let iso = config_iso(dir.path());
    let small = sparse_disk(dir.path(), 64, "label: dos\nsize=4MiB\n");
    let e = write(&small, &iso).unwrap_err().to_string();
    assert!(
        e.contains("too small") || e.contains("no free space"),
        "{e}"
    );

    let blank = dir.path().join("blank.img");
    File::create(&blank).unwrap().set_len(8 << 20).unwrap();
    let e = check_partitioned(&blank).unwrap_err().to_string();
    assert!(e.contains("no partition found"), "{e}");
    let e = write(&blank, &iso).unwrap_err().to_string();
    assert!(e.contains("no partition table"), "{e}");
}
