//! The layout keys of a partition image's `image_info` (PROTOCOL.md §5.1,
//! §5.6) as Ironic 39 sends them (`root_mb`, `swap_mb`, `ephemeral_mb`,
//! `ephemeral_format`, `preserve_ephemeral`, `deploy_boot_mode`,
//! `disk_label`), validated before the disk is touched, and IPA's choice of
//! boot mode and table type from the node (`utils.get_node_boot_mode`,
//! `get_partition_table_type_from_specs`).

use serde_json::{Map, Value};

use ironic_types::node::Node;

/// Largest size accepted for one partition, in MiB (1 EiB).
const MAX_MB: u64 = 1 << 40;

/// Filesystems the ephemeral partition can be made with: vfat natively,
/// the others with the `mkfs.<name>` tool.
pub const EPHEMERAL_FORMATS: &[&str] = &["ext2", "ext3", "ext4", "xfs", "btrfs", "vfat"];

/// Boot mode the disk is laid out for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootMode {
    /// Legacy BIOS.
    Bios,
    /// UEFI.
    Uefi,
}

/// Partition table type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// GUID partition table.
    Gpt,
    /// DOS/MBR (parted's `msdos`).
    Msdos,
}

/// A bad layout key: names the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image_info.{field} {reason}")]
pub struct ParamError {
    /// The key.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn bad(field: &'static str, reason: impl Into<String>) -> ParamError {
    ParamError {
        field,
        reason: reason.into(),
    }
}

/// A partition image's layout request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Root partition size, MiB (> 0).
    pub root_mb: u64,
    /// Swap partition size, MiB (0: none).
    pub swap_mb: u64,
    /// Ephemeral partition size, MiB (0: none).
    pub ephemeral_mb: u64,
    /// Filesystem of the ephemeral partition (set when `ephemeral_mb` > 0).
    pub ephemeral_format: Option<String>,
    /// Keep the existing table and the ephemeral partition's content.
    pub preserve_ephemeral: bool,
    /// `deploy_boot_mode` as the conductor computed it (used when no node
    /// is known).
    pub deploy_boot_mode: Option<BootMode>,
    /// `disk_label` as the conductor computed it (used when no node is
    /// known).
    pub disk_label: Option<Label>,
    /// EFI system partition size, MiB (`[disk_utils]
    /// efi_system_partition_size`; IPA's 550 unless the agent's
    /// configuration says otherwise).
    pub esp_mb: u64,
    /// BIOS boot partition size, MiB (`[disk_utils]
    /// bios_boot_partition_size`; IPA's 1).
    pub bios_boot_mb: u64,
}

/// A size in MiB: a JSON integer or a string of digits; `None` when absent
/// or null.
fn mb(info: &Map<String, Value>, field: &'static str) -> Result<Option<u64>, ParamError> {
    let n = match info.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u64>().ok()
        }
        Some(_) => None,
    };
    match n {
        Some(n) if n <= MAX_MB => Ok(Some(n)),
        Some(_) => Err(bad(field, format!("is larger than {MAX_MB} MiB"))),
        None => Err(bad(
            field,
            format!(
                "must be a non-negative integer (MiB), not {}",
                info.get(field).unwrap_or(&Value::Null)
            ),
        )),
    }
}

/// Parses the layout keys of a partition image's `image_info`.
pub fn from_image_info(info: &Map<String, Value>) -> Result<Params, ParamError> {
    let root_mb = match mb(info, "root_mb")? {
        None => {
            return Err(bad(
                "root_mb",
                "is missing: a partition image needs the root partition's size (MiB)",
            ))
        }
        Some(0) => return Err(bad("root_mb", "must be greater than 0 (MiB)")),
        Some(n) => n,
    };
    let swap_mb = mb(info, "swap_mb")?.unwrap_or(0);
    let ephemeral_mb = mb(info, "ephemeral_mb")?.unwrap_or(0);
    let ephemeral_format = match info.get("ephemeral_format") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if EPHEMERAL_FORMATS.contains(&s.as_str()) => Some(s.clone()),
        Some(other) => {
            return Err(bad(
                "ephemeral_format",
                format!(
                    "must be one of {}, not {other}",
                    EPHEMERAL_FORMATS.join(", ")
                ),
            ))
        }
    };
    if ephemeral_mb > 0 && ephemeral_format.is_none() {
        return Err(bad(
            "ephemeral_format",
            "is missing: an ephemeral partition (ephemeral_mb > 0) needs a filesystem",
        ));
    }
    let preserve_ephemeral = match info.get("preserve_ephemeral") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(
                "preserve_ephemeral",
                format!("must be true or false, not {other}"),
            ))
        }
    };
    let deploy_boot_mode = match info.get("deploy_boot_mode").and_then(Value::as_str) {
        Some(m) => parse_boot_mode(m),
        None => None,
    };
    let disk_label = match info.get("disk_label") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "gpt" => Some(Label::Gpt),
        Some(Value::String(s)) if s == "msdos" => Some(Label::Msdos),
        Some(other) => {
            return Err(bad(
                "disk_label",
                format!("must be \"gpt\" or \"msdos\", not {other}"),
            ))
        }
    };
    Ok(Params {
        root_mb,
        swap_mb,
        ephemeral_mb,
        ephemeral_format,
        preserve_ephemeral,
        deploy_boot_mode,
        disk_label,
        esp_mb: agent_base::config::groups::EFI_SYSTEM_PARTITION_MB,
        bios_boot_mb: agent_base::config::groups::BIOS_BOOT_PARTITION_MB,
    })
}

fn parse_boot_mode(s: &str) -> Option<BootMode> {
    match s.to_ascii_lowercase().as_str() {
        "uefi" => Some(BootMode::Uefi),
        "bios" => Some(BootMode::Bios),
        _ => None,
    }
}

/// IPA's boot mode for the node (`get_node_boot_mode`): secure boot in the
/// instance's or node's capabilities forces UEFI; else the first of
/// `instance_info.deploy_boot_mode`, the node's `boot_mode` capability and
/// `driver_internal_info.deploy_boot_mode`, when it is `uefi` or `bios`;
/// else how the ramdisk booted. Without a node, the conductor's
/// `image_info.deploy_boot_mode` stands in.
pub fn boot_mode(node: Option<&Node>, params: &Params, ramdisk_uefi: bool) -> BootMode {
    let ramdisk = if ramdisk_uefi {
        BootMode::Uefi
    } else {
        BootMode::Bios
    };
    let Some(node) = node else {
        return params.deploy_boot_mode.unwrap_or(ramdisk);
    };
    node_boot_mode(node, ramdisk)
}

/// The node's boot mode as [`boot_mode`] reads it, `fallback` when the node
/// names none (software RAID layouts, which have no `image_info`).
pub fn node_boot_mode(node: &Node, fallback: BootMode) -> BootMode {
    if node
        .capability("secure_boot")
        .is_some_and(|s| s.eq_ignore_ascii_case("true"))
    {
        return BootMode::Uefi;
    }
    let internal = node.driver_internal_info().deploy_boot_mode.clone();
    node.instance_info()
        .deploy_boot_mode
        .clone()
        .or_else(|| node.properties().capabilities.get("boot_mode"))
        .or(internal)
        .and_then(|m| parse_boot_mode(&m))
        .unwrap_or(fallback)
}

/// IPA's table type (`get_partition_table_type_from_specs`): GPT under
/// UEFI; else the `disk_label` capability of the instance, then of the
/// node, `gpt` or otherwise `msdos`. Without a node, the conductor's
/// `image_info.disk_label`.
pub fn label(node: Option<&Node>, params: &Params, mode: BootMode) -> Label {
    if mode == BootMode::Uefi {
        return Label::Gpt;
    }
    let Some(node) = node else {
        return params.disk_label.unwrap_or(Label::Msdos);
    };
    node_label(node)
}

/// The `disk_label` capability of the instance, then of the node: `gpt`,
/// otherwise `msdos` (the table type under BIOS).
pub fn node_label(node: &Node) -> Label {
    match node.capability("disk_label").as_deref() {
        Some("gpt") => Label::Gpt,
        _ => Label::Msdos,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn n(v: Value) -> Node {
        Node::from_document(v).unwrap()
    }

    fn parse(v: Value) -> Result<Params, ParamError> {
        from_image_info(v.as_object().unwrap())
    }

    /// What Ironic 39's `AgentDeploy.write_image` sends for a partition
    /// image (`PARTITION_IMAGE_LABELS` plus `boot_option`, `disk_label`).
    fn ironic() -> Value {
        json!({"id": "part.img", "urls": ["http://h/part.img"], "image_type": "partition",
            "kernel": null, "ramdisk": null, "root_gb": "10", "root_mb": 10240, "swap_mb": 512,
            "ephemeral_mb": 2048, "ephemeral_format": "ext4", "configdrive": null,
            "preserve_ephemeral": false, "deploy_boot_mode": "uefi", "boot_option": "local",
            "disk_label": "gpt"})
    }

    #[test]
    fn ironics_partition_keys_are_read() {
        let p = parse(ironic()).unwrap();
        assert_eq!(
            p,
            Params {
                root_mb: 10240,
                swap_mb: 512,
                ephemeral_mb: 2048,
                ephemeral_format: Some("ext4".into()),
                preserve_ephemeral: false,
                deploy_boot_mode: Some(BootMode::Uefi),
                disk_label: Some(Label::Gpt),
                esp_mb: 550,
                bios_boot_mb: 1,
            }
        );
        // Absent swap and ephemeral mean none; sizes may come as digit strings.
        let p = parse(json!({"root_mb": "4096"})).unwrap();
        assert_eq!((p.root_mb, p.swap_mb, p.ephemeral_mb), (4096, 0, 0));
        assert_eq!(p.ephemeral_format, None);
    }

    #[test]
    fn each_bad_value_names_its_field() {
        let cases: [(&str, Value, &str); 12] = [
            ("root_mb", Value::Null, "is missing"),
            ("root_mb", json!(0), "greater than 0"),
            ("root_mb", json!(-1), "non-negative integer"),
            ("root_mb", json!("10G"), "non-negative integer"),
            ("root_mb", json!(1.5), "non-negative integer"),
            ("root_mb", json!(1u64 << 50), "larger than"),
            ("swap_mb", json!(-512), "non-negative integer"),
            ("ephemeral_mb", json!([1]), "non-negative integer"),
            (
                "ephemeral_format",
                json!("ntfs; rm -rf /"),
                "must be one of",
            ),
            ("ephemeral_format", Value::Null, "needs a filesystem"),
            ("preserve_ephemeral", json!("yes"), "true or false"),
            ("disk_label", json!("dos"), "\"gpt\" or \"msdos\""),
        ];
        for (field, value, want) in cases {
            let mut v = ironic();
            v[field] = value.clone();
            let e = parse(v).unwrap_err();
            assert_eq!(e.field, field, "{field}={value}: {e}");
            assert!(e.reason.contains(want), "{field}={value}: {e}");
            assert!(e.to_string().starts_with(&format!("image_info.{field} ")));
        }
    }

    #[test]
    fn boot_mode_follows_ipas_order() {
        let p = parse(ironic()).unwrap();
        // No node: the conductor's deploy_boot_mode, else the ramdisk's.
        assert_eq!(boot_mode(None, &p, false), BootMode::Uefi);
        let none = Params {
            deploy_boot_mode: None,
            ..p.clone()
        };
        assert_eq!(boot_mode(None, &none, false), BootMode::Bios);
        assert_eq!(boot_mode(None, &none, true), BootMode::Uefi);
        // instance_info beats the capability, which beats driver_internal_info.
        let node = json!({"instance_info": {"deploy_boot_mode": "bios"},
            "properties": {"capabilities": "boot_mode:uefi,disk_label:gpt"},
            "driver_internal_info": {"deploy_boot_mode": "uefi"}});
        assert_eq!(boot_mode(Some(&n(node)), &p, true), BootMode::Bios);
        let node = json!({"properties": {"capabilities": "boot_mode:uefi"},
            "driver_internal_info": {"deploy_boot_mode": "bios"}});
        assert_eq!(boot_mode(Some(&n(node)), &p, false), BootMode::Uefi);
        let node = json!({"driver_internal_info": {"deploy_boot_mode": "bios"}});
        assert_eq!(boot_mode(Some(&n(node)), &p, true), BootMode::Bios);
        // Secure boot forces UEFI; a nonsense mode falls back to the ramdisk's.
        let node = json!({"instance_info": {"deploy_boot_mode": "bios",
            "capabilities": "{\"secure_boot\": \"true\"}"}});
        assert_eq!(boot_mode(Some(&n(node)), &p, false), BootMode::Uefi);
        let node = json!({"instance_info": {"deploy_boot_mode": "floppy"}});
        assert_eq!(boot_mode(Some(&n(node)), &p, false), BootMode::Bios);
    }

    #[test]
    fn table_type_is_gpt_under_uefi_else_the_disk_label_capability() {
        let p = parse(ironic()).unwrap();
        let node = json!({"properties": {"capabilities": {"disk_label": "msdos"}}});
        assert_eq!(
            label(Some(&n(node.clone())), &p, BootMode::Uefi),
            Label::Gpt
        );
        assert_eq!(
            label(Some(&n(node.clone())), &p, BootMode::Bios),
            Label::Msdos
        );
        let node = json!({"instance_info": {"capabilities": {"disk_label": "gpt"}},
            "properties": {"capabilities": {"disk_label": "msdos"}}});
        assert_eq!(
            label(Some(&n(node.clone())), &p, BootMode::Bios),
            Label::Gpt
        );
        assert_eq!(label(Some(&n(json!({}))), &p, BootMode::Bios), Label::Msdos);
        assert_eq!(label(None, &p, BootMode::Bios), Label::Gpt);
    }
}
