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
//! * Steps of the file run as a deploy step from a deploy template and as
//!   a service step from a servicing request.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::images;
use hardware_tests::ironic::Ironic;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::registry::{with_crun_cgroups, Registry};
use serde_json::json;

const MAC: &str = "52:54:00:c1:ea:31";
const MIB: u64 = 1 << 20;
/// The busybox image's script: writes $MARKER at sector $SECTOR of
/// /dev/target.
const SCRIPT: &str = "/bin/busybox printf \"$MARKER\" | \
     /bin/busybox dd of=/dev/target bs=512 seek=\"$SECTOR\" conv=notrunc,fsync";

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
    if !with_crun_cgroups("real_ironic_runs_container_steps") {
        return;
    }
    let registry = Registry::start().unwrap();
    let tool = registry
        .push_busybox_image("tool:1", &["/bin/busybox", "sh", "-c", SCRIPT])
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
    ironic.enable_automated_clean(&uuid).await.unwrap();
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

/// A steps-file step writing `marker` at `sector` of `dev` through `tool`.
fn file_step(name: &str, tool: &str, dev: &str, marker: &str, sector: u64) -> String {
    format!(
        "  - name: {name}\n    image: {tool}\n    priority: 0\n    interface: deploy\n    \
         reboot_requested: false\n    abortable: true\n    \
         run_options: --rm --network=host --device {dev}:/dev/target --env MARKER={marker} --env SECTOR={sector}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_steps_run_from_a_deploy_template_and_a_servicing_request() {
    hardware_tests::require_root("the real-Ironic container deploy/service test");
    if !with_crun_cgroups("file_steps_run_from_a_deploy_template_and_a_servicing_request") {
        return;
    }
    let registry = Registry::start().unwrap();
    let tool = registry
        .push_busybox_image("tool:1", &["/bin/busybox", "sh", "-c", SCRIPT])
        .unwrap();
    let disk = LoopDevice::new(64 * MIB).unwrap();
    let dev = disk.path.display().to_string();
    // Markers past the 32 MiB image and before the backup GPT.
    let (deploy_sector, service_sector) = (50 * MIB / 512, 50 * MIB / 512 + 2);
    let dir = tempfile::tempdir().unwrap();
    let steps_file = dir.path().join("steps.yaml");
    std::fs::write(
        &steps_file,
        format!(
            "steps:\n{}{}",
            file_step(
                "write_deploy_marker",
                &tool,
                &dev,
                "DEPLOY-STEP",
                deploy_sector
            ),
            file_step(
                "write_service_marker",
                &tool,
                &dev,
                "SERVICE-STEP",
                service_sector
            ),
        ),
    )
    .unwrap();
    let image_path = dir.path().join("image.raw");
    images::sfdisk_image(&image_path, 32 * MIB, "label: gpt\nname=root\n").unwrap();
    let sha = images::sha256_hex(&std::fs::read(&image_path).unwrap());
    let server = ImageServer::start().unwrap();
    server.route("/images/image.raw", &image_path, &[], Fault::None);

    let ironic = Ironic::start_with(&format!(
        "[agent_containers]\ncontainer_steps_file = {}\n",
        steps_file.display()
    ))
    .expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ea:32";
    let uuid = ironic
        .enroll_ready("container-deploy", mac, true)
        .await
        .unwrap();
    ironic
        .create_deploy_template(
            "CUSTOM_CONTAINER",
            json!([{"interface": "deploy", "step": "write_deploy_marker", "priority": 50, "args": {}}]),
        )
        .await
        .unwrap();
    ironic
        .set_traits(&uuid, &["CUSTOM_CONTAINER"])
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/image.raw"),
                &sha,
                json!([{"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_CONTAINER"]},
                       {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"}]),
            ),
        )
        .await
        .unwrap();
    let mut config = host_config(&ironic.url, mac, &disk.path);
    config.cafile = Some(registry.ca_file());
    config.container_group = BTreeMap::from([(
        "container_steps_file".to_string(),
        steps_file.display().to_string(),
    )]);
    let agent = agent::agent::start_detached(config);

    // The deploy template's step (priority 50: after write_image's 80).
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy with the template: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(
        sector(&disk.path, deploy_sector, b"DEPLOY-STEP"),
        b"DEPLOY-STEP"
    );
    assert_eq!(sector(&disk.path, service_sector, b"SERVICE-STEP"), [0; 12]);

    // A servicing request for the other step.
    ironic
        .provision(
            &uuid,
            json!({"target": "service", "service_steps": [
                {"interface": "deploy", "step": "write_service_marker", "args": {}}]}),
        )
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("servicing: {e:#}"));
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    assert_eq!(
        sector(&disk.path, service_sector, b"SERVICE-STEP"),
        b"SERVICE-STEP"
    );
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}
