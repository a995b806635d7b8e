//! Console login with `rootpwd=` (#34 item 10), as IPA's ramdisks built by
//! diskimage-builder's `dynamic-login` element take it, next to
//! `ipa-debug=1` as Ironic appends it when its conductor logs at debug
//! level (#46 finding 2): the deploy ramdisk boots in QEMU on the test bed
//! (direct kernel boot) with a SHA-512 crypt hash and `ipa-debug=1` on its
//! kernel command line. No passwordless shell opens (that takes
//! `agent.shell=1`), the agent logs at debug level, and PID 1 opens a
//! login prompt on the serial console; a wrong password is refused and the
//! right one gives a root shell.

use std::time::Duration;

use agent_devices::rescue::crypt;
use hardware_tests::bed::{self, direct, Net, NetOptions, Vm};
use hardware_tests::require_root;

const MAC: &str = "52:54:00:30:00:0a";
const GUEST: &str = "10.99.0.70";
const PASSWORD: &str = "Console-root-7";

#[test]
fn rootpwd_gives_a_root_login_on_the_console() {
    require_root("the QEMU rootpwd test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let hash = crypt::hash_with(
        crypt::Scheme::Sha512,
        PASSWORD.as_bytes(),
        b"rootsalt",
        None,
    );
    let mut opts = NetOptions::pxe("rootpwd", &ramdisk, "");
    opts.ramdisk = None;
    opts.hosts = vec![(MAC.into(), GUEST.into())];
    let net = Net::start(opts).unwrap();
    // Quoted as DIB's element documents it (a hash holds `$`).
    let spec = direct::ramdisk_spec(
        &ramdisk,
        MAC,
        &[],
        // One disk-wait attempt: no disk here, and the agent's first
        // debug lines come once it stops waiting.
        &format!("agent.dhcp-timeout=4 ipa-disk-wait-attempts=1 ipa-debug=1 rootpwd=\"{hash}\""),
    );
    let (login, console) = net
        .block_on(async {
            let mut vm = Vm::start(&net, &spec).unwrap();
            let login = tokio::task::block_in_place(|| -> anyhow::Result<()> {
                vm.wait_console(
                    "root login on the console (password from rootpwd=)",
                    Duration::from_secs(120),
                )?;
                vm.wait_console_n("login:", 1, Duration::from_secs(60))?;
                vm.type_line("root")?;
                vm.wait_console_n("Password:", 1, Duration::from_secs(30))?;
                vm.type_line("not-the-password")?;
                vm.wait_console_n("Login incorrect", 1, Duration::from_secs(30))?;
                vm.wait_console_n("login:", 2, Duration::from_secs(30))?;
                vm.type_line("root")?;
                vm.wait_console_n("Password:", 2, Duration::from_secs(30))?;
                vm.type_line(PASSWORD)?;
                std::thread::sleep(Duration::from_secs(2));
                vm.type_line("echo rootpwd-login-ok-$(id -u)-$((6*7))")?;
                vm.wait_console_n("rootpwd-login-ok-0-42", 1, Duration::from_secs(30))?;
                // The agent's own debug lines (`[   4.321] DEBUG …`).
                vm.wait_console("] DEBUG ", Duration::from_secs(60))?;
                Ok(())
            });
            println!("rootpwd: done after {:?} (QEMU wall time)", vm.elapsed());
            (login, vm.console())
        })
        .unwrap();
    login.unwrap_or_else(|e| {
        panic!(
            "console login with rootpwd failed: {e:#}\n--- console ({}) ---\n{console}",
            net.logs.display()
        )
    });
    assert!(
        !console.contains("debug shell on the console"),
        "ipa-debug=1 opened the passwordless shell:\n{console}"
    );
    assert!(
        console.contains("ipa-debug: the agent logs at debug level"),
        "{console}"
    );
    assert!(
        console.lines().any(|l| l.contains("] DEBUG ")),
        "no debug-level log line with ipa-debug=1:\n{console}"
    );
}
