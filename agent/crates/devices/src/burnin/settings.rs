//! IPA's `driver_info` knobs of the burn-in steps read into what the
//! workloads take: the generic readers ([`knob`], [`duration_knob`],
//! [`count_knob`]) with IPA's names and defaults, `burnin_gpu`'s [`gpu`]
//! settings, and the network burn-in's partner ([`network_partner`]) with
//! host mode's loopback limit ([`host_mode_limits`]). A bad value is a
//! [`BurninError::Knob`] naming the knob.

use std::time::Duration;

use ironic_types::node::DriverInfo;
use serde_json::Value;

use super::{knobs, network, BurninError};

/// IPA's default for every stress-ng timeout: a day.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(86400);

/// `driver_info[key]`, if set (and not `null`).
pub fn knob<'a>(info: &'a DriverInfo, key: &str) -> Option<&'a Value> {
    info.burnin(key)
}

/// The duration `key`, `default` when unset.
pub fn duration_knob(
    info: &DriverInfo,
    key: &str,
    default: Duration,
) -> Result<Duration, BurninError> {
    knob(info, key).map_or(Ok(default), |v| knobs::duration(key, v))
}

/// The count `key`, `default` when unset.
pub fn count_knob(info: &DriverInfo, key: &str, default: u64) -> Result<u64, BurninError> {
    knob(info, key).map_or(Ok(default), |v| knobs::count(key, v))
}

/// `burnin_gpu`'s knobs (`gpu-burn`'s) from `driver_info`, with IPA's defaults.
pub fn gpu(info: &DriverInfo) -> Result<super::gpu::GpuBurn, BurninError> {
    let install_dir = match knob(info, "agent_burnin_gpu_install_dir") {
        None => "/opt/gpu-burn".into(),
        Some(Value::String(d)) if d.starts_with('/') => d.into(),
        Some(v) => {
            return Err(BurninError::Knob {
                key: "agent_burnin_gpu_install_dir".into(),
                reason: format!("{v} is not an absolute path"),
            })
        }
    };
    let memory = match knob(info, "agent_burnin_gpu_memory") {
        None => "95%".to_string(),
        Some(v) => {
            let t = match v {
                Value::String(t) => t.trim().to_string(),
                other => other.to_string(),
            };
            let digits = t.strip_suffix('%').unwrap_or(&t);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BurninError::Knob {
                    key: "agent_burnin_gpu_memory".into(),
                    reason: format!("{v} is neither N% nor a number of MB"),
                });
            }
            t
        }
    };
    Ok(super::gpu::GpuBurn {
        install_dir,
        memory,
        timeout_secs: count_knob(info, "agent_burnin_gpu_timeout", DEFAULT_TIMEOUT.as_secs())?,
        count: count_knob(info, "agent_burnin_gpu_count", 0)?,
    })
}

/// How the network burn-in finds its partner, from `driver_info`.
#[derive(Debug)]
pub enum Partner {
    /// `agent_burnin_fio_network_config` (`role`, `partner`).
    Static(network::Plan),
    /// Through a tooz backend (`agent_burnin_fio_network_pairing_*`).
    Dynamic {
        /// `agent_burnin_fio_network_pairing_backend_url`.
        url: String,
        /// `agent_burnin_fio_network_pairing_group_name`.
        group: String,
        /// `agent_burnin_fio_network_runtime`.
        runtime: Duration,
        /// `agent_burnin_fio_network_pairing_timeout`.
        pairing_timeout: Duration,
    },
}

/// The network burn-in's partner and knobs from `driver_info`: the static
/// `agent_burnin_fio_network_config`, else dynamic pairing through the
/// tooz backend at `agent_burnin_fio_network_pairing_backend_url`.
pub fn network_partner(info: &DriverInfo) -> Result<Partner, BurninError> {
    let runtime = match knob(info, "agent_burnin_fio_network_runtime") {
        Some(v) => Duration::from_secs(knobs::count("agent_burnin_fio_network_runtime", v)?),
        None => Duration::from_secs(21600),
    };
    let pairing_timeout = Duration::from_secs(count_knob(
        info,
        "agent_burnin_fio_network_pairing_timeout",
        900,
    )?);
    let Some(config) = knob(info, "agent_burnin_fio_network_config") else {
        let key = "agent_burnin_fio_network_pairing_backend_url";
        let url = match knob(info, key) {
            None | Some(Value::Null) => {
                return Err(BurninError::Unsupported(format!(
                    "fio (network): dynamic pairing config is missing {key}"
                )))
            }
            Some(Value::String(u)) if !u.trim().is_empty() => u.trim().to_string(),
            Some(other) => {
                return Err(BurninError::Knob {
                    key: key.into(),
                    reason: format!("{other} is not a tooz backend URL"),
                })
            }
        };
        let group_key = "agent_burnin_fio_network_pairing_group_name";
        let group = match knob(info, group_key) {
            None | Some(Value::Null) => "ironic.network-burnin".to_string(),
            Some(Value::String(g)) if !g.is_empty() && !g.contains('/') => g.clone(),
            Some(other) => {
                return Err(BurninError::Knob {
                    key: group_key.into(),
                    reason: format!("{other} is not a group name"),
                })
            }
        };
        return Ok(Partner::Dynamic {
            url,
            group,
            runtime,
            pairing_timeout,
        });
    };
    let key = "agent_burnin_fio_network_config";
    let role = config["role"].as_str().unwrap_or_default();
    let role = network::Role::parse(role).ok_or_else(|| BurninError::Knob {
        key: key.into(),
        reason: format!("fio (network) found an unknown role: {}", config["role"]),
    })?;
    let partner = config["partner"]
        .as_str()
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| BurninError::Knob {
            key: key.into(),
            reason: "fio (network) failed to find partner".into(),
        })?
        .trim()
        .to_string();
    Ok(Partner::Static(network::Plan::ipa(
        role,
        partner,
        runtime,
        pairing_timeout,
    )))
}

/// In host mode this machine is no node: only loopback partners, and the
/// writer listens on loopback only (`own`, our loopback member address
/// when pairing dynamically, else 127.0.0.1).
pub fn host_mode_limits(
    plan: &mut network::Plan,
    own: Option<std::net::IpAddr>,
) -> Result<(), BurninError> {
    let loopback = plan
        .partner
        .parse::<std::net::IpAddr>()
        .is_ok_and(|a| a.is_loopback())
        || plan.partner == "localhost";
    if !loopback {
        return Err(BurninError::Unsupported(format!(
            "host mode: the network burn-in only pairs with a loopback partner, not {}",
            plan.partner
        )));
    }
    plan.listen = own
        .filter(|a| a.is_loopback())
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The `driver_info` of the node `doc`.
    fn info(doc: &Value) -> DriverInfo {
        serde_json::from_value(doc["driver_info"].clone()).unwrap()
    }

    fn gpu(doc: &Value) -> Result<super::super::gpu::GpuBurn, BurninError> {
        super::gpu(&info(doc))
    }

    fn network_partner(doc: &Value) -> Result<Partner, BurninError> {
        super::network_partner(&info(doc))
    }

    #[test]
    fn gpu_knobs_have_ipas_defaults_and_bad_ones_are_named() {
        let d = gpu(&json!({"driver_info": {}})).unwrap();
        assert_eq!(
            d,
            super::super::gpu::GpuBurn {
                install_dir: "/opt/gpu-burn".into(),
                memory: "95%".into(),
                timeout_secs: 86400,
                count: 0,
            }
        );
        let set = gpu(
            &json!({"driver_info": {"agent_burnin_gpu_install_dir": "/srv/gb",
            "agent_burnin_gpu_memory": 2048, "agent_burnin_gpu_timeout": "60",
            "agent_burnin_gpu_count": 8}}),
        )
        .unwrap();
        assert_eq!(
            (
                set.install_dir.to_str(),
                set.memory.as_str(),
                set.timeout_secs,
                set.count
            ),
            (Some("/srv/gb"), "2048", 60, 8)
        );
        for (key, bad) in [
            ("agent_burnin_gpu_memory", json!("most")),
            ("agent_burnin_gpu_install_dir", json!("gpu-burn")),
            ("agent_burnin_gpu_count", json!(-1)),
        ] {
            let e = gpu(&json!({"driver_info": {key: bad}})).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
        }
    }

    #[test]
    fn network_pairing_as_ipa_configures_it() {
        let partner = |di: Value| network_partner(&json!({"driver_info": di}));
        let stat = |di: Value| match partner(di).unwrap() {
            Partner::Static(p) => p,
            Partner::Dynamic { .. } => panic!("dynamic"),
        };
        let p = stat(
            json!({"agent_burnin_fio_network_config": {"role": "reader", "partner": "10.0.0.2"}, "agent_burnin_fio_network_runtime": 30}),
        );
        assert_eq!(
            (p.role, p.partner.as_str(), p.port, p.streams),
            (network::Role::Reader, "10.0.0.2", 9000, 16)
        );
        assert_eq!(p.runtime, Duration::from_secs(30));
        let e = partner(json!({})).err().unwrap().to_string();
        assert!(
            e.contains("agent_burnin_fio_network_pairing_backend_url"),
            "{e}"
        );
        match partner(
            json!({"agent_burnin_fio_network_pairing_backend_url": "etcd3+http://x:2379",
                             "agent_burnin_fio_network_pairing_timeout": 60}),
        )
        .unwrap()
        {
            Partner::Dynamic {
                url,
                group,
                pairing_timeout,
                ..
            } => {
                assert_eq!(url, "etcd3+http://x:2379");
                assert_eq!(group, "ironic.network-burnin", "IPA's default group");
                assert_eq!(pairing_timeout, Duration::from_secs(60));
            }
            Partner::Static(_) => panic!("static"),
        }
        let e = partner(
            json!({"agent_burnin_fio_network_pairing_backend_url": "etcd3+http://x",
                               "agent_burnin_fio_network_pairing_group_name": "a/b"}),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("not a group name"), "{e}");
        let e =
            partner(json!({"agent_burnin_fio_network_config": {"role": "sender", "partner": "x"}}))
                .err()
                .unwrap()
                .to_string();
        assert!(e.contains("unknown role"), "{e}");
        let mut p = stat(
            json!({"agent_burnin_fio_network_config": {"role": "writer", "partner": "10.0.0.2"}}),
        );
        let e = host_mode_limits(&mut p, None).unwrap_err().to_string();
        assert!(e.contains("loopback"), "{e}");
        let mut p = stat(
            json!({"agent_burnin_fio_network_config": {"role": "writer", "partner": "127.0.0.1"}}),
        );
        host_mode_limits(&mut p, None).unwrap();
        assert_eq!(p.listen, std::net::IpAddr::from([127, 0, 0, 1]));
        host_mode_limits(&mut p, Some("127.0.0.7".parse().unwrap())).unwrap();
        assert_eq!(p.listen, std::net::IpAddr::from([127, 0, 0, 7]));
    }
}
