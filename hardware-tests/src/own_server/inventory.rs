//! What inspection found, as the demo prints it: a few lines about the
//! machine from the inventory Ironic stored, and the disk the agent chose
//! to write (the one `--confirm-disk` must name).

use serde_json::Value;

/// The disk the agent would write: the inventory's root-disk choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenDisk {
    /// `/dev/vda`.
    pub name: String,
    /// Its serial (empty when the disk reports none).
    pub serial: String,
    /// Bytes.
    pub size: u64,
}

impl std::fmt::Display for ChosenDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({:.1} GiB, serial {})",
            self.name,
            self.size as f64 / (1u64 << 30) as f64,
            if self.serial.is_empty() {
                "none"
            } else {
                &self.serial
            }
        )
    }
}

/// The agent's root-disk choice from Ironic's stored `plugin_data`.
pub fn chosen_disk(root_disk: &Value) -> Option<ChosenDisk> {
    Some(ChosenDisk {
        name: root_disk["name"].as_str()?.to_string(),
        serial: root_disk["serial"].as_str().unwrap_or_default().to_string(),
        size: root_disk["size"].as_u64().unwrap_or(0),
    })
}

/// How to protect every disk of `inv` but `keep` from cleaning and the
/// deploy: `skip_block_devices` entries, by serial (by name for a disk
/// without one).
pub fn protect_others(inv: &Value, keep: &ChosenDisk) -> Vec<Value> {
    inv["disks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["name"].as_str() != Some(&keep.name))
        .map(|d| match d["serial"].as_str().filter(|s| !s.is_empty()) {
            Some(s) => serde_json::json!({"serial": s}),
            None => serde_json::json!({"name": d["name"]}),
        })
        .collect()
}

/// A few lines about the machine from an inspection inventory and the
/// agent's root disk choice.
pub fn inventory_lines(inv: &Value, root_disk: &Value) -> Vec<String> {
    let gib = |v: &Value| v.as_u64().unwrap_or(0) as f64 / (1u64 << 30) as f64;
    let sv = &inv["system_vendor"];
    let cpu = &inv["cpu"];
    let mut lines = vec![
        format!(
            "  system    {} {} (serial {})",
            sv["manufacturer"].as_str().unwrap_or("?"),
            sv["product_name"].as_str().unwrap_or("?"),
            sv["serial_number"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("-")
        ),
        format!(
            "  cpu       {} × {} ({})",
            cpu["count"],
            cpu["model_name"].as_str().unwrap_or("?"),
            cpu["architecture"].as_str().unwrap_or("?")
        ),
        format!("  memory    {} MiB", inv["memory"]["physical_mb"]),
    ];
    for d in inv["disks"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  disk      {} {:.1} GiB serial {} rotational {}",
            d["name"].as_str().unwrap_or("?"),
            gib(&d["size"]),
            d["serial"].as_str().unwrap_or("-"),
            d["rotational"]
        ));
    }
    for i in inv["interfaces"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  nic       {} {} {}",
            i["name"].as_str().unwrap_or("?"),
            i["mac_address"].as_str().unwrap_or("?"),
            i["ipv4_address"].as_str().unwrap_or("-")
        ));
    }
    lines.push(format!(
        "  boot      {} from {}",
        inv["boot"]["current_boot_mode"].as_str().unwrap_or("?"),
        inv["boot"]["pxe_interface"].as_str().unwrap_or("?")
    ));
    if let Some(root) = root_disk["name"].as_str() {
        lines.push(format!(
            "  root disk {root} (the agent's choice without hints)"
        ));
    }
    lines
}

/// The agent's boot on the server, phase by phase, as it reported them
/// with the inspection data (`plugin_data.boot_phases`: seconds since the
/// kernel started; the firmware's and the ISO's share come before).
pub fn boot_phases_line(phases: &Value) -> String {
    let parts: Vec<String> = phases
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(format!(
                "{} {:.1} s",
                p["phase"].as_str()?,
                p["seconds"].as_f64()?
            ))
        })
        .collect();
    if parts.is_empty() {
        return "boot phases: the agent reported none".into();
    }
    format!(
        "boot phases (seconds since the server's kernel started): {}",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn boot_phases_in_one_line() {
        let line = boot_phases_line(&json!([{"phase": "init", "seconds": 2.91},
            {"phase": "network", "seconds": 7.04}, {"phase": 3}]));
        assert_eq!(
            line,
            "boot phases (seconds since the server's kernel started): init 2.9 s, network 7.0 s"
        );
        assert_eq!(
            boot_phases_line(&Value::Null),
            "boot phases: the agent reported none"
        );
    }

    #[test]
    fn every_other_disk_is_protected() {
        let inv = json!({"disks": [
            {"name": "/dev/vda", "serial": "a", "size": 5u64 << 30},
            {"name": "/dev/sda", "serial": "b"},
            {"name": "/dev/sdb", "serial": ""},
        ]});
        let keep =
            chosen_disk(&json!({"name": "/dev/vda", "serial": "a", "size": 5u64 << 30})).unwrap();
        assert_eq!(keep.to_string(), "/dev/vda (5.0 GiB, serial a)");
        assert_eq!(
            protect_others(&inv, &keep),
            vec![json!({"serial": "b"}), json!({"name": "/dev/sdb"})]
        );
        assert_eq!(chosen_disk(&json!({})), None);
    }
}
