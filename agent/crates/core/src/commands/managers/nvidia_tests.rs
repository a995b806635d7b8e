//! IPA's Mellanox manager as the agent loads and lists it, and its steps
//! run through the manager with stand-in tools (`agent_testkit::mellanox`: no
//! Mellanox/NVIDIA NIC exists where these tests run).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::*;
use crate::commands::dispatch::context::Context;
use crate::commands::managers::{Manager, Managers};
use crate::commands::ErrorKind;
use crate::state::AgentState;
use agent_base::config::Config;
use agent_testkit::mellanox::{device_query, sysfs, Bed};

fn managers(sys: &std::path::Path, bed: &Bed) -> Managers {
    let m = NvidiaNicManager::detect(sys, bed.path());
    Managers::from_candidates(vec![Arc::new(m) as Arc<dyn Manager>], Vec::new())
}

fn state() -> AgentState {
    AgentState::new(Config::default(), None)
}

#[test]
fn offered_only_where_a_mellanox_nic_is() {
    let bed = Bed::new();
    let root = tempfile::tempdir().unwrap();
    sysfs(root.path(), &[("eno1", "0x8086")]);
    let without = managers(root.path(), &bed);
    assert_eq!(
        without.versions(),
        json!({"generic_hardware_manager": "1.2"})
    );
    let clean = without.steps(StepKind::Clean, &state()).unwrap();
    assert!(clean.get(NAME).is_none(), "{clean}");

    sysfs(root.path(), &[("ib0", "0x15b3")]);
    let with = managers(root.path(), &bed);
    assert_eq!(
        with.versions(),
        json!({"generic_hardware_manager": "1.2", "MellanoxDeviceHardwareManager": "1"})
    );
    // MAINLINE sorts before the generic manager.
    assert_eq!(with.list()[0].name(), NAME);
    assert_eq!(with.list()[0].support(), SUPPORT_MAINLINE);

    // A host never loads it, whatever its NICs.
    let host = Managers::load(&crate::commands::dispatch::context::ManagerSources::default());
    assert!(!host.list().iter().any(|m| m.name() == NAME));
}

#[test]
fn both_steps_are_listed_in_every_phase_as_ipa_lists_them() {
    let bed = Bed::new();
    let root = tempfile::tempdir().unwrap();
    sysfs(root.path(), &[("ens1f0np0", "0x15b3")]);
    let m = managers(root.path(), &bed);
    for kind in [StepKind::Clean, StepKind::Deploy, StepKind::Service] {
        let groups = m.steps(kind, &state()).unwrap();
        let steps = groups[NAME].as_array().unwrap();
        assert_eq!(steps.len(), 2, "{kind:?}: {groups}");
        for (s, arg) in steps.iter().zip(["images", "settings"]) {
            assert_eq!(s["priority"], 0);
            assert_eq!(s["interface"], "deploy");
            assert_eq!(s["reboot_requested"], true);
            assert_eq!(s["abortable"], false);
            let args = s["argsinfo"].as_object().unwrap();
            assert_eq!(args.keys().collect::<Vec<_>>(), vec![arg]);
            assert_eq!(args[arg]["required"], true);
        }
        assert_eq!(steps[0]["step"], IMAGE_STEP);
        assert_eq!(steps[1]["step"], SETTINGS_STEP);
    }
}

async fn run(m: &Managers, step: &str, args: Value) -> Result<Value, CommandError> {
    let call = RawCall {
        node: None,
        ports: Default::default(),
        args: args.as_object().cloned().unwrap_or_else(Map::new),
    };
    let prepared = m
        .prepare(step, StepKind::Clean, call, &Context::default())
        .expect("the manager has the step")?;
    prepared(Arc::new(state())).await
}

#[tokio::test]
async fn steps_fail_with_ipas_classes() {
    let bed = Bed::new();
    let root = tempfile::tempdir().unwrap();
    sysfs(root.path(), &[("ens1f0np0", "0x15b3")]);
    let m = managers(root.path(), &bed);
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.33.1012", None, "MT_0000000228"),
    );
    bed.write(
        "image.query",
        &device_query("20.35.1012", None, "MT_0000000652"),
    );
    let fw = bed.state.join("fw.bin");
    std::fs::write(&fw, b"fw").unwrap();
    let mut h =
        agent_contents::image::checksum::Hasher::new(agent_contents::image::checksum::Algo::Sha256);
    h.update(b"fw");
    let image = json!({"url": format!("file://{}", fw.display()), "checksum": h.finish_hex(),
        "checksumType": "sha256", "componentFlavor": "MT_0000000228", "version": "20.35.1012"});
    let e = run(&m, IMAGE_STEP, json!({"images": [image]}))
        .await
        .unwrap_err();
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["type"], "MismatchComponentFlavor", "{v}");
    assert_eq!(v["message"], "An error occurred");
    assert!(
        v["details"].as_str().unwrap().contains("MT_0000000652"),
        "{v}"
    );

    let e = run(&m, SETTINGS_STEP, json!({"settings": "1017"}))
        .await
        .unwrap_err();
    assert_eq!(
        serde_json::to_value(&e).unwrap()["type"],
        "InvalidFirmwareSettingsConfig"
    );

    // The tools missing: an execution error (the phase's error, once the
    // step dispatcher names the step) saying what to build in.
    bed.remove("mstflint");
    let e = run(&m, SETTINGS_STEP, json!({"settings": []}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::CommandExecution);
    assert!(
        e.details.starts_with("mstflint was not found")
            && e.details.contains("built into the deploy ramdisk"),
        "{e}"
    );

    // Its one argument, and no other.
    let e = run(&m, IMAGE_STEP, json!({})).await.unwrap_err();
    assert!(e.details.contains("\"images\" is missing"), "{e}");
    let e = run(&m, IMAGE_STEP, json!({"images": [], "force": true}))
        .await
        .unwrap_err();
    assert!(e.details.contains("\"force\""), "{e}");
}

#[test]
fn a_settings_step_sets_through_the_manager() {
    let bed = Bed::new();
    let root = tempfile::tempdir().unwrap();
    sysfs(root.path(), &[("ens1f0np0", "0x15b3")]);
    let m = managers(root.path(), &bed);
    bed.nic(
        "0000:03:00.0",
        "1017",
        &device_query("20.35.1012", None, "MT_0000000228"),
    );
    bed.write(
        "mstconfig-q-0000:03:00.0",
        &agent_testkit::mellanox::mstconfig_query("0000:03:00.0", &[("NUM_OF_VFS", "0")]),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(run(
        &m,
        SETTINGS_STEP,
        json!({"settings": [{"deviceID": "1017", "globalConfig": {"NUM_OF_VFS": 16}}]}),
    ));
    assert_eq!(r.unwrap(), Value::Null);
    assert!(bed
        .calls()
        .contains(&"mstconfig -d 0000:03:00.0 -y set NUM_OF_VFS=16".to_string()));
}
