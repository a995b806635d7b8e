//! Tests of `burnin.rs`.

use serde_json::json;

use super::*;
use agent_base::config::Config;

fn call(driver_info: Value) -> StepCall {
    StepCall::with_node(json!({"driver_info": driver_info}))
}

fn state(config: Config) -> Arc<AgentState> {
    Arc::new(AgentState::new(config, None))
}

#[tokio::test]
async fn cpu_and_memory_run_for_the_knobs_time_and_report() {
    let s = state(Config::default());
    let t = Instant::now();
    let r = burnin_cpu_step(
        s.clone(),
        call(json!({"agent_burnin_cpu_cpu": 2, "agent_burnin_cpu_timeout": "0.4"})),
    )
    .await
    .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert_eq!(r["workers"].as_array().unwrap().len(), 2, "{r}");
    let r = burnin_memory_step(
        s,
        call(json!({"agent_burnin_vm_vm": 1, "agent_burnin_vm_vm-bytes": "16M", "agent_burnin_vm_timeout": 1})),
    )
    .await
    .unwrap();
    assert_eq!(r["bytes"], 16 << 20, "{r}");
    assert!(r["passes"][0].as_u64().unwrap() >= 1, "{r}");
}

#[tokio::test]
async fn bad_knobs_are_invalid_parameters_naming_the_knob() {
    let s = state(Config::default());
    let e = burnin_cpu_step(s.clone(), call(json!({"agent_burnin_cpu_timeout": 0})))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidCommandParams);
    assert!(e.details.starts_with("agent_burnin_cpu_timeout: "), "{e:?}");
    let e = burnin_memory_step(s, call(json!({"agent_burnin_vm_vm-bytes": "lots"})))
        .await
        .unwrap_err();
    assert!(e.details.starts_with("agent_burnin_vm_vm-bytes: "), "{e:?}");
}

#[test]
fn memory_is_capped_in_host_mode_and_keeps_a_reserve_in_the_ramdisk() {
    let gib = 1u64 << 30;
    let node = DriverInfo::default();
    assert_eq!(memory_bytes(&node, RunMode::Host, 4 * gib).unwrap(), gib);
    assert_eq!(
        memory_bytes(&node, RunMode::Ramdisk, 4 * gib).unwrap(),
        (4.0 * gib as f64 * 0.98) as u64
    );
    let all: DriverInfo =
        serde_json::from_value(json!({"agent_burnin_vm_vm-bytes": "100%"})).unwrap();
    assert_eq!(
        memory_bytes(&all, RunMode::Ramdisk, 4 * gib).unwrap(),
        4 * gib - MEMORY_RESERVE
    );
}

#[tokio::test]
async fn disk_burn_in_writes_only_allowed_devices_and_honours_the_skip_list() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, vec![1u8; 1 << 20]).unwrap();
    std::fs::write(&b, vec![1u8; 1 << 20]).unwrap();
    let s = state(Config {
        allowed_devices: vec![a.clone(), b.clone()],
        ..Config::default()
    });
    let c = StepCall::with_node(json!({
        "driver_info": {"agent_burnin_fio_disk_loops": 1},
        "properties": {"skip_block_devices": [{"name": b.display().to_string()}]},
    }));
    let r = burnin_disk_step(s.clone(), c).await.unwrap();
    assert_eq!(r.as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r[0]["device"], a.display().to_string());
    assert_eq!(r[0]["passes"], 1);
    assert_ne!(std::fs::read(&a).unwrap(), vec![1u8; 1 << 20]);
    assert_eq!(std::fs::read(&b).unwrap(), vec![1u8; 1 << 20], "skipped");
    // With the SMART self-test: files have no ATA pass-through, so each
    // is left out with the reason (as IPA drops a disk without status).
    let r = burnin_disk_step(
        s,
        call(json!({"agent_burnin_fio_disk_smart_test": true, "agent_burnin_fio_disk_loops": 1})),
    )
    .await
    .unwrap();
    assert_eq!(r["disks"].as_array().unwrap().len(), 2, "{r}");
    let skipped = r["smart"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{r}");
    assert!(skipped[0].as_str().unwrap().contains("no SG_IO"), "{r}");
}

#[test]
fn member_address_is_the_callback_host() {
    let s = state(Config::default());
    assert_eq!(member_address(&s), None);
    for (url, want) in [
        ("https://10.0.0.5:9999", "10.0.0.5"),
        ("http://[fd00::5]:9999/", "fd00::5"),
        ("http://node-1", "node-1"),
    ] {
        s.update_session(|i| i.callback_url = Some(url.into()));
        assert_eq!(member_address(&s).as_deref(), Some(want), "{url}");
    }
}
