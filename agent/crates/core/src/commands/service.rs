//! The `service` extension (servicing of deployed nodes, Ironic API ≥ 1.87):
//! `get_service_steps` and `execute_service_step`, IPA's shapes and version
//! check (PROTOCOL.md §1.7, §1.8). The steps are the rows of the step table
//! with a service priority ([`super::steps`]); this module holds the tests
//! of servicing through the command table.

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use crate::commands::dispatch::request::run_named;
    use crate::commands::Outcome;
    use crate::state::AgentState;
    use agent_base::config::Config;

    async fn get_service_steps(s: Arc<AgentState>, params: Value) -> Outcome {
        run_named(s, "service.get_service_steps", params).await
    }

    async fn execute_service_step(s: Arc<AgentState>, params: Value) -> Outcome {
        run_named(s, "service.execute_service_step", params).await
    }

    fn state() -> Arc<AgentState> {
        Arc::new(AgentState::new(Config::default(), None))
    }

    fn done(o: Outcome) -> Value {
        match o {
            Outcome::Done(v) => v,
            other => panic!("not done: {other:?}"),
        }
    }

    #[tokio::test]
    async fn lists_what_ipa_offers_for_servicing_that_this_agent_has() {
        let s = state();
        let v =
            done(get_service_steps(s.clone(), json!({"node": {"uuid": "n9"}, "ports": []})).await);
        assert_eq!(
            v["hardware_manager_version"],
            json!({"generic_hardware_manager": "1.2"})
        );
        let mut names: Vec<&str> = v["service_steps"]["GenericHardwareManager"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s["priority"], 0, "{s}");
                let raid = [
                    "apply_configuration",
                    "create_configuration",
                    "delete_configuration",
                ];
                let interface = if raid.contains(&s["step"].as_str().unwrap()) {
                    "raid"
                } else {
                    "deploy"
                };
                assert_eq!(s["interface"], interface, "{s}");
                s["step"].as_str().unwrap()
            })
            .collect();
        names.sort_unstable();
        // Not burnin_disk (IPA: destructive to a deployed node), nor the
        // erase steps; the RAID steps, as IPA offers them.
        assert_eq!(
            names,
            [
                "apply_configuration",
                "burnin_cpu",
                "burnin_gpu",
                "burnin_memory",
                "burnin_network",
                "create_configuration",
                "delete_configuration",
                "inject_files",
                "write_image"
            ]
        );
        assert_eq!(s.node().unwrap().uuid(), Some("n9"), "the node is cached");
    }

    #[tokio::test]
    async fn runs_a_step_echoing_it_and_checks_the_versions() {
        let s = state();
        let step = json!({"interface": "deploy", "step": "burnin_cpu", "priority": 0,
                          "args": {}});
        let node = json!({"uuid": "n", "driver_info": {"agent_burnin_cpu_cpu": 1, "agent_burnin_cpu_timeout": "0.2"}});
        let v = done(
            execute_service_step(
                s.clone(),
                json!({"step": step, "node": node, "ports": [],
                       "service_version": {"generic_hardware_manager": "1.2"}}),
            )
            .await,
        );
        assert_eq!(v["service_step"], step);
        assert!(
            v["service_result"]["workers"][0]["rounds"]
                .as_u64()
                .unwrap()
                > 0,
            "{v}"
        );

        let o = execute_service_step(
            s.clone(),
            json!({"step": step, "node": node, "ports": [],
                   "service_version": {"generic_hardware_manager": "1.1"}}),
        )
        .await;
        assert!(matches!(o, Outcome::VersionMismatch(_)), "{o:?}");

        // A clean-only step is no service step.
        let o = execute_service_step(
            s.clone(),
            json!({"step": {"interface": "deploy", "step": "burnin_disk"}, "node": node, "ports": []}),
        )
        .await;
        let Outcome::Failed(e) = o else {
            panic!("{o:?}")
        };
        assert_eq!(
            e.kind,
            crate::commands::ErrorKind::IncompatibleHardwareMethod
        );

        // A failing step is a ServicingError naming the step.
        let o = execute_service_step(
            s,
            json!({"step": {"interface": "deploy", "step": "burnin_memory"}, "node": {"driver_info": {
                "agent_burnin_vm_vm": 4, "agent_burnin_vm_vm-bytes": "16b"}}, "ports": []}),
        )
        .await;
        let Outcome::Failed(e) = o else {
            panic!("{o:?}")
        };
        assert_eq!(e.kind.type_name(), "ServicingError");
        assert!(
            e.details
                .starts_with("Error performing service step burnin_memory: memory: 16 bytes"),
            "{e:?}"
        );
    }
}
