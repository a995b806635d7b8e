//! Real Ironic 39.0.0, unmodified, with `[agent_containers]` set, drives
//! the agent in host mode through container steps: images pulled over TLS
//! from Debian's docker-registry on loopback (CA made by the test, given
//! to the agent as its `cafile`), run with crun, writing a marker on a loop
//! device the test made.
//!
//! * A manual clean runs `generic_container_step` with the allowed image;
//!   the marker lands on the disk.
//! * A manual clean with an image not allowed fails with IPA's
//!   `ContainerNotPermittedError` message and the registry never hears
//!   from the agent about that image.
//! * The steps file's step is in the clean steps the agent lists, with its
//!   priority, and runs in automated cleaning (`provide`).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use agent::testconductor::demo::host_config;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::registry::{in_cgroup2_namespace, Registry};
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:31";

/// The bytes at sector `n` of `dev`, as long as `want`.
fn sector(dev: &std::path::Path, n: u64, want: &[u8]) -> Vec<u8> {
    let mut f = std::fs::File::open(dev).unwrap();
    f.seek(SeekFrom::Start(n * 512)).unwrap();
    let mut buf = vec![0; want.len()];
    f.read_exact(&mut buf).unwrap();
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_runs_container_steps() {
    hardware_tests::require_root("the real-Ironic container steps test");
    if !in_cgroup2_namespace("real_ironic_runs_container_steps") {
        return;
    }
    let registry = Registry::start().unwrap();
    // One image: writes $MARKER at sector $SECTOR of /dev/target.
    let script = "/bin/busybox printf \"$MARKER\" | \
                  /bin/busybox dd of=/dev/target bs=512 seek=\"$SECTOR\" conv=notrunc,fsync";
    let tool = registry
        .push_busybox_image("tool:1", &["/bin/busybox", "sh", "-c", script])
        .unwrap();
    let forbidden = registry
        .push_busybox_image("forbidden:1", &["/bin/busybox", "true"])
        .unwrap();
    let disk = LoopDevice::new(64 << 20).unwrap();
    let dev = disk.path.display().to_string();

    // The ramdisk's steps file: a trusted step with its own options.
    let dir = tempfile::tempdir().unwrap();
    let steps_file = dir.path().join("steps.yaml");
    std::fs::write(
        &steps_file,
        format!(
            "steps:\n  - name: write_file_marker\n    image: {tool}\n    priority: 5\n    \
             interface: deploy\n    reboot_requested: false\n    abortable: true\n    \
             run_options: --rm --network=host --device {dev}:/dev/target --env MARKER=FILE-STEP --env SECTOR=2\n"
        ),
    )
    .unwrap();

    // Ironic's [agent_containers]: the allowlist and the options the
    // generic step runs with (a ListOpt: commas between options).
    // The conductor's container_steps_file overrides the agent's own (as
    // in IPA), so it names the file too.
    let ironic = Ironic::start_with(&format!(
        "[agent_containers]\nallowed_containers = {tool}\ncontainer_steps_file = {}\n\
         run_options = --rm,--network=host,--device {dev}:/dev/target,--env MARKER=GENERIC-STEP,--env SECTOR=1\n",
        steps_file.display()
    ))
    .expect("starting Ironic 39.0.0");
    let uuid = ironic.enroll_ready("containers", MAC, false).await.unwrap();

    let mut config = host_config(&ironic.url, MAC, &disk.path);
    config.cafile = Some(registry.ca_file());
    // On a host the container manager needs a [container] group.
    config.container_group = BTreeMap::from([(
        "container_steps_file".to_string(),
        steps_file.display().to_string(),
    )]);
    let agent = agent::agent::start_detached(config);

    // The generic step, allowed image.
    let node = ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "generic_container_step",
                    "args": {"container_url": tool}}]),
            Duration::from_secs(240),
        )
        .await
        .unwrap();
    assert_eq!(sector(&disk.path, 1, b"GENERIC-STEP"), b"GENERIC-STEP");
    assert!(node["last_error"].is_null());
    // An image not allowed: the clean fails naming it; nothing pulled.
    let e = ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "generic_container_step",
                    "args": {"container_url": forbidden}}]),
            Duration::from_secs(240),
        )
        .await
        .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&format!(
            "Container image {forbidden} is not in [container]allowed_containers"
        )),
        "{msg}"
    );
    let log = registry.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("oci-client") && l.contains("/v2/forbidden/")),
        "{log}"
    );
    // A failed clean leaves the node in maintenance (fault: clean failure).
    ironic.unset_maintenance(&uuid).await.unwrap();
    ironic
        .move_to(&uuid, "manage", "manageable", Duration::from_secs(60))
        .await
        .unwrap();

    // Automated cleaning runs the steps file's step at its priority.
    ironic
        .patch(
            &uuid,
            json!([{"op": "replace", "path": "/automated_clean", "value": true}]),
        )
        .await
        .unwrap();
    ironic
        .move_to(&uuid, "provide", "available", Duration::from_secs(240))
        .await
        .unwrap();
    // Ironic's own record: the agent listed the file's step with its
    // priority among the clean steps, and its manager's version.
    let log = std::fs::read_to_string(ironic.log_path()).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("Executing automated cleaning")
                && l.contains("'step': 'write_file_marker'")
                && l.contains("'priority': 5")),
        "no automated clean with write_file_marker at priority 5: {}",
        log.lines()
            .filter(|l| l.contains("remaining steps") || l.contains("get_clean_steps: result"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(log.contains("'ContainerHardwareManager': '2'"));
    assert_eq!(sector(&disk.path, 2, b"FILE-STEP"), b"FILE-STEP");
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}
