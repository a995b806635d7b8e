//! Executable managers loaded from a manifest directory and run through
//! the managers' listing and dispatch, with shell scripts for executables
//! (the helpers here serve the hooks' tests too).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::*;
use crate::commands::dispatch::context::ManagerSources;
use crate::commands::dispatch::step_call::StepCall;
use crate::commands::managers::Managers;
use ironic_types::node::Node;

pub(in crate::commands) fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub(in crate::commands::managers) fn config(dir: &Path) -> Config {
    Config {
        exec_managers_dir: Some(dir.to_path_buf()),
        ..Config::default()
    }
}

const ACME: &str = "
name: acme
version: '1.5'
steps:
  - name: echo_input
    executable: echo.sh
    interface: raid
    clean_priority: 0
    deploy_priority: 70
    abortable: true
    argsinfo:
      level: {description: RAID level, required: true}
  - name: fail
    executable: fail.sh
    interface: deploy
    clean_priority: 0
";

/// A directory with manager `acme`: `echo_input` prints its stdin back,
/// `fail` exits 3 after two lines.
fn acme() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    script(d.path(), "echo.sh", "cat; echo");
    script(
        d.path(),
        "fail.sh",
        "echo first; echo 'controller not found' >&2; exit 3",
    );
    std::fs::write(d.path().join("acme.yaml"), ACME).unwrap();
    d
}

fn raw_call(args: Value) -> RawCall {
    StepCall {
        node: Node::from_document(json!({"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"})),
        ports: serde_json::from_value(json!([{"address": "52:54:00:12:34:56"}])).unwrap(),
        args: match args {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

async fn run_step(
    m: &Managers,
    state: Arc<AgentState>,
    name: &str,
    kind: StepKind,
    args: Value,
) -> Result<Value, CommandError> {
    let prepared = m
        .prepare(name, kind, raw_call(args), &Context::default())
        .unwrap_or_else(|| panic!("no step {name}"))?;
    prepared(state).await
}

#[tokio::test]
async fn a_manifests_steps_are_listed_and_run_with_their_input() {
    let d = acme();
    let cfg = config(d.path());
    let state = Arc::new(AgentState::new(cfg.clone(), None));
    let m = Managers::load(&ManagerSources {
        config: Arc::new(cfg),
        lookup: None,
    });
    assert!(m.refused().is_empty(), "{:?}", m.refused());
    assert_eq!(m.versions()["acme"], "1.5");
    let deploy = m.steps(StepKind::Deploy, &state).unwrap();
    assert_eq!(
        deploy["acme"],
        json!([{"step": "echo_input", "priority": 70, "interface": "raid",
                "reboot_requested": false, "abortable": true,
                "argsinfo": {"level": {"description": "RAID level", "required": true}}}])
    );
    let clean = m.steps(StepKind::Clean, &state).unwrap();
    let names: Vec<&str> = clean["acme"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["step"].as_str())
        .collect();
    assert_eq!(names, ["echo_input", "fail"]);
    assert!(m
        .steps(StepKind::Service, &state)
        .unwrap()
        .get("acme")
        .is_none());

    let out = run_step(
        &m,
        state.clone(),
        "echo_input",
        StepKind::Deploy,
        json!({"level": "1"}),
    )
    .await
    .unwrap();
    assert_eq!(out["step"], "echo_input");
    assert_eq!(out["phase"], "deploy");
    assert_eq!(out["args"], json!({"level": "1"}));
    assert_eq!(out["node"]["uuid"], "1be26c0b-03f2-4d2e-ae87-c02d7f33c123");
    assert_eq!(out["ports"][0]["address"], "52:54:00:12:34:56");
    // Host mode with no allowed device: no disk is listed.
    assert_eq!(out["disks"], json!([]));

    // Not a service step; a required argument missing.
    assert!(m
        .prepare(
            "echo_input",
            StepKind::Service,
            raw_call(json!({})),
            &Context::default()
        )
        .is_none());
    let Some(Err(e)) = m.prepare(
        "echo_input",
        StepKind::Deploy,
        raw_call(json!({})),
        &Context::default(),
    ) else {
        panic!("a missing required argument was accepted")
    };
    assert_eq!(e.kind, ErrorKind::InvalidCommandParams);
    assert!(
        e.details.contains("required argument level"),
        "{}",
        e.details
    );

    let e = run_step(&m, state, "fail", StepKind::Clean, json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::CommandExecution);
    assert_eq!(
        e.details,
        "manager acme's step executable fail.sh exited with status 3; last output:\nfirst\ncontroller not found"
    );
}

/// A vendor's manifest (support 3 by default, above the generic 1)
/// replaces the generic `erase_devices` and `create_configuration`: both
/// are listed under the vendor and run its executables, as IPA runs a
/// vendor manager's steps (in-band hardware RAID, a vendor's erase).
#[tokio::test]
async fn a_vendors_step_replaces_the_generic_one_of_that_name() {
    let d = tempfile::tempdir().unwrap();
    script(d.path(), "erase.sh", "echo '{\"erased\": \"by vendor\"}'");
    script(d.path(), "raid.sh", "echo '{\"raid\": \"hardware\"}'");
    std::fs::write(
        d.path().join("vendor.yaml"),
        "name: vendor_raid\nversion: '2'\nsteps:\n  - {name: erase_devices, executable: erase.sh, interface: deploy, clean_priority: 10}\n  - {name: create_configuration, executable: raid.sh, interface: raid, clean_priority: 0, deploy_priority: 0}\n",
    )
    .unwrap();
    let cfg = config(d.path());
    let state = Arc::new(AgentState::new(cfg.clone(), None));
    let m = Managers::load(&ManagerSources {
        config: Arc::new(cfg),
        lookup: None,
    });
    assert!(m.refused().is_empty(), "{:?}", m.refused());
    let clean = m.steps(StepKind::Clean, &state).unwrap();
    let listed = |group: &str| -> Vec<String> {
        clean[group]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["step"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        listed("vendor_raid"),
        ["erase_devices", "create_configuration"]
    );
    let generic = listed(crate::commands::managers::generic::NAME);
    assert!(
        !generic
            .iter()
            .any(|s| s == "erase_devices" || s == "create_configuration"),
        "{generic:?}"
    );
    let out = run_step(
        &m,
        state.clone(),
        "erase_devices",
        StepKind::Clean,
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(out, json!({"erased": "by vendor"}));
    let out = run_step(
        &m,
        state,
        "create_configuration",
        StepKind::Clean,
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(out, json!({"raid": "hardware"}));
}

#[test]
fn a_step_shadowing_a_generic_one_is_refused_naming_the_manifest() {
    let d = acme();
    // Support 1 is the generic manager's own: the step cannot replace it.
    std::fs::write(
        d.path().join("zz.yaml"),
        "name: shadow\nversion: '1'\nsupport: 1\nsteps:\n  - {name: erase_devices_metadata, executable: echo.sh, interface: deploy, clean_priority: 99}\n",
    )
    .unwrap();
    let cfg = config(d.path());
    let state = AgentState::new(cfg.clone(), None);
    let m = Managers::load(&ManagerSources {
        config: Arc::new(cfg),
        lookup: None,
    });
    let e = m.steps(StepKind::Clean, &state).unwrap_err();
    assert_eq!(e.kind, ErrorKind::HardwareManagerConfiguration);
    let manifest = d.path().join("zz.yaml");
    assert!(
        e.details.contains(&manifest.display().to_string()),
        "{}",
        e.details
    );
    assert!(
        e.details.contains("\"erase_devices_metadata\""),
        "{}",
        e.details
    );

    // A broken manifest refuses the directory, naming the file and step.
    std::fs::write(
        d.path().join("zz.yaml"),
        "name: broken\nversion: '1'\nsteps:\n  - {name: s, executable: gone.sh, interface: deploy, clean_priority: 1}\n",
    )
    .unwrap();
    let m = Managers::load(&ManagerSources {
        config: Arc::new(config(d.path())),
        lookup: None,
    });
    let e = m.steps(StepKind::Clean, &state).unwrap_err();
    assert!(
        e.details.ends_with(&format!(
            "{}: step \"s\": executable gone.sh does not exist",
            manifest.display()
        )),
        "{}",
        e.details
    );
}
