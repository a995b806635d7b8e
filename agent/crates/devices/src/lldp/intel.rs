//! Intel CNA NICs (X710/XL710 on `i40e`, E810 on `ice`) run an LLDP agent
//! in their firmware that consumes the switch's frames, so the host hears
//! none. Before listening, as IPA 13's `IntelCnaHardwareManager` does, that
//! agent is stopped:
//!
//! 1. through the driver's private flag, the kernel's supported switch
//!    (`ethtool --set-priv-flags IF disable-fw-lldp on` on `i40e`,
//!    `fw-lldp-agent off` on `ice`), which also works under kernel lockdown;
//! 2. else, on `i40e`, IPA's way: `lldp stop` written to each
//!    `/sys/kernel/debug/i40e/<pci>/command` (debugfs; refused under
//!    lockdown).
//!
//! Failures are logged and never stop inspection: the NIC then simply
//! hears nothing, as before.

use std::path::Path;

/// What to do for one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The interface.
    pub name: String,
    /// Its driver (`i40e`, `ice`).
    pub driver: String,
    /// The private flag to set, and the value that stops the agent.
    pub flag: (&'static str, bool),
}

/// The NICs of `interfaces` (name, driver) whose firmware runs an LLDP
/// agent, with the private flag that stops it.
pub fn plan<'a>(interfaces: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Vec<Plan> {
    interfaces
        .into_iter()
        .filter_map(|(name, driver)| {
            let flag = match driver? {
                "i40e" => ("disable-fw-lldp", true),
                "ice" => ("fw-lldp-agent", false),
                _ => return None,
            };
            Some(Plan {
                name: name.to_string(),
                driver: driver?.to_string(),
                flag,
            })
        })
        .collect()
}

/// Stops the firmware LLDP agents of `plans` (see the module docs); `root`
/// is `/` live, a fixture tree in tests (only the debugfs step reads it).
/// Returns one line per NIC saying what was done.
pub fn stop_firmware_agents(root: &Path, plans: &[Plan]) -> Vec<String> {
    let mut out = Vec::new();
    let mut debugfs_done = false;
    for p in plans {
        let (flag, value) = p.flag;
        match super::ethtool::set_private_flag(&p.name, flag, value) {
            Ok(()) => {
                out.push(format!(
                    "{}: firmware LLDP agent stopped ({flag} {})",
                    p.name,
                    on_off(value)
                ));
                continue;
            }
            Err(e) => tracing::debug!(interface = %p.name, "private flag {flag}: {e:#}"),
        }
        if p.driver == "i40e" && !debugfs_done {
            debugfs_done = true;
            out.extend(i40e_debugfs_stop(root));
            continue;
        }
        if p.driver != "i40e" {
            out.push(format!(
                "{}: the firmware LLDP agent could not be stopped (no {flag} private flag); LLDP may hear nothing",
                p.name
            ));
        }
    }
    for line in &out {
        tracing::info!("{line}");
    }
    out
}

fn on_off(v: bool) -> &'static str {
    if v {
        "on"
    } else {
        "off"
    }
}

/// IPA's way: `lldp stop` into every i40e device's debugfs command file.
pub fn i40e_debugfs_stop(root: &Path) -> Vec<String> {
    let dir = root.join("sys/kernel/debug/i40e");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![format!(
            "i40e: {} is missing (debugfs not mounted, or refused under lockdown); the firmware LLDP agent keeps running",
            dir.display()
        )];
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|pci| {
            let cmd = dir.join(&pci).join("command");
            match std::fs::OpenOptions::new()
                .write(true)
                .open(&cmd)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"lldp stop"))
            {
                Ok(()) => format!("i40e {pci}: firmware LLDP agent stopped (debugfs lldp stop)"),
                Err(e) => format!("i40e {pci}: writing lldp stop to {}: {e}", cmd.display()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_cna_nics_are_planned_with_their_flag() {
        let p = plan([
            ("eno1", Some("i40e")),
            ("ens2f0", Some("ice")),
            ("eth0", Some("virtio_net")),
            ("bond0", None),
        ]);
        assert_eq!(
            p,
            [
                Plan {
                    name: "eno1".into(),
                    driver: "i40e".into(),
                    flag: ("disable-fw-lldp", true)
                },
                Plan {
                    name: "ens2f0".into(),
                    driver: "ice".into(),
                    flag: ("fw-lldp-agent", false)
                },
            ]
        );
    }

    #[test]
    fn i40e_debugfs_gets_lldp_stop_for_every_device() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sys/kernel/debug/i40e");
        for pci in ["0000:3b:00.0", "0000:3b:00.1"] {
            std::fs::create_dir_all(dir.join(pci)).unwrap();
            std::fs::write(dir.join(pci).join("command"), "").unwrap();
        }
        // A device whose command file cannot be written is named.
        std::fs::create_dir_all(dir.join("0000:5e:00.0/command")).unwrap();
        // Fixture interfaces have no ethtool: the debugfs way is taken.
        let lines = stop_firmware_agents(root.path(), &plan([("fixture-nic-0", Some("i40e"))]));
        for pci in ["0000:3b:00.0", "0000:3b:00.1"] {
            assert_eq!(
                std::fs::read_to_string(dir.join(pci).join("command")).unwrap(),
                "lldp stop"
            );
        }
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[2].starts_with("i40e 0000:5e:00.0: writing lldp stop"),
            "{lines:?}"
        );
        // No debugfs: said, not fatal.
        let empty = tempfile::tempdir().unwrap();
        let lines = stop_firmware_agents(empty.path(), &plan([("fixture-nic-0", Some("i40e"))]));
        assert!(lines[0].contains("debugfs not mounted"), "{lines:?}");
        // ice has no debugfs fallback: said.
        let lines = stop_firmware_agents(empty.path(), &plan([("fixture-nic-1", Some("ice"))]));
        assert!(
            lines[0].contains("no fw-lldp-agent private flag"),
            "{lines:?}"
        );
    }
}
