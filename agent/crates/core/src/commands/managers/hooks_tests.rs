//! The managers' hooks with shell scripts for executables: the per-disk
//! erase hooks' claims, the inspection data, the root-disk choice.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;
use crate::commands::managers::exec::tests::{config, script};

#[tokio::test]
async fn erase_hooks_claim_the_disks_they_want_and_decline_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("disk-a"), d.path().join("disk-b"));
    // Claims disk-a (and says so), declines any other.
    script(
        d.path(),
        "erase.sh",
        &format!(
            "if grep -q '\"name\":\"{}\"'; then echo '{{\"wiped\": true}}'; else echo '{{\"claimed\": false}}'; fi",
            a.display()
        ),
    );
    script(d.path(), "never.sh", "echo '{\"claimed\": false}'");
    std::fs::write(
        d.path().join("a.yaml"),
        "name: low\nversion: '1'\nsupport: 2\nerase_block_device: {executable: never.sh}\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("b.yaml"),
        "name: vendor\nversion: '1'\nsupport: 4\nerase_block_device: {executable: erase.sh}\n",
    )
    .unwrap();
    std::fs::write(d.path().join("c.yaml"), "name: no_hook\nversion: '1'\n").unwrap();
    let cfg = config(d.path());
    let hooks = erase_hooks(&cfg).unwrap();
    let names: Vec<&str> = hooks.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["vendor", "low"]);
    let state = AgentState::new(cfg, None);
    let (claimed, rest) = erase_claimed(&hooks, vec![a.clone(), b.clone()], &json!({}), &state)
        .await
        .unwrap();
    assert_eq!(
        claimed,
        [Claimed {
            disk: a,
            manager: "vendor".into(),
            result: json!({"wiped": true}),
        }]
    );
    assert_eq!(rest, std::slice::from_ref(&b));

    // A failing hook stops the erase, naming the disk.
    script(d.path(), "never.sh", "echo busy >&2; exit 2");
    let e = erase_claimed(&hooks, vec![b.clone()], &json!({}), &state)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BlockDeviceErase);
    assert_eq!(
        e.details,
        format!(
            "manager low's erase_block_device of {}: never.sh exited with status 2; last output:\nbusy",
            b.display()
        )
    );
    assert!(erase_hooks(&config(&PathBuf::from("/nonexistent")))
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn inspect_hooks_add_their_objects_under_their_managers_name() {
    let d = tempfile::tempdir().unwrap();
    script(
        d.path(),
        "inv.sh",
        "echo '{\"raid_controller\": \"acme 9000\"}'",
    );
    script(d.path(), "bad.sh", "echo not json");
    std::fs::write(
        d.path().join("a.yaml"),
        "name: acme\nversion: '1'\ninspect: {executable: inv.sh}\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("b.yaml"),
        "name: other\nversion: '1'\ninspect: {executable: bad.sh}\n",
    )
    .unwrap();
    let data = inspection_data(&config(d.path())).await;
    assert_eq!(
        Value::Object(data),
        json!({"acme": {"raid_controller": "acme 9000"}})
    );
}

/// Two sparse files described as disks, and an agent whose manager
/// directory is `dir`.
fn two_disks(dir: &std::path::Path) -> (Vec<Disk>, AgentState) {
    let paths = [dir.join("disk-a"), dir.join("disk-b")];
    for p in &paths {
        std::fs::File::create(p).unwrap().set_len(1 << 30).unwrap();
    }
    let disks = paths
        .iter()
        .zip(agent_contents::selection::gather::describe(&paths))
        .map(|(p, d)| Disk {
            name: p.display().to_string(),
            ..d
        })
        .collect();
    (disks, AgentState::new(config(dir), None))
}

#[tokio::test]
async fn the_highest_root_disk_hook_that_chooses_one_of_its_disks_wins() {
    let d = tempfile::tempdir().unwrap();
    let (disks, state) = two_disks(d.path());
    let b = PathBuf::from(&disks[1].name);
    // The vendor's hook names the second disk once the node's
    // instance_info asks for it; the lower one never chooses.
    script(
        d.path(),
        "root.sh",
        &format!(
            r#"if grep -q '"pick":"second"'; then echo '{{"name": "{}"}}'; else echo '{{"claimed": false}}'; fi"#,
            b.display()
        ),
    );
    script(d.path(), "never.sh", "echo '{\"claimed\": false}'");
    std::fs::write(
        d.path().join("a.yaml"),
        "name: low\nversion: '1'\nsupport: 2\nos_install_device: {executable: never.sh}\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("b.yaml"),
        "name: vendor\nversion: '1'\nos_install_device: {executable: root.sh}\n",
    )
    .unwrap();
    let node = Node::from_document(json!({"instance_info": {"pick": "second"}})).unwrap();
    let chosen = os_install_device(&state, Some(&node), &disks)
        .await
        .unwrap();
    assert_eq!(
        chosen,
        Some(Chosen {
            manager: "vendor".into(),
            disk: b.clone(),
        })
    );
    // Every hook declines: the agent's own choice applies.
    assert_eq!(os_install_device(&state, None, &disks).await.unwrap(), None);

    // A disk the hook was not given is refused, naming the manager.
    script(d.path(), "never.sh", "echo '{\"name\": \"/dev/sda\"}'");
    let e = os_install_device(&state, None, &disks).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deployment);
    assert_eq!(
        e.details,
        "manager low's os_install_device executable never.sh chose /dev/sda, which is not one of \
         the disks it was given"
    );
    // A failing hook fails the choice with its status and output.
    script(
        d.path(),
        "never.sh",
        "echo 'controller offline' >&2; exit 4",
    );
    let e = os_install_device(&state, None, &disks).await.unwrap_err();
    assert_eq!(
        e.details,
        "manager low's os_install_device executable never.sh exited with status 4; last output:\n\
         controller offline"
    );
    // A disabled manager (support 0) is not asked.
    std::fs::write(
        d.path().join("a.yaml"),
        "name: low\nversion: '1'\nsupport: 0\nos_install_device: {executable: never.sh}\n",
    )
    .unwrap();
    assert_eq!(os_install_device(&state, None, &disks).await.unwrap(), None);
    let chosen = os_install_device(&state, Some(&node), &disks)
        .await
        .unwrap();
    assert_eq!(chosen.map(|c| c.disk), Some(b));
}
