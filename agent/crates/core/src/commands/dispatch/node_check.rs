//! The node's contents the steps read later, checked where a command that
//! carries the node arrives: a malformed `properties.skip_block_devices`,
//! root-device hint, `properties.inject_files` or software
//! `target_raid_config` is the command's HTTP 400
//! (`InvalidCommandParamsError`) naming its path
//! (`node.properties.skip_block_devices[0].size: …`), not a step that
//! fails after the conductor was told the command started. The same
//! parsers as the steps' run here, so nothing a step would take is refused.

use serde_json::Value;

use super::params::ParamsError;
use agent_contents::selection::{SkipError, SkipList};
use agent_devices::hints::parse as hints;
use ironic_types::node::Node;

/// Checks the node's protected disks, root-device hints, files to inject
/// and software RAID configuration.
pub(crate) fn check(node: &Node) -> Result<(), ParamsError> {
    let doc = node.document();
    SkipList::of(node).map_err(skip_error)?;
    root_device(node)?;
    if let Some(files) = doc.pointer("/properties/inject_files") {
        agent_contents::inject::spec::validate(files, &Value::Null)
            .map_err(|e| ParamsError::at("node.properties.inject_files", e.to_string()))?;
    }
    if let Some(raid) = doc.get("target_raid_config") {
        // The disk count is the machine's, checked when the step runs.
        agent_contents::raid::config::parse(
            raid,
            node.uuid().unwrap_or("(unknown node)"),
            usize::MAX,
        )
        .map_err(|e| ParamsError::at("node.target_raid_config", e.problems.join("; ")))?;
    }
    Ok(())
}

/// The hints the root-device choice uses (`instance_info`'s, else
/// `properties`').
fn root_device(node: &Node) -> Result<(), ParamsError> {
    let Some(hints) = node.root_device_hints() else {
        return Ok(());
    };
    let section = if node.instance_info().root_device.as_ref() == Some(hints) {
        "instance_info"
    } else {
        "properties"
    };
    hints::parse(&Value::Object(hints.clone()))
        .map(drop)
        .map_err(|e| {
            let path = match e.hint() {
                Some(h) => format!("node.{section}.root_device.{h}"),
                None => format!("node.{section}.root_device"),
            };
            ParamsError::at(&path, e.to_string())
        })
}

fn skip_error(e: SkipError) -> ParamsError {
    const LIST: &str = "node.properties.skip_block_devices";
    match e {
        SkipError::NotAList(given) => {
            ParamsError::at(LIST, format!("must be a list of objects, not {given}"))
        }
        SkipError::BadEntry { index, given } => ParamsError::at(
            &format!("{LIST}[{index}]"),
            format!(
                "must be an object of root device hints or {{\"volume_name\": NAME}}, not {given}"
            ),
        ),
        SkipError::Hints {
            index,
            given,
            reason,
        } => {
            let path = match reason.hint() {
                Some(h) => format!("{LIST}[{index}].{h}"),
                None => format!("{LIST}[{index}]"),
            };
            ParamsError::at(&path, format!("{reason} (in {given})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checked(doc: Value) -> Result<(), ParamsError> {
        check(&Node::from_document(doc).unwrap())
    }

    #[test]
    fn a_bad_skip_list_entry_is_named_by_its_path() {
        let e = checked(
            json!({"properties": {"skip_block_devices": [{"name": "/dev/sda"}, {"size": "five"}]}}),
        )
        .unwrap_err();
        assert_eq!(e.path, "node.properties.skip_block_devices[1].size");
        assert!(e.reason.contains("five"), "{e}");
        let e = checked(json!({"properties": {"skip_block_devices": {"name": "/dev/sda"}}}))
            .unwrap_err();
        assert_eq!(e.path, "node.properties.skip_block_devices");
        let e = checked(json!({"properties": {"skip_block_devices": [{}]}})).unwrap_err();
        assert_eq!(e.path, "node.properties.skip_block_devices[0]");
        let e = checked(json!({"properties": {"skip_block_devices": [{"colour": "red"}]}}))
            .unwrap_err();
        assert_eq!(e.path, "node.properties.skip_block_devices[0].colour");
        checked(json!({"properties": {"skip_block_devices": [{"size": ">= 5"}, {"volume_name": "data"}]}}))
            .unwrap();
    }

    #[test]
    fn bad_root_device_hints_are_named_in_the_section_used() {
        let e = checked(
            json!({"instance_info": {"root_device": {"rotational": "maybe"}},
                              "properties": {"root_device": {"size": 10}}}),
        )
        .unwrap_err();
        assert_eq!(e.path, "node.instance_info.root_device.rotational");
        let e = checked(json!({"properties": {"root_device": {"size": "<> 0"}}})).unwrap_err();
        assert_eq!(e.path, "node.properties.root_device.size");
        checked(json!({"properties": {"root_device": {"size": ">= 10", "rotational": false}}}))
            .unwrap();
    }

    #[test]
    fn bad_files_and_raid_configs_are_named() {
        let e = checked(json!({"properties": {"inject_files": {"path": "/etc/x"}}})).unwrap_err();
        assert_eq!(e.path, "node.properties.inject_files");
        assert!(e.reason.contains("must be a list"), "{e}");
        let e = checked(
            json!({"uuid": "n1", "target_raid_config": {"logical_disks": [
            {"controller": "software", "raid_level": "7", "size_gb": "MAX"}]}}),
        )
        .unwrap_err();
        assert_eq!(e.path, "node.target_raid_config");
        assert!(e.reason.contains("RAID level 7"), "{e}");
        // Hardware RAID and an empty config are not the agent's to check.
        checked(json!({"target_raid_config": {"logical_disks": [{"raid_level": "7"}]}})).unwrap();
        checked(json!({"target_raid_config": {}, "properties": {"inject_files": null}})).unwrap();
        checked(json!({})).unwrap();
    }
}
