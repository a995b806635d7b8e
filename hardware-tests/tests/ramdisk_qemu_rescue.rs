//! Rescue of the deploy ramdisk in QEMU on the test bed: the stand-in
//! conductor puts the node in `rescue wait` as Ironic's `agent` rescue
//! interface does, the ramdisk (direct kernel boot) looks up and
//! heartbeats, `rescue.finalize_rescue` brings the SHA-256 crypt hash Ironic
//! makes by default, and the node is `rescue`. Then the tenant logs in as
//! `rescue` with that password over SSH (a wrong password is refused) and
//! on the serial console, and the agent's API no longer answers while the
//! network stays up.

use std::process::Command;
use std::time::Duration;

use agent::rescue::crypt;
use hardware_tests::bed::{self, direct, Net, NetOptions, Vm};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:30:00:07";
const GUEST: &str = "10.99.0.67";
const PASSWORD: &str = "Rescue-me-42";

/// `ssh rescue@GUEST COMMAND` from inside the bed's namespace.
fn ssh(ns: &str, dir: &std::path::Path, password: &str, command: &str) -> anyhow::Result<String> {
    hardware_tests::bed::ssh::with_password(ns, dir, &format!("rescue@{GUEST}"), password, command)
}

#[test]
fn rescue_logins_on_ssh_and_console_in_qemu() {
    require_root("the QEMU rescue test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let hash = crypt::hash_with(crypt::Scheme::Sha256, PASSWORD.as_bytes(), b"bedsalt", None);
    let mut opts = NetOptions::pxe("rescue", &ramdisk, "");
    opts.ramdisk = None;
    opts.hosts = vec![(MAC.into(), GUEST.into())];
    let net = Net::start(opts).unwrap();
    let spec = direct::ramdisk_spec(&ramdisk, MAC, &[], "agent.dhcp-timeout=4");
    let ns = net.ns.name.clone();
    let (rescued, transcript, ssh_ok, ssh_bad, console_login, api, console) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_rescue(&uuid, &hash).unwrap();
            let mut vm = Vm::start(&net, &spec).unwrap();
            let rescued = conductor
                .wait_for_state(&uuid, "rescue", Duration::from_secs(240))
                .await;
            let prompt = tokio::task::block_in_place(|| {
                vm.wait_console("rescue mode: log in as", Duration::from_secs(60))?;
                vm.wait_console("login:", Duration::from_secs(60))
            });
            let (ssh_ok, ssh_bad, api) = tokio::task::block_in_place(|| {
                let ok = ssh(&ns, tmp.path(), PASSWORD, "echo rescue-ssh-ok-$(id -u)");
                let bad = ssh(&ns, tmp.path(), "wrong-password", "echo should-not-run");
                let api = run(Command::new("ip").args([
                    "netns",
                    "exec",
                    &ns,
                    "curl",
                    "-sk",
                    "--max-time",
                    "5",
                    &format!("https://{GUEST}:9999/v1/status"),
                ]));
                (ok, bad, api)
            });
            let console_login = tokio::task::block_in_place(|| {
                prompt?;
                vm.type_line("rescue")?;
                vm.wait_console("Password:", Duration::from_secs(30))?;
                vm.type_line(PASSWORD)?;
                std::thread::sleep(Duration::from_secs(2));
                vm.type_line("echo console-login-ok-$((6*7))")?;
                vm.wait_console("console-login-ok-42", Duration::from_secs(30))
            });
            println!("rescue: done after {:?} (QEMU wall time)", vm.elapsed());
            (
                rescued,
                conductor.transcript(),
                ssh_ok,
                ssh_bad,
                console_login,
                api,
                vm.console(),
            )
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    rescued.unwrap_or_else(|e| panic!("the node did not reach rescue: {e:#}{ctx}"));
    assert!(
        transcript
            .iter()
            .any(|l| l.contains("rescue.finalize_rescue") && l.contains("SUCCEEDED")),
        "no successful finalize_rescue{ctx}"
    );
    let out = ssh_ok.unwrap_or_else(|e| panic!("SSH as rescue failed: {e:#}{ctx}"));
    assert!(out.contains("rescue-ssh-ok-0"), "{out}{ctx}");
    match ssh_bad {
        Ok(out) => panic!("SSH with a wrong password got in: {out}{ctx}"),
        Err(e) => assert!(
            format!("{e:#}").contains("Permission denied"),
            "SSH with a wrong password failed otherwise: {e:#}{ctx}"
        ),
    }
    console_login.unwrap_or_else(|e| panic!("console login as rescue failed: {e:#}{ctx}"));
    assert!(
        api.is_err(),
        "the agent's API still answers after the rescue: {api:?}{ctx}"
    );
}
