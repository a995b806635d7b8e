//! Ignition injection on a loop device holding a CoreOS-like disk (GPT with
//! an ext4 filesystem labelled `boot`): the config drive's user data (an
//! Ignition config) ends up as `ignition/config.ign` in that filesystem,
//! with the first-boot stamp; a cloud-init user data is left alone.

use std::process::Command;

use agent_contents::ignition::mount::Mounted;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;

const MIB: u64 = 1 << 20;

fn sfdisk(dev: &std::path::Path, script: &str) {
    use std::io::Write;
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(dev)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
}

fn config_iso(dir: &std::path::Path, user_data: &str) -> Vec<u8> {
    let tree = dir.join("cd/openstack/latest");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("meta_data.json"), "{}").unwrap();
    std::fs::write(tree.join("user_data"), user_data).unwrap();
    let iso = dir.join("cd.iso");
    run(Command::new("genisoimage")
        .args(["-quiet", "-J", "-r", "-V", "config-2", "-o"])
        .arg(&iso)
        .arg(dir.join("cd")))
    .unwrap();
    std::fs::read(iso).unwrap()
}

#[test]
fn ignition_from_the_config_drive_lands_in_the_boot_filesystem() {
    hardware_tests::require_root("the Ignition injection test");
    let dir = tempfile::tempdir().unwrap();
    let disk = LoopDevice::new(160 * MIB).unwrap();
    sfdisk(
        &disk.path,
        "label: gpt\nsize=32MiB, name=boot\nsize=32MiB, name=root\n",
    );
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "boot", "-E", "offset=1048576"])
        .arg(&disk.path)
        .arg("32M"))
    .unwrap();
    let boot = agent_contents::ignition::boot_partition(&disk.path)
        .unwrap()
        .unwrap();
    assert_eq!((boot.number, boot.start), (1, MIB));

    // Cloud-init user data: nothing is injected.
    let cd = config_iso(dir.path(), "#cloud-config\n");
    agent_contents::configdrive::write(&disk.path, &cd).unwrap();
    assert!(!agent_contents::ignition::from_config_drive(&disk.path, &cd).unwrap());

    let ign = r#"{"ignition": {"version": "3.4.0"}, "passwd": {"users": [{"name": "core"}]}}"#;
    let dir2 = tempfile::tempdir().unwrap();
    let cd = config_iso(dir2.path(), ign);
    let placed = agent_contents::configdrive::write(&disk.path, &cd).unwrap();
    assert!(placed.reused);
    assert!(agent_contents::ignition::from_config_drive(&disk.path, &cd).unwrap());

    let m = Mounted::new(&disk.path, boot.start, boot.len, "ext4", true).unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path().join("ignition/config.ign")).unwrap(),
        ign
    );
    assert!(m.path().join("ignition.firstboot").exists());
    m.unmount().unwrap();
    // The loop device mount(8) stacked on the disk is gone: the disk can be
    // opened exclusively again at once (the next write needs that).
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_excl())
        .open(&disk.path)
        .expect("the disk is free again after the unmount");
}

fn libc_o_excl() -> i32 {
    nix::fcntl::OFlag::O_EXCL.bits()
}
