//! Boot, lookup and heartbeat on the QEMU test bed: the ramdisk PXE-boots
//! from dnsmasq in the bed's namespace (iPXE under SeaBIOS; UEFI PXE then
//! iPXE under OVMF), gets its address by DHCP, finds the test conductor
//! (listening on the bed's bridge) either from `ipa-api-url` on the kernel
//! command line or by mDNS, looks its node up, heartbeats over HTTPS, and
//! answers the `get_clean_steps` of an empty manual clean, which takes the
//! node back to `manageable`. On the debug shell, `agent status` shows the
//! running agent's node; an agent killed from the shell is restarted by
//! PID 1 with the reason on the console. Wall times are printed.

use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::{self, Firmware, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::require_root;

const ARGS: &str = "console=ttyS0 quiet panic=-1 agent.shell=1";

fn boot_and_heartbeat(name: &str, mac: &str, firmware: Firmware, api_url: &str) {
    require_root("the PXE test bed");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let net = Net::start(NetOptions::pxe(
        name,
        &ramdisk,
        &format!("{ARGS} ipa-api-url={api_url}"),
    ))
    .unwrap();
    let mut spec = VmSpec::new("vm");
    spec.firmware = firmware;
    spec.nics.push(Nic { mac: mac.into() });
    let result = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await?;
            // Ironic's [conductor]enable_mdns advertisement (used only when
            // the kernel argument says `mdns`).
            let mdns = mdns_sd::ServiceDaemon::new()?;
            let props: std::collections::HashMap<String, String> =
                [("protocol".to_string(), "http".to_string())].into();
            mdns.register(mdns_sd::ServiceInfo::new(
                agent_base::discovery::SERVICE_TYPE,
                "baremetal",
                "conductor.local.",
                BRIDGE_IP,
                6385,
                props,
            )?)?;
            let uuid = conductor.enroll(&[mac]);
            conductor.start_clean(&uuid, Some(vec![]))?;
            let mut vm = Vm::start(&net, &spec)?;
            let outcome = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(300))
                .await;
            let t = conductor.transcript();
            let heartbeat = t
                .iter()
                .any(|l| l.contains("heartbeat") && l.ends_with("-> 202"));
            println!("{name}: clean done {:?} after starting QEMU", vm.elapsed());
            // The debug shell answers on the console while the agent runs.
            vm.type_line("echo shell-$((6*7))-ok; agent --version")?;
            let shell = tokio::task::block_in_place(|| {
                vm.wait_console("shell-42-ok", Duration::from_secs(30))?;
                // The debug-shell tools see the running agent.
                vm.type_line("agent status")?;
                vm.wait_console(&format!("node: {uuid}"), Duration::from_secs(30))?;
                vm.wait_console("(ramdisk mode)", Duration::from_secs(5))?;
                // PID 1 restarts a crashed agent and says why.
                vm.type_line("kill -9 $(ps | awk '/self\\/exe ramdisk/ && !/awk/ {print $1}')")?;
                vm.wait_console(
                    "the agent killed by SIGKILL; restarting it",
                    Duration::from_secs(30),
                )
            });
            let _ = mdns.shutdown();
            anyhow::Ok((outcome, heartbeat, shell, vm.console(), t))
        })
        .unwrap();
    let (outcome, heartbeat, shell, console, transcript) = result.unwrap();
    let dhcp = net.dnsmasq_log();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ({}) ---\n{console}",
        transcript.join("\n"),
        net.logs.display()
    );
    outcome.unwrap_or_else(|e| panic!("{e:#}{ctx}"));
    assert!(heartbeat, "no accepted heartbeat{ctx}");
    assert!(
        dhcp.contains("boot.ipxe"),
        "iPXE did not get boot.ipxe from dnsmasq:\n{dhcp}"
    );
    assert!(
        transcript
            .iter()
            .any(|l| l.contains("GET /v1/lookup") && l.ends_with("-> 200")),
        "no lookup{ctx}"
    );
    shell.unwrap_or_else(|e| panic!("the debug shell did not answer: {e:#}{ctx}"));
    if api_url == "mdns" {
        assert!(
            console.contains("conductor found by mDNS"),
            "no mDNS discovery{ctx}"
        );
    }
}

#[test]
fn bios_pxe_conductor_from_kernel_argument() {
    boot_and_heartbeat(
        "boot-bios-karg",
        "52:54:00:10:00:01",
        Firmware::Bios,
        &format!("http://{BRIDGE_IP}:6385"),
    );
}

#[test]
fn uefi_pxe_conductor_found_by_mdns() {
    let vars = bed::logs_dir("boot-uefi-mdns")
        .unwrap()
        .join("OVMF_VARS.fd");
    let _ = std::fs::remove_file(&vars);
    boot_and_heartbeat(
        "boot-uefi-mdns",
        "52:54:00:10:00:02",
        Firmware::Uefi { vars },
        "mdns",
    );
}
