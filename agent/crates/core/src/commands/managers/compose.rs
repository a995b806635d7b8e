//! Which managers load, in IPA 13's order, and which are refused: the
//! generic one first, the built-in container and NIC firmware managers,
//! then the operator's; a manager whose step would shadow the step of a
//! manager of the same or higher support, or whose name is taken, is
//! refused with the reason (`Refusal`), and every `get_*_steps` then fails
//! naming it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use super::{container, exec, generic, nvidia, Manager, Managers, RESERVED, SUPPORT_NONE};
use crate::commands::dispatch::context::ManagerSources;
use agent_base::config::RunMode;

impl Managers {
    /// The managers loaded from `sources`: the generic one, then those the
    /// agent's configuration and the conductor add.
    pub fn load(sources: &ManagerSources) -> Self {
        let mut exec_managers: Vec<Arc<dyn Manager>> = Vec::new();
        let mut refused = Vec::new();
        match exec::load(&sources.config) {
            Ok(found) => exec_managers.extend(
                found
                    .into_iter()
                    .map(|m| Arc::new(exec::ExecAdapter::new(m)) as Arc<dyn Manager>),
            ),
            Err(e) => refused.push(e.to_string()),
        }
        // IPA's NIC firmware manager: where a Mellanox NIC is, and never
        // on a host (`agent serve` does not flash the machine it runs on).
        let nvidia = if sources.config.mode == RunMode::Host {
            nvidia::NvidiaNicManager::off()
        } else {
            nvidia::NvidiaNicManager::detect(
                Path::new("/sys"),
                agent_contents::nicfw::tools::agent_path(),
            )
        };
        // The container manager is built in (IPA's), so it comes first. A
        // steps-file step may not take a step name of the generic manager,
        // of the NIC firmware one, of an operator's manager, nor one of
        // Ironic's own.
        let mut reserved: BTreeSet<String> = generic::Generic.step_names().into_iter().collect();
        reserved.extend(nvidia.step_names());
        reserved.extend(RESERVED.iter().map(|r| r.to_string()));
        reserved.extend(exec_managers.iter().flat_map(|m| m.step_names()));
        let mut candidates: Vec<Arc<dyn Manager>> = vec![
            Arc::new(container::ContainerManager::new(sources, reserved)),
            Arc::new(nvidia),
        ];
        candidates.extend(exec_managers);
        Self::from_candidates(candidates, refused)
    }

    /// The generic manager plus `candidates` (in load order), each refused
    /// when one of its step names is reserved or already another's;
    /// `refused` carries refusals found while loading.
    pub fn from_candidates(candidates: Vec<Arc<dyn Manager>>, mut refused: Vec<String>) -> Self {
        let generic: Arc<dyn Manager> = Arc::new(generic::Generic);
        let mut taken: BTreeMap<String, Owner> = generic
            .step_names()
            .into_iter()
            .map(|s| {
                let owner = Owner {
                    name: generic.name().to_string(),
                    support: generic.support(),
                };
                (s, owner)
            })
            .collect();
        for r in RESERVED {
            let owner = Owner {
                name: "Ironic itself".into(),
                support: u32::MAX,
            };
            taken.insert(r.to_string(), owner);
        }
        let mut names: BTreeSet<String> = BTreeSet::from([generic.name().to_string()]);
        let mut list = vec![generic];
        for m in candidates {
            if m.support() == SUPPORT_NONE {
                tracing::debug!(
                    manager = m.name(),
                    "hardware manager reports no support; not loaded"
                );
                continue;
            }
            match check_names(m.as_ref(), &taken, &names) {
                Ok(()) => {
                    for s in m.step_names() {
                        let owner = Owner {
                            name: m.name().to_string(),
                            support: m.support(),
                        };
                        if let Some(old) = taken.insert(s.clone(), owner) {
                            tracing::info!(
                                step = s,
                                manager = m.name(),
                                replaced = old.name,
                                "a step replaces the one of a manager of lower support"
                            );
                        }
                    }
                    names.insert(m.name().to_string());
                    tracing::debug!(
                        manager = m.name(),
                        origin = m.origin(),
                        support = m.support(),
                        "hardware manager loaded"
                    );
                    list.push(m);
                }
                Err(e) => refused.push(e.to_string()),
            }
        }
        // Stable: equal support keeps load order (the generic one first).
        list.sort_by_key(|m| Reverse(m.support()));
        Managers { list, refused }
    }
}

/// The manager that has a step name so far.
#[derive(Debug, Clone)]
struct Owner {
    name: String,
    support: u32,
}

/// Whether `m` may load beside the managers already loaded: its name is
/// new, and each of its steps either takes a new name or replaces the step
/// of a manager of lower support in `taken` (step → manager).
fn check_names(
    m: &dyn Manager,
    taken: &BTreeMap<String, Owner>,
    names: &BTreeSet<String>,
) -> Result<(), Refusal> {
    let name = m.name().to_string();
    let origin = m.origin();
    if names.contains(&name) {
        return Err(Refusal::SameName { name, origin });
    }
    for step in m.step_names() {
        if let Some(owner) = taken.get(&step).filter(|o| o.support >= m.support()) {
            return Err(Refusal::Shadows {
                name,
                origin,
                step,
                support: m.support(),
                owner: owner.name.clone(),
                owner_support: owner.support,
            });
        }
    }
    Ok(())
}

/// Why a manager was refused at load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Another manager has its name.
    #[error(
        "hardware manager {name:?} ({origin}) is refused: a manager of that name is already loaded"
    )]
    SameName {
        /// The manager.
        name: String,
        /// Where it came from.
        origin: String,
    },
    /// One of its steps has the name of a step of a manager of the same
    /// or higher support.
    #[error("hardware manager {name:?} ({origin}) is refused: its step {step:?} would shadow the step of that name of {owner}, whose support ({}) is not lower than its own ({support}); rename the step, or raise the manager's support to replace it", support_text(*owner_support))]
    Shadows {
        /// The manager.
        name: String,
        /// Where it came from.
        origin: String,
        /// The step.
        step: String,
        /// The manager's support.
        support: u32,
        /// The manager that has it already.
        owner: String,
        /// That manager's support.
        owner_support: u32,
    },
}

/// A support level as the refusal names it (Ironic's own names are not a
/// level).
fn support_text(support: u32) -> String {
    if support == u32::MAX {
        "reserved".into()
    } else {
        support.to_string()
    }
}
