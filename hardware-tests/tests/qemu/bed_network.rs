//! The ramdisk's network bring-up on the QEMU test bed, beyond DHCPv4:
//!
//! * `ipa-enable-vlan-interfaces=all`: the agent listens for LLDP before
//!   DHCP, creates `eth0.100` for the VLAN the bed's switch names (VLAN Name
//!   TLV) and asks for DHCP on it. (No lease: this machine's kernel has no
//!   8021q, so the bed cannot serve a tagged VLAN; the console line proves
//!   the interface exists and DHCP ran on it.) `<MAC>.300` in the same list
//!   (IPA 13's form naming the parent by its MAC) gives `eth0.300` too.
//! * IPv6: an address by DHCPv6 (`/128` from dnsmasq's range) and one by
//!   SLAAC, each on the console;
//! * `sshkey=` (given the way Ironic passes it, through iPXE): root logs in
//!   with that key over SSH from inside the namespace and runs `agent`.
//!
//! The agent also looks up the test conductor and finishes an empty clean,
//! so the network it advertised on works.

use std::process::Command;
use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::lldp::Switch;
use hardware_tests::bed::{self, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::{require_root, run};

const MAC: &str = "52:54:00:30:00:01";
const GUEST: &str = "10.99.0.60";

#[test]
fn vlans_from_lldp_dhcpv6_slaac_and_ssh() {
    require_root("the QEMU test bed");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "bed-test", "-f"])
        .arg(&key))
    .unwrap();
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let mut opts = NetOptions::pxe(
        "network",
        &ramdisk,
        &format!(
            "console=ttyS0 quiet panic=-1 ipa-api-url=http://{BRIDGE_IP}:6385 \
             ipa-enable-vlan-interfaces=all,{MAC}.300 ipa-collect-lldp=1 sshkey=\"{}\"",
            public.trim()
        ),
    );
    opts.hosts = vec![(MAC.into(), GUEST.into())];
    let net = Net::start(opts).unwrap();
    let _switch = Switch::start(
        &net,
        [0x52, 0x54, 0, 0xbe, 0xd0, 0x30],
        "Ethernet1/30",
        "leaf-30",
    )
    .unwrap();
    let mut spec = VmSpec::new("vm");
    spec.nics.push(Nic { mac: MAC.into() });

    let outcome = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await?;
            let uuid = conductor.enroll(&[MAC]);
            conductor.start_clean(&uuid, Some(vec![]))?;
            let mut vm = Vm::start(&net, &spec)?;
            let clean = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                .await;
            let waits = tokio::task::block_in_place(|| -> anyhow::Result<()> {
                vm.wait_console("eth0.100 ", Duration::from_secs(60))?;
                vm.wait_console("by DHCPv6", Duration::from_secs(60))?;
                Ok(())
            });
            // SSH from inside the namespace, with the key the kernel line carried.
            let ssh = tokio::task::block_in_place(|| {
                run(Command::new("ip")
                    .args(["netns", "exec", &net.ns.name, "ssh", "-i"])
                    .arg(&key)
                    .args([
                        "-o",
                        "StrictHostKeyChecking=no",
                        "-o",
                        "UserKnownHostsFile=/dev/null",
                        "-o",
                        "BatchMode=yes",
                        "-o",
                        "ConnectTimeout=20",
                        &format!("root@{GUEST}"),
                        "agent --version && echo ssh-session-ok",
                    ]))
            });
            let console = vm.console();
            println!("network: done after {:?} (QEMU wall time)", vm.elapsed());
            anyhow::Ok((clean, waits, ssh, console))
        })
        .unwrap()
        .unwrap();
    let (clean, waits, ssh, console) = outcome;
    let ctx = format!("\n--- console ({}) ---\n{console}", net.logs.display());
    clean.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    waits.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    // eth0.100 from LLDP, eth0.300 by the parent's MAC: each exists and
    // asked for DHCP.
    for vlan in ["eth0.100", "eth0.300"] {
        let line = console
            .lines()
            .find(|l| l.contains(&format!("net: {vlan} ")) && !l.contains("IPv6"))
            .unwrap_or_else(|| panic!("no IPv4 line for {vlan}{ctx}"));
        assert!(
            line.contains(&format!("{vlan} {MAC}: no address (no DHCP offer")),
            "{vlan} did not ask for DHCP: {line}{ctx}"
        );
    }
    assert!(
        console.contains("VLANs 100 from LLDP"),
        "no LLDP VLAN line{ctx}"
    );
    let v6 = console
        .lines()
        .find(|l| l.contains("net: eth0 ") && l.contains("IPv6"))
        .unwrap_or_else(|| panic!("no IPv6 line{ctx}"));
    assert!(
        v6.contains("fd99::1")
            && v6.contains("/128 by DHCPv6")
            && v6.contains("SLAAC fd99::5054:ff:fe30:1/64"),
        "IPv6 line: {v6}{ctx}"
    );
    let out = ssh.unwrap_or_else(|e| panic!("SSH with the sshkey= key failed: {e:#}{ctx}"));
    assert!(
        out.contains("ssh-session-ok"),
        "SSH session output: {out}{ctx}"
    );
}
