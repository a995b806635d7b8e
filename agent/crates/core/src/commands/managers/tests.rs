//! The managers' merge, order, versions and refusals, with managers made
//! here from a few steps each.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::*;
use agent_base::config::Config;

/// A manager of `steps` (name, clean priority) whose steps return their
/// manager's name.
struct Listed {
    name: &'static str,
    support: u32,
    steps: Vec<(&'static str, u32)>,
}

impl Manager for Listed {
    fn name(&self) -> &str {
        self.name
    }
    fn origin(&self) -> String {
        format!("/etc/managers/{}.yaml", self.name)
    }
    fn version(&self) -> ManagerVersion {
        ManagerVersion {
            name: self.name.to_lowercase(),
            version: "7".into(),
        }
    }
    fn support(&self) -> u32 {
        self.support
    }
    fn step_names(&self) -> Vec<String> {
        self.steps.iter().map(|(s, _)| s.to_string()).collect()
    }
    fn steps(&self, kind: StepKind, _: &AgentState) -> Result<Vec<StepInfo>, CommandError> {
        if kind != StepKind::Clean {
            return Ok(Vec::new());
        }
        Ok(self
            .steps
            .iter()
            .map(|(s, p)| StepInfo {
                step: s.to_string(),
                priority: *p,
                interface: "deploy".into(),
                reboot_requested: false,
                abortable: true,
                argsinfo: Vec::new(),
            })
            .collect())
    }
    fn prepare(
        &self,
        name: &str,
        kind: StepKind,
        _: RawCall,
        _: &Context,
    ) -> Option<Result<PreparedStep, CommandError>> {
        if kind != StepKind::Clean || !self.steps.iter().any(|(s, _)| *s == name) {
            return None;
        }
        let me = self.name.to_string();
        Some(Ok(Box::new(move |_| {
            Box::pin(async move { Ok(Value::String(me)) })
        })))
    }
}

fn listed(name: &'static str, support: u32, steps: &[(&'static str, u32)]) -> Arc<dyn Manager> {
    Arc::new(Listed {
        name,
        support,
        steps: steps.to_vec(),
    })
}

fn state() -> AgentState {
    AgentState::new(Config::default(), None)
}

fn names(groups: &Value, manager: &str) -> Vec<String> {
    groups[manager]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["step"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_generic_manager_alone_lists_its_table_and_version() {
    let m = Managers::default();
    assert_eq!(m.versions(), json!({"generic_hardware_manager": "1.2"}));
    let clean = m.steps(StepKind::Clean, &state()).unwrap();
    let listed = names(&clean, generic::NAME);
    assert!(
        listed.contains(&"erase_devices_metadata".to_string()),
        "{clean}"
    );
    assert!(
        !listed.contains(&"write_image".to_string()),
        "not a clean step: {clean}"
    );
    let deploy = m.steps(StepKind::Deploy, &state()).unwrap();
    assert!(names(&deploy, generic::NAME).contains(&"write_image".to_string()));
}

#[test]
fn managers_are_ordered_by_support_and_all_report_versions() {
    let m = Managers::from_candidates(
        vec![
            listed("Mainline", SUPPORT_MAINLINE, &[("a_step", 0)]),
            listed("Vendor", SUPPORT_SERVICE_PROVIDER, &[("b_step", 5)]),
        ],
        Vec::new(),
    );
    let order: Vec<&str> = m.list().iter().map(|m| m.name()).collect();
    assert_eq!(order, ["Vendor", "Mainline", generic::NAME]);
    assert_eq!(
        m.versions(),
        json!({"generic_hardware_manager": "1.2", "mainline": "7", "vendor": "7"})
    );
    let clean = m.steps(StepKind::Clean, &state()).unwrap();
    assert_eq!(names(&clean, "Vendor"), ["b_step"]);
    assert_eq!(names(&clean, "Mainline"), ["a_step"]);
    assert_eq!(clean["Vendor"][0]["priority"], 5);
}

#[test]
fn a_manager_without_support_is_not_loaded() {
    let m = Managers::from_candidates(vec![listed("Off", SUPPORT_NONE, &[("x", 1)])], Vec::new());
    assert_eq!(m.list().len(), 1);
    assert!(m.refused().is_empty());
    assert_eq!(m.versions(), json!({"generic_hardware_manager": "1.2"}));
}

#[test]
fn a_manager_shadowing_a_step_is_refused_with_its_origin_and_listing_fails() {
    let m = Managers::from_candidates(
        vec![
            listed("Good", SUPPORT_SERVICE_PROVIDER, &[("raid_check", 0)]),
            listed(
                "Bad",
                SUPPORT_GENERIC,
                &[("mine", 0), ("erase_devices_metadata", 99)],
            ),
            listed("Copy", SUPPORT_SERVICE_PROVIDER, &[("raid_check", 0)]),
            listed(
                "Bootc",
                SUPPORT_SERVICE_PROVIDER,
                &[("execute_bootc_install", 0)],
            ),
        ],
        Vec::new(),
    );
    let order: Vec<&str> = m.list().iter().map(|m| m.name()).collect();
    assert_eq!(order, ["Good", generic::NAME]);
    assert_eq!(m.refused().len(), 3, "{:?}", m.refused());
    assert!(
        m.refused()[0].contains("\"Bad\" (/etc/managers/Bad.yaml)")
            && m.refused()[0].contains("\"erase_devices_metadata\"")
            && m.refused()[0].contains(
                "GenericHardwareManager, whose support (1) is not lower than its own (1)"
            ),
        "{}",
        m.refused()[0]
    );
    assert!(m.refused()[1].contains("of Good"), "{}", m.refused()[1]);
    assert!(
        m.refused()[2].contains("Ironic itself"),
        "{}",
        m.refused()[2]
    );
    let e = m.steps(StepKind::Clean, &state()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::HardwareManagerConfiguration);
    assert!(
        e.details.contains("Bad") && e.details.contains("Copy"),
        "{}",
        e.details
    );
}

/// IPA's way for in-band hardware RAID and a vendor's erase: a manager of
/// higher support replaces the generic step of the same name, in the
/// listing and in the run; the generic manager keeps its other steps, and
/// a later manager of the same support cannot take the step again.
#[tokio::test]
async fn a_manager_of_higher_support_replaces_a_generic_step() {
    let raid = || {
        listed(
            "Raid",
            SUPPORT_MAINLINE,
            &[("delete_configuration", 0), ("erase_devices", 10)],
        )
    };
    let again = Managers::from_candidates(
        vec![
            raid(),
            listed("Again", SUPPORT_MAINLINE, &[("erase_devices", 5)]),
        ],
        Vec::new(),
    );
    assert_eq!(again.refused().len(), 1, "{:?}", again.refused());
    assert!(
        again.refused()[0].contains("\"Again\"") && again.refused()[0].contains("of Raid"),
        "{}",
        again.refused()[0]
    );
    let m = Managers::from_candidates(
        vec![
            raid(),
            listed("Vendor", SUPPORT_SERVICE_PROVIDER, &[("erase_devices", 1)]),
        ],
        Vec::new(),
    );
    assert!(m.refused().is_empty(), "{:?}", m.refused());
    let clean = m.steps(StepKind::Clean, &state()).unwrap();
    assert_eq!(names(&clean, "Vendor"), ["erase_devices"]);
    assert_eq!(names(&clean, "Raid"), ["delete_configuration"]);
    let generic = names(&clean, generic::NAME);
    assert!(
        !generic
            .iter()
            .any(|s| s == "erase_devices" || s == "delete_configuration"),
        "{generic:?}"
    );
    assert!(
        generic.iter().any(|s| s == "erase_devices_metadata"),
        "{generic:?}"
    );
    let ctx = Context::default();
    let call = || RawCall {
        node: None,
        ports: Default::default(),
        args: Map::new(),
    };
    for (step, runs_on) in [
        ("erase_devices", "Vendor"),
        ("delete_configuration", "Raid"),
    ] {
        let run = m
            .prepare(step, StepKind::Clean, call(), &ctx)
            .expect("found")
            .expect("prepared");
        assert_eq!(
            run(Arc::new(state())).await.unwrap(),
            json!(runs_on),
            "{step}"
        );
    }
}

#[test]
fn a_second_manager_of_the_same_name_is_refused() {
    let m = Managers::from_candidates(
        vec![
            listed("Twice", SUPPORT_SERVICE_PROVIDER, &[("one", 0)]),
            listed("Twice", SUPPORT_SERVICE_PROVIDER, &[("two", 0)]),
        ],
        Vec::new(),
    );
    assert_eq!(m.list().len(), 2);
    assert!(
        m.refused()[0].contains("already loaded"),
        "{:?}",
        m.refused()
    );
}

#[test]
fn refusals_found_while_loading_fail_the_listing() {
    let m = Managers::from_candidates(Vec::new(), vec!["managers/x.yaml: bad".into()]);
    let e = m.steps(StepKind::Deploy, &state()).unwrap_err();
    assert_eq!(e.details, "managers/x.yaml: bad");
}

#[test]
fn duplicate_steps_are_merged_as_ipa_merges_them() {
    // Not reachable through `from_candidates` (it refuses a clash of equal
    // support), so built directly: IPA keeps the highest support, then the highest
    // priority, then the manager whose name sorts first.
    let m = Managers {
        list: vec![
            listed("Zed", SUPPORT_SERVICE_PROVIDER, &[("same", 10), ("tie", 5)]),
            listed("Alpha", SUPPORT_SERVICE_PROVIDER, &[("tie", 5)]),
            listed("Low", SUPPORT_MAINLINE, &[("same", 90), ("prio", 1)]),
            listed("High", SUPPORT_MAINLINE, &[("prio", 2)]),
        ],
        refused: Vec::new(),
    };
    let clean = m.steps(StepKind::Clean, &state()).unwrap();
    assert_eq!(names(&clean, "Zed"), ["same"]);
    assert_eq!(names(&clean, "Alpha"), ["tie"]);
    assert_eq!(names(&clean, "High"), ["prio"]);
    assert!(clean.get("Low").is_none(), "{clean}");
}

#[tokio::test]
async fn a_step_runs_on_the_first_manager_that_has_it_in_that_phase() {
    let m = Managers::from_candidates(
        vec![listed(
            "Vendor",
            SUPPORT_SERVICE_PROVIDER,
            &[("vendor_step", 0)],
        )],
        Vec::new(),
    );
    let ctx = Context::default();
    let call = || RawCall {
        node: None,
        ports: Default::default(),
        args: Map::new(),
    };
    let run = m
        .prepare("vendor_step", StepKind::Clean, call(), &ctx)
        .expect("found")
        .expect("prepared");
    assert_eq!(run(Arc::new(state())).await.unwrap(), json!("Vendor"));
    assert!(m
        .prepare("vendor_step", StepKind::Deploy, call(), &ctx)
        .is_none());
    assert!(m
        .prepare("erase_devices_metadata", StepKind::Clean, call(), &ctx)
        .is_some());
    assert!(m
        .prepare("nothing", StepKind::Clean, call(), &ctx)
        .is_none());
}
