//! The container manager: its listing per phase from a steps file, IPA's
//! refusals, the generic step's arguments, and the allowlist applied
//! before anything is pulled. Running images is `hardware-tests`'
//! (`container_registry_loop`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::*;
use agent_base::config::Config;

const FILE: &str = "
steps:
  - name: write_marker
    image: docker://127.0.0.1:1/tool:1
    priority: 35
    interface: deploy
    reboot_requested: false
    abortable: true
";

/// A manager whose configuration files say `group` under `[container]`
/// and whose lookup answer sends `agent_containers`.
fn manager(group: &[(&str, &str)], agent_containers: Option<Value>) -> ContainerManager {
    let config = Config {
        container_group: group
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..Config::default()
    };
    let lookup = agent_containers.map(|a| {
        agent_conductor::conductor::lookup::parse_lookup(&json!({
            "node": {"uuid": "n"},
            "config": {"heartbeat_timeout": 300, "agent_containers": a},
        }))
        .unwrap()
        .config
    });
    let sources = ManagerSources {
        config: Arc::new(config),
        lookup,
    };
    let reserved = ["erase_devices_metadata".to_string()].into();
    ContainerManager::new(&sources, reserved)
}

fn state() -> AgentState {
    AgentState::new(Config::default(), None)
}

fn steps_file(text: &str) -> (tempfile::TempDir, String) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("steps.yaml");
    std::fs::write(&p, text).unwrap();
    let p = p.display().to_string();
    (d, p)
}

#[test]
fn the_file_steps_priorities_are_for_cleaning_only() {
    let (_d, path) = steps_file(FILE);
    let m = manager(&[("container_steps_file", &path)], None);
    let clean = m.steps(StepKind::Clean, &state()).unwrap();
    let names: Vec<&str> = clean.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(names, [GENERIC_STEP, DEPRECATED_STEP, "write_marker"]);
    assert_eq!(clean[2].priority, 35);
    assert_eq!(clean[0].priority, 0);
    assert_eq!(clean[0].argsinfo.len(), 3);
    assert!(clean[0]
        .argsinfo
        .iter()
        .any(|a| a.name == "container_url" && a.required));
    for kind in [StepKind::Deploy, StepKind::Service] {
        let steps = m.steps(kind, &state()).unwrap();
        assert_eq!(steps.len(), 3);
        assert!(steps.iter().all(|s| s.priority == 0), "{kind:?}");
    }
    assert_eq!(
        m.step_names(),
        [GENERIC_STEP, DEPRECATED_STEP, "write_marker"]
    );
    assert_eq!(
        m.version(),
        ManagerVersion {
            name: NAME.into(),
            version: VERSION.into()
        }
    );
}

#[test]
fn a_file_step_shadowing_another_managers_fails_the_listing() {
    let (_d, path) = steps_file(&FILE.replace("write_marker", "erase_devices_metadata"));
    let m = manager(&[("container_steps_file", &path)], None);
    let e = m.steps(StepKind::Clean, &state()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::HardwareManagerConfiguration);
    assert_eq!(
        e.details,
        format!(
            "Container step 'erase_devices_metadata' collides with an existing hardware manager \
             method and would shadow it. Rename it in {path}."
        )
    );
    // Never dispatched to a container.
    assert!(!m
        .step_names()
        .contains(&"erase_devices_metadata".to_string()));
    let call = RawCall {
        node: None,
        ports: Default::default(),
        args: Map::new(),
    };
    assert!(m
        .prepare(
            "erase_devices_metadata",
            StepKind::Clean,
            call,
            &Context::default()
        )
        .is_none());

    let (_d, path) = steps_file("steps: 3");
    let m = manager(&[("container_steps_file", &path)], None);
    let e = m.steps(StepKind::Deploy, &state()).unwrap_err();
    assert_eq!(
        e.details,
        format!("'steps' in {path} must be a list, got int.")
    );
}

fn call(args: Value) -> RawCall {
    RawCall {
        node: None,
        ports: Default::default(),
        args: args.as_object().cloned().unwrap_or_default(),
    }
}

#[tokio::test]
async fn the_generic_step_checks_its_arguments_and_the_allowlist_first() {
    let m = manager(
        &[("container_steps_file", "/nonexistent/steps.yaml")],
        Some(json!({"allowed_containers": ["docker://127.0.0.1:1/tool:1"]})),
    );
    let ctx = Context::default();
    for (args, needle) in [
        (
            json!({}),
            "container_url must be a non-empty string, got NoneType.",
        ),
        (
            json!({"container_url": 5}),
            "container_url must be a non-empty string, got int.",
        ),
        (
            json!({"container_url": "a", "run_options": 1}),
            "run_options must be a string or a list of strings, got int.",
        ),
        (
            json!({"container_url": "a", "entrypoint": "x"}),
            "unexpected argument \"entrypoint\"",
        ),
    ] {
        let Some(Err(e)) = m.prepare(GENERIC_STEP, StepKind::Clean, call(args), &ctx) else {
            panic!("{needle}: accepted");
        };
        assert_eq!(e.kind, ErrorKind::InvalidCommandParams);
        assert!(e.details.contains(needle), "{}", e.details);
    }
    // Not allowed: IPA's ContainerNotPermittedError, before any pull
    // (nothing listens on port 1).
    for step in [GENERIC_STEP, DEPRECATED_STEP] {
        let prepared = m
            .prepare(
                step,
                StepKind::Clean,
                call(json!({"container_url": "127.0.0.1:1/other:1"})),
                &ctx,
            )
            .unwrap()
            .unwrap();
        let e = prepared(Arc::new(state())).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ContainerNotPermitted);
        assert_eq!(
            e.details,
            "Container image 127.0.0.1:1/other:1 is not in [container]allowed_containers and \
             [container]allow_arbitrary_containers is not enabled."
        );
    }
    // Allowed: it gets as far as the registry (nothing there).
    let prepared = m
        .prepare(
            GENERIC_STEP,
            StepKind::Clean,
            call(json!({"container_url": "127.0.0.1:1/tool:1", "run_options": "--privileged"})),
            &ctx,
        )
        .unwrap()
        .unwrap();
    let e = prepared(Arc::new(state())).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::CommandExecution);
    assert!(
        e.details
            .starts_with("pulling container image 127.0.0.1:1/tool:1: "),
        "{}",
        e.details
    );
    // Names that are neither its steps nor the file's are not its.
    assert!(m
        .prepare("nope", StepKind::Clean, call(json!({})), &ctx)
        .is_none());
}

#[test]
fn support_needs_crun_and_on_a_host_a_container_group() {
    let m = manager(&[], Some(json!({"allow_arbitrary_containers": true})));
    assert_eq!(m.support(), SUPPORT_NONE, "host mode without [container]");
    let m = manager(&[("allow_arbitrary_containers", "false")], None);
    let expected = if runtime::runtime_available() {
        SUPPORT_MAINLINE
    } else {
        SUPPORT_NONE
    };
    assert_eq!(m.support(), expected);
}
