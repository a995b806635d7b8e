//! Clean steps that scrub what firmware keeps across reboots:
//! `clean_uefi_nvram` (boot entries whose device path matches IPA's
//! patterns, by default disk and shim/GRUB entries, network boot entries
//! kept) and `erase_pstore` (the kernel's crash store). Outside the ramdisk
//! both are simulated: this machine's NVRAM and pstore are never touched.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::dispatch::step_call::StepCall;
use super::{CommandError, ErrorKind};
use crate::state::AgentState;
use agent_base::config::RunMode;

/// IPA's default `match_patterns` (case-insensitive).
pub(crate) const DEFAULT_NVRAM_PATTERNS: [&str; 3] = [r"^HD\(", r"shim.*\.efi", r"grub.*\.efi"];

/// `clean_uefi_nvram`'s arguments.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CleanNvramArgs {
    #[serde(default)]
    match_patterns: Option<Value>,
}

/// The patterns, compiled; IPA's message when they are not a list of
/// valid regular expressions.
fn patterns(raw: Option<&Value>) -> Result<Vec<regex::Regex>, CommandError> {
    let strings: Vec<String> = match raw {
        None | Some(Value::Null) => DEFAULT_NVRAM_PATTERNS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        Some(v) => {
            let bad = || {
                CommandError::new(
                    ErrorKind::InvalidCommandParams,
                    format!("The match_patterns must be a list of strings: {v}"),
                )
            };
            v.as_array()
                .ok_or_else(bad)?
                .iter()
                .map(|p| p.as_str().map(String::from).ok_or_else(bad))
                .collect::<Result<_, _>>()?
        }
    };
    strings
        .iter()
        .map(|p| {
            regex::RegexBuilder::new(p)
                .case_insensitive(true)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| {
                    CommandError::new(
                        ErrorKind::InvalidCommandParams,
                        format!("The match_patterns must be a list of strings: {p:?} is not a valid regular expression: {e}"),
                    )
                })
        })
        .collect()
}

fn failed(what: impl std::fmt::Display) -> CommandError {
    CommandError::new(ErrorKind::CommandExecution, what.to_string())
}

/// The `clean_uefi_nvram` step.
pub(crate) async fn clean_uefi_nvram_step(
    state: Arc<AgentState>,
    call: StepCall<CleanNvramArgs>,
) -> Result<Value, CommandError> {
    let args = call.args;
    let patterns = patterns(args.match_patterns.as_ref())?;
    if state.config.mode == RunMode::Host {
        tracing::warn!("host mode: this machine's UEFI boot entries are not touched (clean_uefi_nvram simulated)");
        return Ok(Value::Null);
    }
    let root = Path::new(agent_contents::uefi::efivars::EFIVARS);
    if !root.is_dir() {
        return Err(failed(
            "the ramdisk did not boot in UEFI mode (no efivarfs): no UEFI NVRAM to clean",
        ));
    }
    let vars = agent_contents::uefi::efivars::EfiVars::new(root);
    let removed = tokio::task::spawn_blocking(move || {
        agent_contents::uefi::efivars::clean_boot_records(&vars, |path| {
            patterns.iter().any(|p| p.is_match(path))
        })
    })
    .await
    .map_err(failed)?
    .map_err(|e| failed(format!("removing UEFI boot entries: {e}")))?;
    for r in &removed {
        tracing::info!(number = r.number, description = %r.description, path = %r.path, "UEFI boot entry removed");
    }
    Ok(json!({"removed": removed.iter().map(|r| json!({
        "number": format!("Boot{:04X}", r.number),
        "description": r.description,
        "path": r.path,
    })).collect::<Vec<_>>()}))
}

/// The `erase_pstore` step: the pstore mount (mounted at its usual place
/// first when nothing has mounted it), emptied.
pub(crate) async fn erase_pstore_step(
    state: Arc<AgentState>,
    _call: StepCall,
) -> Result<Value, CommandError> {
    if state.config.mode == RunMode::Host {
        tracing::warn!("host mode: this machine's pstore is not touched (erase_pstore simulated)");
        return Ok(Value::Null);
    }
    tokio::task::spawn_blocking(|| {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let dir = match agent_devices::pstore::mount_point(&mounts) {
            Some(d) => d,
            None => {
                let d = Path::new(agent_devices::pstore::DEFAULT_MOUNT);
                if !d.is_dir() {
                    tracing::info!("no pstore in this kernel: nothing to erase");
                    return Ok(json!({"removed": []}));
                }
                nix::mount::mount(
                    Some("pstore"),
                    d,
                    Some("pstore"),
                    nix::mount::MsFlags::MS_NOSUID
                        | nix::mount::MsFlags::MS_NODEV
                        | nix::mount::MsFlags::MS_NOEXEC,
                    None::<&str>,
                )
                .map_err(|e| failed(format!("mounting pstore at {}: {e}", d.display())))?;
                d.to_path_buf()
            }
        };
        let removed = agent_devices::pstore::erase(&dir)
            .map_err(|e| failed(format!("erasing pstore in {}: {e}", dir.display())))?;
        tracing::info!(?removed, "pstore erased");
        Ok(json!({"removed": removed}))
    })
    .await
    .map_err(failed)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_patterns_match_disk_and_loader_entries_not_network_ones() {
        let p = patterns(None).unwrap();
        let m = |path: &str| p.iter().any(|r| r.is_match(path));
        assert!(m(
            r"HD(1,GPT,12345678-9abc-def0-1122-334455667788,0x800,0x32000)/File(\EFI\debian\shimx64.efi)"
        ));
        assert!(m(
            r"PciRoot(0x0)/Pci(0x1,0x1)/Ata(0,0,0)/HD(1,MBR)/File(\EFI\BOOT\GRUBX64.EFI)"
        ));
        assert!(!m(r"PciRoot(0x0)/Pci(0x2,0x0)/MAC(525400123456,0x1)"));
        assert!(!m(r"PciRoot(0x0)/Pci(0x1,0x1)/Ata(0,0,0)"));
    }

    #[test]
    fn patterns_must_be_a_list_of_valid_regular_expressions() {
        for bad in [json!("HD"), json!([1]), json!(["("]), json!({"a": 1})] {
            let e = patterns(Some(&bad)).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidCommandParams, "{bad}");
            assert!(
                e.details.contains("must be a list of strings"),
                "{bad}: {}",
                e.details
            );
        }
        assert_eq!(patterns(Some(&json!(["^HD\\("]))).unwrap().len(), 1);
        assert_eq!(patterns(Some(&Value::Null)).unwrap().len(), 3);
    }
}
