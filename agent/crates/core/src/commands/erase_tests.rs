//! Tests of `erase.rs`.

//! Which disks the node leaves to erase, and the express step on a
//! regular file standing in for a disk.

use std::fs::File;
use std::sync::atomic::Ordering;

use super::*;
use agent_base::config::Config;

fn policy(allowed: &[PathBuf]) -> WritePolicy {
    WritePolicy::from_config(&Config {
        allowed_devices: allowed.to_vec(),
        ..Config::default()
    })
}

#[tokio::test]
async fn express_erase_wipes_metadata_of_non_nvme_disks() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    agent_testkit::write_demo_image(&img).unwrap();
    let state = Arc::new(AgentState::new(
        Config {
            allowed_devices: vec![img.clone()],
            ..Config::default()
        },
        None,
    ));
    let call = StepCall::with_node(serde_json::json!({}));
    erase_devices_express_step(state, call).await.unwrap();
    let left = agent_devices::disk::erase::probe_signatures(&File::open(&img).unwrap()).unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// The skip list of the node `doc`.
fn skip(doc: Value) -> SkipList {
    StepCall::with_node(doc).skip_list().unwrap()
}

#[test]
fn skip_block_devices_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let p = policy(&[a.clone(), b.clone()]);
    let node = skip(
        serde_json::json!({"properties": {"skip_block_devices": [{"name": a.display().to_string()}]}}),
    );
    assert_eq!(disks(&p, &node).unwrap(), [b]);
}

#[test]
fn skip_block_devices_are_hints() {
    let dir = tempfile::tempdir().unwrap();
    let (small, big) = (dir.path().join("small"), dir.path().join("big"));
    std::fs::File::create(&small)
        .unwrap()
        .set_len(5 << 30)
        .unwrap();
    std::fs::File::create(&big)
        .unwrap()
        .set_len(6 << 30)
        .unwrap();
    let p = policy(&[small.clone(), big.clone()]);
    let node = skip(serde_json::json!({"properties": {"skip_block_devices": [{"size": 5}]}}));
    assert_eq!(disks(&p, &node).unwrap(), std::slice::from_ref(&big));
    let node = skip(serde_json::json!({"properties": {"skip_block_devices": [{"size": "> 5"}]}}));
    assert_eq!(disks(&p, &node).unwrap(), [small]);
    // A protection that cannot be read stops the step.
    let call = StepCall::with_node(
        serde_json::json!({"properties": {"skip_block_devices": [{"size": "five"}]}}),
    );
    let e = skip_list(&call).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BlockDeviceErase);
    assert!(e.details.contains("skip_block_devices[0]"), "{}", e.details);
}

#[test]
fn a_reboot_or_wiped_token_aborts_a_running_erase() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    std::fs::write(&d, vec![0x5a; 1 << 20]).unwrap();
    let state = AgentState::new(Config::default(), None);
    let flag = state.abort_flag();
    state.reset_as_after_reboot();
    assert!(flag.load(Ordering::Relaxed));
    assert!(
        !state.abort_flag().load(Ordering::Relaxed),
        "the next operation starts clean"
    );
    let e = fullerase::erase_disks(
        std::slice::from_ref(&d),
        &policy(std::slice::from_ref(&d)),
        &Knobs::default(),
        &flag,
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("aborted"), "{e:#}");
}

#[tokio::test]
async fn the_metadata_wipe_leaves_skip_block_devices_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (keep, wipe) = (dir.path().join("keep.img"), dir.path().join("wipe.img"));
    agent_testkit::write_demo_image(&keep).unwrap();
    agent_testkit::write_demo_image(&wipe).unwrap();
    let state = Arc::new(AgentState::new(
        Config {
            allowed_devices: vec![keep.clone(), wipe.clone()],
            ..Config::default()
        },
        None,
    ));
    let call = StepCall::with_node(
        serde_json::json!({"properties": {"skip_block_devices": [{"name": keep.display().to_string()}]}}),
    );
    erase_devices_metadata_step(state, call).await.unwrap();
    let sigs = |p: &PathBuf| {
        agent_devices::disk::erase::probe_signatures(&File::open(p).unwrap()).unwrap()
    };
    assert!(sigs(&wipe).is_empty(), "{:?}", sigs(&wipe));
    assert!(!sigs(&keep).is_empty(), "the skipped disk was wiped");
}

#[tokio::test]
async fn a_vmfs_disk_stops_the_metadata_wipe_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.img");
    agent_testkit::write_demo_image(&plain).unwrap();
    let vmfs = agent_testkit::sparse_disk(
        dir.path(),
        32,
        "label: gpt\ntype=AA31E02A-400F-11DB-9590-000C2911D1B8\n",
    );
    let before = (
        std::fs::read(&plain).unwrap(),
        std::fs::read(&vmfs).unwrap(),
    );
    let config = |guard: bool| Config {
        allowed_devices: vec![plain.clone(), vmfs.clone()],
        guard_special_filesystems: guard,
        ..Config::default()
    };
    let call = StepCall::with_node(serde_json::json!({}));
    for step in ["metadata", "express"] {
        let state = Arc::new(AgentState::new(config(true), None));
        let e = match step {
            "metadata" => erase_devices_metadata_step(state, call.clone()).await,
            _ => erase_devices_express_step(state, call.clone()).await,
        }
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ProtectedDevice, "{step}: {e:?}");
        assert!(e.details.contains("VMware VMFS"), "{step}: {}", e.details);
        assert!(
            (
                std::fs::read(&plain).unwrap(),
                std::fs::read(&vmfs).unwrap()
            ) == before,
            "{step}: a device was written before the refusal"
        );
    }
    // ipa-guard-special-filesystems=0: wiped like any disk.
    let state = Arc::new(AgentState::new(config(false), None));
    erase_devices_metadata_step(state, call).await.unwrap();
    let sigs = |p: &PathBuf| {
        agent_devices::disk::erase::probe_signatures(&File::open(p).unwrap()).unwrap()
    };
    assert!(sigs(&vmfs).is_empty() && sigs(&plain).is_empty());
}

#[tokio::test]
async fn raid_members_are_skipped_as_ipa_does() {
    use agent_contents::raid::superblock::{self, ArrayInfo, MemberInfo};
    let dir = tempfile::tempdir().unwrap();
    let (member, plain) = (dir.path().join("member.img"), dir.path().join("plain.img"));
    agent_testkit::write_demo_image(&member).unwrap();
    agent_testkit::write_demo_image(&plain).unwrap();
    // A v1.2 superblock 4 KiB into the member (inside the demo image's
    // first MiB, before its partition).
    let bytes = std::fs::metadata(&member).unwrap().len();
    let sb = superblock::encode(
        &ArrayInfo {
            uuid: [0x11; 16],
            name: "root".into(),
            ctime: 1_700_000_000,
            level: 1,
            layout: 0,
            chunk_sectors: 0,
            raid_disks: 2,
            size: bytes / 512 - 2048,
            resync_offset: 0,
        },
        &MemberInfo {
            role: 0,
            uuid: [0x22; 16],
            data_offset: 2048,
            data_size: bytes / 512 - 2048,
            super_offset: 8,
        },
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&member)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &sb, 4096).unwrap();
    drop(f);
    let before = std::fs::read(&member).unwrap();
    let state = Arc::new(AgentState::new(
        Config {
            allowed_devices: vec![member.clone(), plain.clone()],
            ..Config::default()
        },
        None,
    ));
    let call = StepCall::with_node(serde_json::json!({}));
    erase_devices_metadata_step(state.clone(), call.clone())
        .await
        .unwrap();
    assert!(
        std::fs::read(&member).unwrap() == before,
        "the RAID member was touched"
    );
    let left = agent_devices::disk::erase::probe_signatures(&File::open(&plain).unwrap()).unwrap();
    assert!(left.is_empty(), "{left:?}");
    // erase_devices skips it too (and erases the other).
    let out = erase_devices_step(state, call).await.unwrap();
    assert!(
        out.get(member.display().to_string().as_str()).is_none(),
        "{out}"
    );
    assert!(
        out.get(plain.display().to_string().as_str()).is_some(),
        "{out}"
    );
    assert!(std::fs::read(&member).unwrap() == before);
}
