//! `standby.sync`, `standby.power_off` and `standby.run_image` through the
//! command API in host mode on a loop device this test creates: data
//! written through the device's page cache is in the backing file once
//! `sync` answers (IPA 13's `full_sync`: sync(2), then BLKFLSBUF on every
//! device the agent may write), and both power commands succeed without
//! touching this machine (simulated, as host mode requires).
//!
//! Real Ironic 39 cannot send `run_image` successfully: only its `agent`
//! power interface sends it, and `node_power_action` wipes the node's
//! `agent_url` before calling that interface's `reboot`
//! (`conductor/utils.py`), which then fails with "Agent driver requires
//! agent_url". So the command is tested here, as Ironic would send it.

use std::io::{Read, Seek, SeekFrom};

use agent_base::config::Config;
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_flushes_the_devices_and_power_commands_are_simulated() {
    hardware_tests::require_root("the loop-device standby test");
    let d = LoopDevice::new(16 << 20).unwrap();
    let name = d.path.file_name().unwrap().to_string_lossy().into_owned();
    let backing = std::path::PathBuf::from(
        std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
            .unwrap()
            .trim(),
    );
    let api = AgentApi::start(Config {
        allowed_devices: vec![d.path.clone()],
        ..Config::default()
    })
    .await
    .unwrap();
    // Buffered writes to the block device: in its page cache until flushed.
    let marker = b"standby-sync-marker-0123456789";
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&d.path)
        .unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    std::io::Write::write_all(&mut f, marker).unwrap();
    let v = api.run("standby.sync", json!({})).await.unwrap();
    assert_eq!(v["command_status"], "SUCCEEDED", "{v}");
    let mut back = std::fs::File::open(&backing).unwrap();
    back.seek(SeekFrom::Start(1 << 20)).unwrap();
    let mut got = vec![0u8; marker.len()];
    back.read_exact(&mut got).unwrap();
    assert_eq!(got, marker, "the write did not reach the backing file");
    drop(f);
    for cmd in ["standby.power_off", "standby.run_image"] {
        let v = api.run(cmd, json!({})).await.unwrap();
        assert_eq!(v["command_status"], "SUCCEEDED", "{cmd}: {v}");
    }
}
