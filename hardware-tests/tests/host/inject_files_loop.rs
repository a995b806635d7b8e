//! The `inject_files` deploy step through the command API onto a loop
//! device holding a deployed image's layout (GPT: an ext4 `boot` partition,
//! an ext4 root with `/etc`): a file by partition number, a file found by
//! its first directory (`/etc/...` → the root partition) with mode, owner
//! and a new leaf directory's mode, a file from an http URL (whose first
//! answer is cut: resumed, as an image download), a deletion,
//! merged with the node's `properties.inject_files`; and a tenant
//! filesystem whose `etc/evil` is a symbolic link to `/` cannot make the
//! agent write outside it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use agent_base::config::{Config, RunMode};
use agent_contents::ignition::mount::Mounted;
use agent_testkit::image_server::{Fault, ImageServer};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::loopdev::LoopDevice;
use hardware_tests::run;
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;

/// Writes the image's layout onto `disk`.
fn layout(disk: &Path, dir: &Path) {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/old.conf"), "old").unwrap();
    std::os::unix::fs::symlink("/", root.join("etc/evil")).unwrap();
    let boot = dir.join("bootfs");
    std::fs::create_dir_all(boot.join("loader")).unwrap();
    run(Command::new("bash").args([
        "-c",
        &format!(
            "printf 'label: gpt\\nsize=16MiB, name=boot\\nsize=32MiB, name=root\\n' | sfdisk --quiet {}",
            disk.display()
        ),
    ]))
    .unwrap();
    for (tree, offset, size) in [(&boot, MIB, "16M"), (&root, 17 * MIB, "32M")] {
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", &format!("offset={offset}"), "-d"])
            .arg(tree)
            .arg(disk)
            .arg(size))
        .unwrap();
    }
}

fn step(files: Value, properties: Value) -> Value {
    json!({"step": {"interface": "deploy", "step": "inject_files", "args": {"files": files}},
           "node": {"uuid": "n1", "properties": properties},
           "ports": [], "deploy_version": {"generic_hardware_manager": "1.2"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inject_files_writes_into_the_deployed_filesystems_and_stays_inside_them() {
    hardware_tests::require_root("the inject_files loop-device test");
    let dir = tempfile::tempdir().unwrap();
    let disk = LoopDevice::new(64 * MIB).unwrap();
    layout(&disk.path, dir.path());
    std::fs::write(dir.path().join("remote.txt"), "from a URL\n").unwrap();
    let server = ImageServer::start().unwrap();
    // The first answer is cut after 4 bytes: the URL goes through the
    // agent's download path (retries, resumption, its TLS settings), as an
    // image does.
    server.route(
        "/remote.txt",
        dir.path().join("remote.txt"),
        &[Fault::ResetAfter(4)],
        Fault::None,
    );
    let api = AgentApi::start(Config {
        mode: RunMode::Host,
        allowed_devices: vec![disk.path.clone()],
        image_download_connection_retry_interval: std::time::Duration::from_secs(1),
        ..Config::default()
    })
    .await
    .unwrap();

    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let files = json!([
        {"path": "/loader/entry.conf", "partition": 1, "content": b64("boot entry\n")},
        {"path": "/etc/sysctl.d/90-x.conf", "content": b64("vm.swappiness=1\n"),
         "mode": 0o600, "dirmode": 0o700, "owner": 1000, "group": 1000},
        {"path": "/etc/remote.txt", "content": server.url("/remote.txt")},
        {"path": "/etc/old.conf", "deleted": true}
    ]);
    let props = json!({"inject_files": [{"path": "/etc/motd", "content": b64("hello\n")}]});
    let r = api
        .run("deploy.execute_deploy_step", step(files, props))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "SUCCEEDED", "{r}");
    let gets: Vec<_> = server
        .seen()
        .into_iter()
        .filter(|s| s.path == "/remote.txt")
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert!(
        gets[1].range.is_some(),
        "the second request did not resume: {gets:?}"
    );
    let done = r["command_result"]["deploy_result"]["files"].to_string();
    assert!(done.contains("/etc/motd written on partition 2"), "{done}");

    let m = Mounted::new(&disk.path, 17 * MIB, 32 * MIB, "ext4", true).unwrap();
    let root = m.path();
    let listing = run(Command::new("ls").arg("-laR").arg(&root)).unwrap_or_default();
    assert!(root.join("etc/motd").exists(), "{done}\n{listing}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).unwrap(),
        "hello\n"
    );
    let sysctl = root.join("etc/sysctl.d/90-x.conf");
    assert_eq!(
        std::fs::read_to_string(&sysctl).unwrap(),
        "vm.swappiness=1\n"
    );
    let meta = std::fs::metadata(&sysctl).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!((meta.uid(), meta.gid()), (1000, 1000));
    let dmode = std::fs::metadata(root.join("etc/sysctl.d"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dmode & 0o7777, 0o700);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/remote.txt")).unwrap(),
        "from a URL\n"
    );
    assert!(!root.join("etc/old.conf").exists());
    m.unmount().unwrap();
    let m = Mounted::new(&disk.path, MIB, 16 * MIB, "ext4", true).unwrap();
    assert_eq!(
        std::fs::read_to_string(m.path().join("loader/entry.conf")).unwrap(),
        "boot entry\n"
    );
    m.unmount().unwrap();

    // Through the tenant's link to /: refused, nothing written on the host.
    let marker = format!("agent-inject-{}", std::process::id());
    let evil = json!([{"path": format!("/etc/evil/tmp/{marker}"), "content": b64("x")}]);
    let r = api
        .run("deploy.execute_deploy_step", step(evil, json!({})))
        .await
        .unwrap();
    assert_eq!(r["command_status"], "FAILED", "{r}");
    let details = r["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("symbolic link"), "{details}");
    assert!(!Path::new("/tmp").join(&marker).exists());

    // Bad requests are InvalidCommandParams before anything is mounted.
    let r = api
        .run(
            "deploy.execute_deploy_step",
            step(json!([{"path": "/x", "content": b64("x")}]), json!({})),
        )
        .await
        .unwrap();
    assert_eq!(
        r["command_error"]["type"], "InvalidCommandParamsError",
        "{r}"
    );
}
