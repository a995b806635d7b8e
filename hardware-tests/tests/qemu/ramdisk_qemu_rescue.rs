//! Rescue of the deploy ramdisk in QEMU on the test bed: the stand-in
//! conductor puts the node in `rescue wait` as Ironic's `agent` rescue
//! interface does, the ramdisk (direct kernel boot) looks up and
//! heartbeats, `rescue.finalize_rescue` brings the SHA-256 crypt hash Ironic
//! makes by default, and the node is `rescue`. Then the tenant logs in as
//! `rescue` with that password over SSH (a wrong password is refused) and
//! on the serial console, and the agent's API no longer answers while the
//! network stays up.
//!
//! The same boot checks who else gets in (#46 findings 2 and 5). It has
//! `agent.shell=1` and a `rootpwd=` hash: before the rescue the explicit
//! option gives a passwordless shell on the console (a command typed there
//! runs; the node enters `rescue wait` only after that, so the shell is
//! there before the agent finishes), and nothing logs at debug level
//! without `ipa-debug`. After the rescue the shell is gone, and root's
//! `rootpwd=` password is locked: refused over SSH and on the console,
//! while `rescue`'s password works on both.

use std::process::Command;
use std::time::Duration;

use agent_devices::rescue::crypt;
use hardware_tests::bed::{self, direct, Net, NetOptions, Vm};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:30:00:07";
const GUEST: &str = "10.99.0.67";
const PASSWORD: &str = "Rescue-me-42";
/// Root's `rootpwd=` password (a different length from the others: the
/// askpass helper's file is named by length).
const ROOT_PASSWORD: &str = "Operator-root-password-9";

/// `ssh USER@GUEST COMMAND` from inside the bed's namespace.
fn ssh(
    ns: &str,
    dir: &std::path::Path,
    user: &str,
    password: &str,
    command: &str,
) -> anyhow::Result<String> {
    hardware_tests::bed::ssh::with_password(ns, dir, &format!("{user}@{GUEST}"), password, command)
}

#[test]
fn rescue_logins_on_ssh_and_console_in_qemu() {
    require_root("the QEMU rescue test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let hash = crypt::hash_with(crypt::Scheme::Sha256, PASSWORD.as_bytes(), b"bedsalt", None);
    let root_hash = crypt::hash_with(
        crypt::Scheme::Sha512,
        ROOT_PASSWORD.as_bytes(),
        b"rootsalt",
        None,
    );
    let mut opts = NetOptions::pxe("rescue", &ramdisk, "");
    opts.ramdisk = None;
    opts.hosts = vec![(MAC.into(), GUEST.into())];
    let net = Net::start(opts).unwrap();
    let spec = direct::ramdisk_spec(
        &ramdisk,
        MAC,
        &[],
        &format!("agent.dhcp-timeout=4 agent.shell=1 rootpwd=\"{root_hash}\""),
    );
    let ns = net.ns.name.clone();
    let (rescued, transcript, shell, logins, api, console) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            let mut vm = Vm::start(&net, &spec).unwrap();
            // The explicit option's shell answers before the rescue (the
            // agent's lookups are refused until the node waits for it).
            let shell = tokio::task::block_in_place(|| {
                vm.wait_console("debug shell on the console", Duration::from_secs(120))?;
                std::thread::sleep(Duration::from_secs(1));
                vm.type_line("echo shell-ok-$(id -u)-$((6*7))")?;
                vm.wait_console("shell-ok-0-42", Duration::from_secs(30))
            });
            conductor.start_rescue(&uuid, &hash).unwrap();
            let rescued = conductor
                .wait_for_state(&uuid, "rescue", Duration::from_secs(240))
                .await;
            let prompt = tokio::task::block_in_place(|| {
                vm.wait_console("rescue mode: log in as", Duration::from_secs(120))?;
                vm.wait_console("login:", Duration::from_secs(60))
            });
            let (ssh_ok, ssh_bad, ssh_root, api) = tokio::task::block_in_place(|| {
                let ok = ssh(
                    &ns,
                    tmp.path(),
                    "rescue",
                    PASSWORD,
                    "echo rescue-ssh-ok-$(id -u) root-field-$(grep ^root: /etc/shadow | cut -c6-8)",
                );
                let bad = ssh(
                    &ns,
                    tmp.path(),
                    "rescue",
                    "wrong-password",
                    "echo should-not-run",
                );
                let root = ssh(&ns, tmp.path(), "root", ROOT_PASSWORD, "echo root-got-in");
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
                (ok, bad, root, api)
            });
            // Root's password is refused on the console too; `rescue`'s works.
            let console_login = tokio::task::block_in_place(|| {
                prompt?;
                vm.type_line("root")?;
                vm.wait_console_n("Password:", 1, Duration::from_secs(30))?;
                vm.type_line(ROOT_PASSWORD)?;
                vm.wait_console_n("Login incorrect", 1, Duration::from_secs(30))?;
                vm.wait_console_n("login:", 2, Duration::from_secs(30))?;
                vm.type_line("rescue")?;
                vm.wait_console_n("Password:", 2, Duration::from_secs(30))?;
                vm.type_line(PASSWORD)?;
                std::thread::sleep(Duration::from_secs(2));
                vm.type_line("echo console-login-ok-$((6*7))")?;
                vm.wait_console("console-login-ok-42", Duration::from_secs(30))
            });
            println!("rescue: done after {:?} (QEMU wall time)", vm.elapsed());
            (
                rescued,
                conductor.transcript(),
                shell,
                (ssh_ok, ssh_bad, ssh_root, console_login),
                api,
                vm.console(),
            )
        })
        .unwrap();
    let (ssh_ok, ssh_bad, ssh_root, console_login) = logins;
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    shell.unwrap_or_else(|e| panic!("agent.shell=1 gave no working shell: {e:#}{ctx}"));
    assert!(
        console.contains("rootpwd= given, but agent.shell=1"),
        "the shell and a login prompt would share the console{ctx}"
    );
    assert!(
        !console.lines().any(|l| l.contains("] DEBUG ")),
        "debug-level lines without ipa-debug{ctx}"
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
    assert!(
        out.contains("root-field-!$6"),
        "root's rootpwd= hash is not locked in /etc/shadow: {out}{ctx}"
    );
    assert!(
        console.contains("root's password (rootpwd=) locked for the rescue"),
        "{ctx}"
    );
    for (what, attempt) in [
        ("rescue with a wrong password", ssh_bad),
        ("root with its rootpwd= password", ssh_root),
    ] {
        match attempt {
            Ok(out) => panic!("SSH as {what} got in: {out}{ctx}"),
            Err(e) => assert!(
                format!("{e:#}").contains("Permission denied"),
                "SSH as {what} failed otherwise: {e:#}{ctx}"
            ),
        }
    }
    console_login.unwrap_or_else(|e| panic!("console login as rescue failed: {e:#}{ctx}"));
    assert!(
        api.is_err(),
        "the agent's API still answers after the rescue: {api:?}{ctx}"
    );
}
