//! The burn-in steps `burnin_cpu`, `burnin_memory`, `burnin_disk`,
//! `burnin_gpu` and `burnin_network` (clean steps, priority 0; all but the disk one are also
//! service steps, as in IPA): IPA's `driver_info` knobs read with IPA's
//! names and defaults ([`agent_devices::burnin::settings`]), the workloads of
//! [`agent_devices::burnin`] run on a
//! blocking thread, stopped by the operation's abort flag, and their report
//! returned as the step's result (and logged). PROTOCOL.md §7.7.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::RunMode;
use agent_devices::burnin::disk_health::{nvme_health_after, nvme_health_before, smart_self_tests};
use agent_devices::burnin::settings::{
    count_knob, duration_knob, host_mode_limits, knob, network_partner, Partner, DEFAULT_TIMEOUT,
};
use agent_devices::burnin::{self, knobs, network, pairing, BurninError, Stop};
use agent_devices::disk::WritePolicy;
use ironic_types::node::DriverInfo;

/// Memory left to the agent and the kernel by `burnin_memory` in the ramdisk.
const MEMORY_RESERVE: u64 = 64 << 20;
/// The share of available memory `burnin_memory` may take in host mode
/// (this machine is not a node being burnt in).
const HOST_MEMORY_SHARE: f64 = 0.25;

fn to_command_error(e: BurninError) -> CommandError {
    let kind = match e {
        BurninError::Knob { .. } => ErrorKind::InvalidCommandParams,
        BurninError::Unsupported(_) => ErrorKind::IncompatibleHardwareMethod,
        BurninError::Failed { .. } | BurninError::Aborted(_) => ErrorKind::CommandExecution,
    };
    CommandError::new(kind, e.to_string())
}

/// Runs `work` on a blocking thread with the operation's abort flag.
async fn blocking<T: Send + 'static>(
    state: &AgentState,
    work: impl FnOnce(&AtomicBool) -> Result<T, BurninError> + Send + 'static,
) -> Result<T, CommandError> {
    let cancel = state.abort_flag();
    tokio::task::spawn_blocking(move || work(&cancel))
        .await
        .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?
        .map_err(to_command_error)
}

/// The report as the step's result; in the ramdisk also written to the
/// `*_outputfile` the node names (IPA's tools write their logs there).
fn finish<R: Serialize>(state: &AgentState, info: &DriverInfo, key: &str, report: &R) -> Value {
    let v = serde_json::to_value(report).unwrap_or(Value::Null);
    tracing::info!(result = %v, "burn-in report");
    if let Some(path) = knob(info, key).and_then(Value::as_str) {
        match state.config.mode {
            RunMode::Ramdisk | RunMode::Container => {
                if let Err(e) = std::fs::write(path, format!("{v:#}\n")) {
                    tracing::warn!(%key, path, "cannot write the burn-in report: {e}");
                }
            }
            RunMode::Host => tracing::info!(
                %key,
                path,
                "host mode: the report is not written to this machine's files"
            ),
        }
    }
    v
}

/// `burnin_cpu`: `agent_burnin_cpu_cpu` workers (0: one per CPU) for
/// `agent_burnin_cpu_timeout`.
pub(crate) async fn burnin_cpu_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let info = call.node_or_empty().driver_info();
    let workers = count_knob(info, "agent_burnin_cpu_cpu", 0).map_err(to_command_error)?;
    let timeout = duration_knob(info, "agent_burnin_cpu_timeout", DEFAULT_TIMEOUT)
        .map_err(to_command_error)?;
    let workers = usize::try_from(workers).unwrap_or(usize::MAX).min(4096);
    let report = blocking(&state, move |cancel| {
        burnin::cpu::run(
            workers,
            Stop {
                deadline: Some(Instant::now() + timeout),
                cancel,
            },
        )
    })
    .await?;
    Ok(finish(&state, info, "agent_burnin_cpu_outputfile", &report))
}

/// `burnin_gpu`: NVIDIA's `gpu-burn` from `agent_burnin_gpu_install_dir`
/// (`/opt/gpu-burn`), the GPUs counted first when `agent_burnin_gpu_count`
/// is set, then burnt with `agent_burnin_gpu_memory` (`95%`) for
/// `agent_burnin_gpu_timeout` seconds (86400), as IPA 13.
pub(crate) async fn burnin_gpu_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let info = call.node_or_empty().driver_info();
    let cfg = burnin::settings::gpu(info).map_err(to_command_error)?;
    let report = blocking(&state, move |cancel| burnin::gpu::run(&cfg, cancel)).await?;
    Ok(finish(&state, info, "agent_burnin_gpu_outputfile", &report))
}

/// How many bytes `burnin_memory` tests: `agent_burnin_vm_vm-bytes` (IPA's
/// default `98%`) of what is available, less a reserve in the ramdisk, at
/// most a quarter of it in host mode.
fn memory_bytes(info: &DriverInfo, mode: RunMode, available: u64) -> Result<u64, BurninError> {
    let key = "agent_burnin_vm_vm-bytes";
    let asked = match knob(info, key) {
        Some(v) => knobs::bytes(key, v, available)?,
        None => knobs::bytes(key, &Value::from("98%"), available)?,
    };
    let limit = match mode {
        RunMode::Ramdisk | RunMode::Container => available.saturating_sub(MEMORY_RESERVE),
        RunMode::Host => (available as f64 * HOST_MEMORY_SHARE) as u64,
    };
    if asked > limit {
        tracing::warn!(
            asked,
            limit,
            available,
            "burnin_memory: testing {limit} bytes, not {asked}"
        );
    }
    Ok(asked.min(limit))
}

/// `burnin_memory`: `agent_burnin_vm_vm` workers (0: one per CPU) over
/// `agent_burnin_vm_vm-bytes` for `agent_burnin_vm_timeout`.
pub(crate) async fn burnin_memory_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let info = call.node_or_empty().driver_info();
    let workers = count_knob(info, "agent_burnin_vm_vm", 0).map_err(to_command_error)?;
    let timeout = duration_knob(info, "agent_burnin_vm_timeout", DEFAULT_TIMEOUT)
        .map_err(to_command_error)?;
    let available =
        burnin::memory::available_bytes(Path::new("/proc")).map_err(to_command_error)?;
    let bytes = memory_bytes(info, state.config.mode, available).map_err(to_command_error)?;
    let workers = match usize::try_from(workers).unwrap_or(usize::MAX).min(4096) {
        0 => burnin::cpu::usable_cpus().len().max(1),
        n => n,
    };
    let report = blocking(&state, move |cancel| {
        burnin::memory::run(
            workers,
            bytes,
            Stop {
                deadline: Some(Instant::now() + timeout),
                cancel,
            },
        )
    })
    .await?;
    Ok(finish(&state, info, "agent_burnin_vm_outputfile", &report))
}

/// `burnin_disk`: every disk the erase steps may touch (less the node's
/// `skip_block_devices`), `agent_burnin_fio_disk_loops` passes (4), or
/// passes for `agent_burnin_fio_disk_runtime` seconds when that is not 0.
pub(crate) async fn burnin_disk_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let info = call.node_or_empty().driver_info();
    let loops = count_knob(info, "agent_burnin_fio_disk_loops", 4).map_err(to_command_error)?;
    let runtime = count_knob(info, "agent_burnin_fio_disk_runtime", 0).map_err(to_command_error)?;
    let smart_test = knob(info, "agent_burnin_fio_disk_smart_test")
        .is_some_and(|v| v.as_bool() == Some(true) || v.as_str() == Some("true"));
    let plan = burnin::disk::Plan {
        loops,
        wipe_special: super::erase::wipe_special(&state, call.node_or_empty()),
    };
    let policy = WritePolicy::from_config(&state.config);
    let skip = call
        .skip_list()
        .map_err(|e| CommandError::new(ErrorKind::CommandExecution, e.to_string()))?;
    let disks = super::erase::disks(&policy, &skip)
        .map_err(|e| CommandError::from_anyhow(ErrorKind::CommandExecution, &e))?;
    let report = blocking(&state, move |cancel| {
        let deadline = (runtime > 0).then(|| Instant::now() + Duration::from_secs(runtime));
        let (nvme, others): (Vec<_>, Vec<_>) = disks
            .iter()
            .cloned()
            .partition(|d| smart_test && burnin::nvme_health::is_nvme(d));
        let before = nvme_health_before(&nvme)?;
        let report = burnin::disk::run(&disks, &policy, plan, Stop { deadline, cancel })?;
        let smart = smart_test.then(|| smart_self_tests(&others, cancel));
        if let Some(s) = &smart {
            if !s.failed.is_empty() {
                let list: Vec<String> =
                    s.failed.iter().map(|(d, why)| format!("{d}: {why}")).collect();
                return Err(BurninError::failed(
                    "SMART self-test",
                    format!("failed on {}", list.join("; ")),
                ));
            }
        }
        let health = nvme_health_after(&nvme, before)?;
        let report = serde_json::to_value(&report).unwrap_or(Value::Null);
        Ok(match smart {
            // The report alone, as without the knob.
            None => report,
            Some(s) => serde_json::json!({"disks": report, "smart": {
                "passed": s.passed,
                "skipped": s.skipped.iter().map(|(d, why)| format!("{d}: {why}")).collect::<Vec<_>>(),
                "nvme_health": health,
            }}),
        })
    })
    .await?;
    Ok(finish(
        &state,
        info,
        "agent_burnin_fio_disk_outputfile",
        &report,
    ))
}

/// Our member id for dynamic pairing: the address in our callback URL,
/// which the partner can reach without DNS.
fn member_address(state: &AgentState) -> Option<String> {
    let url = state.session().callback_url?;
    let host = url.split_once("://")?.1.split('/').next()?;
    let host = match host.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => h,
        _ => host,
    };
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .filter(|h| !h.is_empty())
}

/// The plan: the static one, or the partner found through the backend.
async fn network_plan(
    state: &AgentState,
    info: &DriverInfo,
) -> Result<network::Plan, CommandError> {
    let mode = state.config.mode;
    let (mut plan, own) = match network_partner(info).map_err(to_command_error)? {
        Partner::Static(plan) => (plan, None),
        Partner::Dynamic {
            url,
            group,
            runtime,
            pairing_timeout,
        } => {
            let me = member_address(state).ok_or_else(|| {
                to_command_error(BurninError::Unsupported(
                    "fio (network): dynamic pairing needs this agent's address, and it has sent no heartbeat yet".into(),
                ))
            })?;
            let client = agent_base::tls::http_client(
                state.config.insecure,
                state.config.cafile.as_deref(),
                Duration::from_secs(30),
            )
            .map_err(|e| {
                to_command_error(BurninError::failed("network pairing", format!("{e:#}")))
            })?;
            tracing::info!(backend = %url, %group, member = %me, "dynamic pairing for network burn-in");
            let (partner, role) = pairing::find_partner(client, &url, &group, &me, pairing_timeout)
                .await
                .map_err(|e| {
                    to_command_error(BurninError::failed(
                        format!("fio (network) pairing through {url}"),
                        format!("{e:#}"),
                    ))
                })?;
            tracing::info!(%partner, ?role, "fio (network): partner found");
            let own = me.parse::<std::net::IpAddr>().ok();
            (
                network::Plan::ipa(role, partner, runtime, pairing_timeout),
                own,
            )
        }
    };
    if mode == RunMode::Host {
        host_mode_limits(&mut plan, own).map_err(to_command_error)?;
    }
    Ok(plan)
}

/// `burnin_network`: both directions with the partner.
pub(crate) async fn burnin_network_step(
    state: Arc<AgentState>,
    call: StepCall,
) -> Result<Value, CommandError> {
    let info = call.node_or_empty().driver_info();
    let plan = network_plan(&state, info).await?;
    let report = blocking(&state, move |cancel| {
        network::run(
            &plan,
            Stop {
                deadline: None,
                cancel,
            },
        )
    })
    .await?;
    Ok(finish(
        &state,
        info,
        "agent_burnin_fio_network_outputfile",
        &report,
    ))
}

#[cfg(test)]
#[path = "burnin_tests.rs"]
mod tests;
