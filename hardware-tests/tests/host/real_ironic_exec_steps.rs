//! Real Ironic 39.0.0 drives executable hardware managers
//! (`agent/docs/own-steps.md`) of an agent in host mode: a manifest
//! directory made here declares steps that run Debian's `sgdisk` on loop
//! devices this test creates, and an erase hook.
//!
//! * a manual clean runs a step, whose GPT shows on the loop device;
//! * a step with `reboot_requested` makes Ironic reboot the node (fake
//!   power: the token is wiped as for a real reboot); the agent looks the
//!   node up again and Ironic runs the next step on it;
//! * a deploy template runs a step after `write_image`, renaming the
//!   deployed image's partition; its `raid.apply_configuration` runs a
//!   vendor's step instead of the generic one, and the vendor's
//!   `os_install_device` hook then chooses its volume as the root disk;
//!   the undeploy's automated cleaning runs the vendor's `erase_devices`
//!   instead of the generic one;
//! * a failing step ends `clean failed` with its exit status and last
//!   output line in `last_error`;
//! * aborting a clean kills a running abortable step and what it started;
//! * a manifest whose step clashes with the generic `erase_devices_metadata`
//!   at the generic support level makes the clean fail naming the manifest
//!   and the step; a vendor's (support 3) replaces it and runs instead;
//! * `erase_devices` leaves one disk to the hook that claims it and erases
//!   the other itself;
//! * a vendor's `delete_configuration` and `create_configuration` replace
//!   the generic ones in a `raid_interface=agent` manual clean (Ironic
//!   stores the configuration the step returns), and a vendor's
//!   `erase_devices_metadata` runs in automated cleaning instead of the
//!   generic one.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::testconductor::demo::host_config;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::images;
use hardware_tests::ironic::{reached, Ironic, POLL_ANY};
use hardware_tests::loopdev::LoopDevice;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The agent runs inside this test binary: its hooks' scripts get the
/// built `agent` as `$AGENT_EXE` (exec_steps::run), not this binary.
fn agent_exe_for_scripts() {
    let agent = hardware_tests::agentproc::agent_binary().expect("the agent binary");
    std::env::set_var(agent_contents::exec_steps::run::AGENT_EXE, agent);
}

/// A value of the JSON on stdin (`$input`) by its path, for scripts
/// (agent/docs/own-steps.md).
const FIELD: &str = r#"field() { printf '%s' "$input" | "$AGENT_EXE" json-get "$1"; }"#;

/// The manifest directory: manager `loopkit` with its steps, manager
/// `wiper` with an erase hook that claims `claimed` only.
fn managers(dir: &Path, claimed: &Path, pids: &Path) {
    script(
        dir,
        "label.sh",
        &format!(
            r#"{FIELD}
input=$(cat)
printf '%s' "$input" > {seen}
dev=$(field args.device); label=$(field args.label)
echo "labelling $dev as $label in phase $(field phase)"
sgdisk --clear --new=1:2048:+8M --change-name=1:"$label" "$dev"
echo "{{\"device\": \"$dev\", \"label\": \"$label\"}}""#,
            seen = dir.join("label-input.json").display()
        ),
    );
    script(
        dir,
        "rename.sh",
        &format!(
            r#"{FIELD}
input=$(cat)
sgdisk --change-name=1:"$(field args.label)" "$(field args.device)""#
        ),
    );
    script(
        dir,
        "mark.sh",
        &format!(
            r#"{FIELD}
input=$(cat)
echo "$(field step)" >> {marks}
echo '{{}}'"#,
            marks = dir.join("marks.txt").display()
        ),
    );
    script(
        dir,
        "fail.sh",
        "echo 'checking controller 0'\necho 'controller 0: battery failed' >&2\nexit 3",
    );
    script(
        dir,
        "wait.sh",
        &format!(
            "echo $$ > {p}.tmp\nsleep 600 &\necho $! >> {p}.tmp\nmv {p}.tmp {p}\nwait",
            p = pids.display()
        ),
    );
    script(
        dir,
        "erase.sh",
        &format!(
            r#"input=$(cat)
# The disk's name, from the block_device object (the node has a name too).
dev=$(printf '%s' "$input" | "$AGENT_EXE" json-get block_device.name)
if [ "$dev" != "{claimed}" ]; then echo '{{"claimed": false}}'; exit 0; fi
sgdisk --zap-all "$dev" >/dev/null
sgdisk --new=1:2048:+4M --change-name=1:claimed-by-hook "$dev"
echo '{{"method": "sgdisk"}}'"#,
            claimed = claimed.display()
        ),
    );
    std::fs::write(
        dir.join("loopkit.yaml"),
        "name: loopkit
version: '1.0'
steps:
  - name: label_disk
    executable: label.sh
    interface: deploy
    clean_priority: 0
    argsinfo:
      device: {description: the disk, required: true}
      label: {description: the partition's name, required: true}
  - name: rename_partition
    executable: ./rename.sh
    interface: deploy
    deploy_priority: 0
    argsinfo:
      device: {description: the disk, required: true}
      label: {description: the new name, required: true}
  - name: mark_then_reboot
    executable: mark.sh
    interface: deploy
    clean_priority: 0
    reboot_requested: true
  - name: mark_after_reboot
    executable: mark.sh
    interface: deploy
    clean_priority: 0
  - name: check_controller
    executable: fail.sh
    interface: deploy
    clean_priority: 0
  - name: long_wait
    executable: wait.sh
    interface: deploy
    clean_priority: 0
    abortable: true
    timeout: 900
",
    )
    .unwrap();
    std::fs::write(
        dir.join("wiper.yaml"),
        "name: wiper\nversion: '2'\nsupport: 4\nerase_block_device: {executable: erase.sh, timeout: 120}\n",
    )
    .unwrap();
}

/// How many lines of Ironic's log name `what` (case-insensitive).
fn ironic_log_count(ironic: &Ironic, what: &str) -> usize {
    let log = std::fs::read_to_string(ironic.log_path()).unwrap_or_default();
    let what = what.to_lowercase();
    log.lines()
        .filter(|l| l.to_lowercase().contains(&what))
        .count()
}

/// The partition names of the GPT on `dev`.
fn gpt_names(dev: &Path) -> Vec<String> {
    let f = std::fs::File::open(dev).unwrap();
    match agent_devices::disk::table::read(&f, 512).unwrap() {
        Some(t) => t.parts.into_iter().map(|p| p.name).collect(),
        None => Vec::new(),
    }
}

/// Whether `pid` runs (a zombie waiting for its reaper does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

/// Takes a node from `clean failed` back to `manageable`, out of the
/// maintenance mode a failed clean step puts it in.
async fn recover(ironic: &Ironic, uuid: &str) {
    ironic
        .move_to(uuid, "manage", "manageable", Duration::from_secs(60))
        .await
        .unwrap();
    ironic.unset_maintenance(uuid).await.unwrap();
}

/// A manual clean that must fail; returns `last_error`, the node back in
/// `manageable`.
async fn failing_clean(ironic: &Ironic, uuid: &str, steps: Value) -> String {
    ironic
        .provision(uuid, json!({"target": "clean", "clean_steps": steps}))
        .await
        .unwrap();
    let node = ironic
        .poll_node(
            uuid,
            POLL_ANY,
            Duration::from_secs(180),
            &mut (),
            reached("clean failed"),
        )
        .await
        .unwrap();
    let err = node["last_error"].as_str().unwrap_or_default().to_string();
    recover(ironic, uuid).await;
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_runs_executable_managers() {
    hardware_tests::require_root("the real-Ironic executable managers test");
    agent_exe_for_scripts();
    let dir = tempfile::tempdir().unwrap();
    let mdir = dir.path().join("managers");
    std::fs::create_dir(&mdir).unwrap();
    let pids = dir.path().join("wait.pids");
    let d1 = LoopDevice::new(64 * MIB).expect("creating a loop device");
    let d2 = LoopDevice::new(64 * MIB).expect("creating a loop device");
    managers(&mdir, &d1.path, &pids);

    let ironic = Ironic::start().expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ee:01";
    let uuid = ironic.enroll_ready("agent-exec", mac, false).await.unwrap();
    let mut config = host_config(&ironic.url, mac, &d1.path);
    config.allowed_devices.push(d2.path.clone());
    config.exec_managers_dir = Some(mdir.clone());
    let agent = agent::agent::start_detached(config);

    // The node's owner can write `extra`: a `device` there must not win
    // over the step's argument (the scripts parse their input,
    // agent/docs/own-steps.md).
    ironic
        .patch(
            &uuid,
            json!([{"op": "add", "path": "/extra/device", "value": d2.path},
                   {"op": "add", "path": "/extra/label", "value": "from-extra"}]),
        )
        .await
        .unwrap();

    // (a) A manual clean runs `label_disk`: sgdisk's GPT on d1.
    let t = Instant::now();
    ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "label_disk",
                    "args": {"device": d1.path, "label": "cleaned-by-step"}}]),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|e| panic!("clean with label_disk: {e:#}"));
    println!("label_disk clean: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(gpt_names(&d1.path), ["cleaned-by-step"]);
    assert!(
        gpt_names(&d2.path).is_empty(),
        "the node's extra.device was written"
    );
    // What the step read on stdin: Ironic's node, ports and arguments, the
    // phase, and the allowed loop devices as the inventory lists them.
    let seen: Value =
        serde_json::from_slice(&std::fs::read(mdir.join("label-input.json")).unwrap()).unwrap();
    assert_eq!(seen["step"], "label_disk");
    assert_eq!(seen["phase"], "clean");
    assert_eq!(seen["node"]["uuid"], uuid.as_str());
    assert_eq!(seen["node"]["extra"]["device"], d2.path.to_str().unwrap());
    assert_eq!(seen["args"]["label"], "cleaned-by-step");
    assert_eq!(seen["ports"][0]["address"], mac);
    let disks: Vec<(&str, u64)> = seen["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| Some((d["name"].as_str()?, d["size"].as_u64()?)))
        .collect();
    let mut want = [
        (d1.path.to_str().unwrap(), 64 * MIB),
        (d2.path.to_str().unwrap(), 64 * MIB),
    ];
    want.sort();
    assert_eq!(disks, want, "{}", seen["disks"]);

    // (b) Steps across a reboot (#49 item 3): a step with
    // `reboot_requested` makes Ironic reboot the node (fake power here: it
    // wipes the agent's token, as for a real reboot) and wait in `clean
    // wait`; the agent finds itself locked out, looks the node up again as
    // after a reboot, and Ironic runs the next step on it.
    let lookups_before = ironic_log_count(&ironic, "lookup");
    ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "mark_then_reboot"},
                   {"interface": "deploy", "step": "mark_after_reboot"}]),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|e| panic!("clean across a reboot: {e:#}"));
    let marks = std::fs::read_to_string(mdir.join("marks.txt")).unwrap();
    let steps: Vec<&str> = marks.lines().collect();
    assert_eq!(steps, ["mark_then_reboot", "mark_after_reboot"], "{marks}");
    let log = std::fs::read_to_string(ironic.log_path()).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains(uuid.as_str()) && l.to_lowercase().contains("reboot")),
        "Ironic's log shows no reboot of the node"
    );
    assert!(
        ironic_log_count(&ironic, "lookup") > lookups_before,
        "the agent did not look the node up again after the reboot"
    );

    // (c) A failing step: its status and last output line in last_error.
    let err = failing_clean(
        &ironic,
        &uuid,
        json!([{"interface": "deploy", "step": "check_controller"}]),
    )
    .await;
    println!("failing step: {err}");
    assert!(err.contains("exited with status 3"), "{err}");
    assert!(err.contains("controller 0: battery failed"), "{err}");
    assert!(err.contains("check_controller"), "{err}");

    // (d) Abort: the step's shell and its child sleep are killed.
    let _ = std::fs::remove_file(&pids);
    ironic
        .provision(
            &uuid,
            json!({"target": "clean",
                   "clean_steps": [{"interface": "deploy", "step": "long_wait"}]}),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let started: Vec<u32> = loop {
        if let Ok(text) = std::fs::read_to_string(&pids) {
            break text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        }
        assert!(Instant::now() < deadline, "long_wait never started");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(started.len(), 2, "{started:?}");
    assert!(started.iter().all(|&p| alive(p)), "{started:?}");
    ironic
        .poll_node(
            &uuid,
            POLL_ANY,
            Duration::from_secs(60),
            &mut (),
            reached("clean wait"),
        )
        .await
        .unwrap();
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "abort"}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while started.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "the aborted step's processes {started:?} still run after 90 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "abort: step killed {:.1} s after the abort",
        t.elapsed().as_secs_f64()
    );
    ironic
        .poll_node(
            &uuid,
            POLL_ANY,
            Duration::from_secs(60),
            &mut (),
            reached("clean failed"),
        )
        .await
        .unwrap();
    recover(&ironic, &uuid).await;

    // (e) A manager whose step would shadow the generic one at the same
    // support (1) is refused: the clean fails naming its manifest and the
    // step.
    let clash = mdir.join("zz-clash.yaml");
    std::fs::write(
        &clash,
        "name: clash\nversion: '1'\nsupport: 1\nsteps:\n  - {name: erase_devices_metadata, executable: label.sh, interface: deploy, clean_priority: 99}\n",
    )
    .unwrap();
    let err = failing_clean(
        &ironic,
        &uuid,
        json!([{"interface": "deploy", "step": "label_disk",
                "args": {"device": d1.path, "label": "never"}}]),
    )
    .await;
    println!("clashing manager: {err}");
    assert!(err.contains(&clash.display().to_string()), "{err}");
    assert!(err.contains("\"erase_devices_metadata\""), "{err}");
    assert_eq!(
        gpt_names(&d1.path),
        ["cleaned-by-step"],
        "the refused clean wrote"
    );
    std::fs::remove_file(&clash).unwrap();

    // (e2) A vendor's manager (support 3) replaces the generic step of the
    // same name, as IPA's in-band RAID and vendor erase managers do: its
    // `erase_devices_metadata` runs, and the generic one, which would wipe
    // d2's signatures, does not.
    d2.partition_and_format().unwrap();
    let before = d2.signatures().unwrap();
    assert!(!before.is_empty());
    let vendor = mdir.join("vendor.yaml");
    std::fs::write(
        &vendor,
        "name: vendor_erase\nversion: '1'\nsteps:\n  - name: erase_devices_metadata\n    executable: label.sh\n    interface: deploy\n    clean_priority: 0\n    argsinfo:\n      device: {description: the disk, required: true}\n      label: {description: the partition's name, required: true}\n",
    )
    .unwrap();
    ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "erase_devices_metadata",
                    "args": {"device": d1.path, "label": "vendor-erase"}}]),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|e| panic!("the vendor's erase_devices_metadata: {e:#}"));
    assert_eq!(gpt_names(&d1.path), ["vendor-erase"]);
    assert_eq!(
        d2.signatures().unwrap(),
        before,
        "the generic erase_devices_metadata ran"
    );
    let seen: Value =
        serde_json::from_slice(&std::fs::read(mdir.join("label-input.json")).unwrap()).unwrap();
    assert_eq!(seen["step"], "erase_devices_metadata");
    std::fs::remove_file(&vendor).unwrap();

    // (f) erase_devices: the hook claims d1, the generic erase takes d2.
    d2.partition_and_format().unwrap();
    assert!(!d2.signatures().unwrap().is_empty());
    let t = Instant::now();
    ironic
        .manual_clean(
            &uuid,
            json!([{"interface": "deploy", "step": "erase_devices"}]),
            Duration::from_secs(240),
        )
        .await
        .unwrap_or_else(|e| panic!("erase_devices: {e:#}"));
    println!("erase_devices: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(gpt_names(&d1.path), ["claimed-by-hook"]);
    let left = d2.signatures().unwrap();
    assert!(left.is_empty(), "the generic erase left {left:?} on d2");
    let data = std::fs::read(&d2.path).unwrap();
    assert!(data.iter().all(|&b| b == 0), "d2 is not zeroed");

    // (g) In-band hardware RAID as a vendor's manager does it (#49 item
    // 1): its delete_configuration and create_configuration (support 3)
    // replace the generic software-RAID ones in a `raid_interface=agent`
    // manual clean, and Ironic stores the configuration its step returns.
    hardware_raid(&ironic, &uuid, &mdir).await;

    // (h) Automated cleaning runs the vendor's erase_devices_metadata (this
    // Ironic's automated clean runs the metadata erase, priority 10) in
    // place of the generic one, which would wipe d2's signatures.
    d2.partition_and_format().unwrap();
    let before = d2.signatures().unwrap();
    assert!(!before.is_empty());
    std::fs::write(
        mdir.join("vendor.yaml"),
        "name: vendor_erase\nversion: '1'\nsteps:\n  - {name: erase_devices_metadata, executable: mark.sh, interface: deploy, clean_priority: 99}\n",
    )
    .unwrap();
    let _ = std::fs::remove_file(mdir.join("marks.txt"));
    // The suite's nodes are enrolled without automated cleaning.
    ironic.enable_automated_clean(&uuid).await.unwrap();
    ironic
        .move_to(&uuid, "provide", "available", Duration::from_secs(180))
        .await
        .unwrap_or_else(|e| panic!("automated cleaning with the vendor's erase: {e:#}"));
    let marks = std::fs::read_to_string(mdir.join("marks.txt")).unwrap_or_default();
    assert_eq!(
        marks, "erase_devices_metadata\n",
        "the vendor's step did not run"
    );
    assert_eq!(
        d2.signatures().unwrap(),
        before,
        "the generic metadata erase ran"
    );
    assert!(!agent.is_finished(), "the agent stopped");
    agent.abort();
}

/// (g): a vendor's RAID manager (`hwraid.sh` records the step and answers
/// `create_configuration` with the node's `target_raid_config`, as a
/// controller tool's wrapper would report what it built).
async fn hardware_raid(ironic: &Ironic, uuid: &str, mdir: &Path) {
    script(
        mdir,
        "hwraid.sh",
        &format!(
            r#"{FIELD}
input=$(cat)
echo "$(field step)" >> {marks}
if [ "$(field step)" = create_configuration ]; then field node.target_raid_config; else echo '{{}}'; fi"#,
            marks = mdir.join("raid-marks.txt").display()
        ),
    );
    std::fs::write(
        mdir.join("hwraid.yaml"),
        "name: vendor_raid\nversion: '3'\nsteps:\n  - {name: delete_configuration, executable: hwraid.sh, interface: raid, clean_priority: 0}\n  - {name: create_configuration, executable: hwraid.sh, interface: raid, clean_priority: 0}\n",
    )
    .unwrap();
    ironic
        .patch(
            uuid,
            json!([{"op": "replace", "path": "/raid_interface", "value": "agent"}]),
        )
        .await
        .unwrap();
    let target = json!({"logical_disks": [{"controller": "RAID.Integrated.1-1", "raid_level": "1",
        "size_gb": 100, "is_root_volume": true}]});
    ironic
        .set_target_raid_config(uuid, target.clone())
        .await
        .unwrap();
    ironic
        .manual_clean(
            uuid,
            json!([{"interface": "raid", "step": "delete_configuration"},
                   {"interface": "raid", "step": "create_configuration"}]),
            Duration::from_secs(180),
        )
        .await
        .unwrap_or_else(|e| panic!("the vendor's RAID steps: {e:#}"));
    let marks = std::fs::read_to_string(mdir.join("raid-marks.txt")).unwrap_or_default();
    assert_eq!(marks, "delete_configuration\ncreate_configuration\n");
    let node = ironic.node(uuid).await.unwrap();
    assert_eq!(
        node["raid_config"]["logical_disks"][0]["controller"], "RAID.Integrated.1-1",
        "{}",
        node["raid_config"]
    );
    std::fs::remove_file(mdir.join("hwraid.yaml")).unwrap();
}

/// A 32 MiB GPT disk image whose partition `root` holds random bytes.
fn make_image(path: &Path) -> (Vec<u8>, String) {
    images::sfdisk_image(path, 32 * MIB, "label: gpt\nname=root\n").unwrap();
    let mut img = std::fs::read(path).unwrap();
    let mut rng = fastrand::Rng::with_seed(32);
    for b in &mut img[(2 * MIB) as usize..(6 * MIB) as usize] {
        *b = rng.u8(..);
    }
    std::fs::write(path, &img).unwrap();
    let hex = images::sha256_hex(&img);
    (img, hex)
}

/// (h) A vendor's in-band hardware RAID in a deploy: manager `vendor_raid`
/// replaces the generic `apply_configuration` (the template's
/// `raid.apply_configuration`, before `write_image`) and, once its volume
/// exists, chooses it as the root disk through its `os_install_device`
/// hook (IPA's `get_os_install_device`). The "volume" is the second loop
/// device, which the agent's own choice (the smaller disk) would not take.
fn vendor_raid(mdir: &Path, volume: &Path) {
    let built = mdir.join("volume-built");
    script(
        mdir,
        "apply.sh",
        &format!(
            r#"{FIELD}
input=$(cat)
echo "building $(field args.raid_config.logical_disks.0.raid_level) on the controller"
touch {built}
field args.raid_config"#,
            built = built.display()
        ),
    );
    script(
        mdir,
        "root.sh",
        &format!(
            r#"cat > {seen}
if [ -e {built} ]; then echo '{{"name": "{volume}"}}'; else echo '{{"claimed": false}}'; fi"#,
            seen = mdir.join("root-input.json").display(),
            built = built.display(),
            volume = volume.display()
        ),
    );
    // Its whole-disk erase records the disk list it was given and erases
    // nothing, so the test can tell it ran instead of the generic one.
    script(
        mdir,
        "erase_all.sh",
        &format!(
            "cat > {seen}\necho '{{\"erased_by\": \"controller\"}}'",
            seen = mdir.join("erase-input.json").display()
        ),
    );
    std::fs::write(
        mdir.join("vendor_raid.yaml"),
        "name: vendor_raid\nversion: '3'\nos_install_device: {executable: root.sh}\nsteps:\n  - {name: apply_configuration, executable: apply.sh, interface: raid, deploy_priority: 0, argsinfo: {raid_config: {description: the configuration, required: true}}}\n  - {name: erase_devices, executable: erase_all.sh, interface: deploy, clean_priority: 10}\n",
    )
    .unwrap();
}

/// (b) A deploy template runs `rename_partition` after `write_image`: the
/// deployed image's partition is renamed, its data intact; and (h) its
/// `raid.apply_configuration` runs the vendor's step, whose volume becomes
/// the root disk the image is written to. The undeploy's automated
/// cleaning (this Ironic runs `erase_devices` at priority 10) then runs the
/// vendor's `erase_devices` in place of the generic one, which would
/// discard the image's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ironic_runs_an_executable_step_from_a_deploy_template() {
    hardware_tests::require_root("the real-Ironic executable deploy step test");
    agent_exe_for_scripts();
    let dir = tempfile::tempdir().unwrap();
    let mdir = dir.path().join("managers");
    std::fs::create_dir(&mdir).unwrap();
    // Sparse: the agent's own choice needs 4 GiB, and takes the smaller.
    let other = LoopDevice::new((5 << 30) - MIB).expect("creating a loop device");
    let disk = LoopDevice::new(5 << 30).expect("creating a loop device");
    managers(&mdir, &PathBuf::from("/dev/none"), &dir.path().join("pids"));
    vendor_raid(&mdir, &disk.path);
    let image_path = dir.path().join("tenant.raw");
    let (img, sha) = make_image(&image_path);
    let server = ImageServer::start().unwrap();
    server.route("/images/tenant.raw", &image_path, &[], Fault::None);

    let ironic = Ironic::start_with("[deploy]\nerase_devices_priority = 10\n")
        .expect("starting Ironic 39.0.0");
    let mac = "52:54:00:c1:ee:02";
    let uuid = ironic
        .enroll_ready("agent-exec-deploy", mac, true)
        .await
        .unwrap();
    let raid = json!({"logical_disks": [{"controller": "RAID.Integrated.1-1", "raid_level": "1",
        "size_gb": "MAX", "is_root_volume": true}]});
    ironic
        .create_deploy_template(
            "CUSTOM_EXEC_STEPS",
            json!([{"interface": "raid", "step": "apply_configuration", "priority": 90,
                    "args": {"raid_config": raid}},
                   {"interface": "deploy", "step": "rename_partition", "priority": 50,
                    "args": {"device": disk.path, "label": "templated"}}]),
        )
        .await
        .unwrap();
    ironic
        .set_traits(&uuid, &["CUSTOM_EXEC_STEPS"])
        .await
        .unwrap();
    ironic
        .patch(
            &uuid,
            Ironic::image_patch(
                &server.url("/images/tenant.raw"),
                &sha,
                json!([{"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_EXEC_STEPS"]},
                       {"op": "replace", "path": "/raid_interface", "value": "agent"}]),
            ),
        )
        .await
        .unwrap();
    let mut config = host_config(&ironic.url, mac, &other.path);
    config.allowed_devices.push(disk.path.clone());
    config.exec_managers_dir = Some(mdir.clone());
    let agent = agent::agent::start_detached(config);
    let t = Instant::now();
    ironic
        .provision(&uuid, json!({"target": "active"}))
        .await
        .unwrap();
    let node = ironic
        .wait_for(&uuid, "active", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("deploy with the template: {e:#}"));
    println!(
        "deploy with the template: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(node["last_error"].is_null(), "{}", node["last_error"]);
    // The vendor's step ran (not the generic software RAID) and Ironic
    // stored the configuration it returned.
    assert!(
        mdir.join("volume-built").exists(),
        "the vendor's apply_configuration did not run"
    );
    assert_eq!(
        node["raid_config"]["logical_disks"][0]["controller"], "RAID.Integrated.1-1",
        "{}",
        node["raid_config"]
    );
    // Its hook was given both disks and chose the volume: the image is
    // there, renamed by the template's step; the other disk is untouched.
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(mdir.join("root-input.json")).unwrap())
            .unwrap();
    let given: Vec<&str> = seen["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    let names = [
        other.path.display().to_string(),
        disk.path.display().to_string(),
    ];
    assert_eq!(given, names, "{seen}");
    assert_eq!(seen["node"]["uuid"], uuid.as_str());
    assert_eq!(gpt_names(&disk.path), ["templated"]);
    let mut data = vec![0; (6 * MIB) as usize];
    std::io::Read::read_exact(&mut std::fs::File::open(&disk.path).unwrap(), &mut data).unwrap();
    let body = (2 * MIB) as usize..(6 * MIB) as usize;
    assert!(data[body.clone()] == img[body], "the image's data changed");
    assert!(
        gpt_names(&other.path).is_empty(),
        "the agent's own choice was written"
    );

    ironic.enable_automated_clean(&uuid).await.unwrap();
    ironic
        .move_to(&uuid, "deleted", "available", Duration::from_secs(240))
        .await
        .unwrap_or_else(|e| panic!("undeploy with the vendor's erase: {e:#}"));
    let seen = std::fs::read_to_string(mdir.join("erase-input.json"))
        .expect("the vendor's erase_devices did not run");
    let seen: Value = serde_json::from_str(&seen).unwrap();
    assert_eq!(seen["step"], "erase_devices");
    assert_eq!(seen["phase"], "clean");
    // The generic erase_devices_metadata (priority 10 here too) wiped the
    // table; the generic erase_devices would have discarded the rest.
    std::io::Read::read_exact(&mut std::fs::File::open(&disk.path).unwrap(), &mut data).unwrap();
    assert!(
        gpt_names(&disk.path).is_empty(),
        "the metadata erase did not run"
    );
    let body = (2 * MIB) as usize..(6 * MIB) as usize;
    assert!(
        data[body.clone()] == img[body],
        "the generic erase_devices ran: the image's data is gone"
    );
    agent.abort();
}

/// image-builder's `--managers DIR` puts the directory where the ramdisk's
/// agent reads manifests.
#[test]
fn the_ramdisk_gets_managers_where_its_agent_looks() {
    assert_eq!(
        format!("/{}", image_builder::assemble::MANAGERS_DIR),
        agent_contents::exec_steps::RAMDISK_DIR
    );
}
