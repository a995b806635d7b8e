//! On the QEMU test bed, a VM with a BMC (QEMU's `ipmi-bmc-sim` behind a
//! KCS interface) is inspected: the ramdisk loads ipmi_si (by the ACPI/SMBIOS
//! modalias) and ipmi_devintf, the agent finds `/dev/ipmi0` and asks the BMC
//! for its LAN configuration over the kernel's IPMI ioctls.
//!
//! QEMU's simulator implements no Transport commands, so it answers Get LAN
//! Configuration Parameters with completion code 0xC1 (invalid command) on
//! every channel. The test proves the whole path all the same: the console
//! carries that completion code, which only a real round trip through the
//! device can produce, and the inventory has IPA's "IPMI present, nothing
//! configured" values (`0.0.0.0`, `::/0`, no MAC) where a VM without a BMC
//! reports `null`. The BMC is asked once per boot, however often the
//! inventory is collected.

use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::{self, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::require_root;
use serde_json::Value;

#[test]
fn bmc_of_a_vm_with_ipmi() {
    require_root("the QEMU test bed");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let mac = "52:54:00:30:00:01";
    let net = Net::start(NetOptions::pxe(
        "ipmi",
        &ramdisk,
        &format!(
            "console=ttyS0 quiet panic=-1 ipa-api-url=http://{BRIDGE_IP}:6385 \
             ipa-inspection-callback-url=http://{BRIDGE_IP}:6385/v1/continue_inspection"
        ),
    ))
    .unwrap();
    let mut spec = VmSpec::new("ipmi");
    spec.nics = vec![Nic {
        mac: mac.to_string(),
    }];
    spec.ipmi = true;
    let (doc, console) = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await?;
            let uuid = conductor.enroll(&[mac]);
            conductor.start_inspect(&uuid)?;
            let mut vm = Vm::start(&net, &spec)?;
            let node = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(420))
                .await;
            println!("inspected after {:?} (QEMU wall time)", vm.elapsed());
            vm.kill();
            let console = vm.console();
            let node = node.map_err(|e| {
                anyhow::anyhow!(
                    "{e:#}\n--- console {} ---\n{console}",
                    vm.console_path().display()
                )
            })?;
            anyhow::Ok((node.inspection_data, console))
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:#}"));
    let doc = doc.unwrap_or_else(|| panic!("no inspection data; console:\n{console}"));
    let inv = &doc["inventory"];
    let ctx = format!("\ninventory: {inv:#}\n--- console ---\n{console}");
    // Once: the inventory is collected for inspection and again for lookup,
    // but the BMC is asked only the first time (IPA's cache).
    assert_eq!(
        console.matches("completion code 0xc1").count(),
        1,
        "the BMC's answer is not on the console exactly once{ctx}"
    );
    assert!(
        !console.contains("cannot use the IPMI device") && !console.contains("did not answer"),
        "the IPMI device failed{ctx}"
    );
    assert_eq!(inv["bmc_address"], "0.0.0.0", "{ctx}");
    assert_eq!(inv["bmc_v6address"], "::/0", "{ctx}");
    assert_eq!(inv.get("bmc_mac"), None::<&Value>, "{ctx}");
}
