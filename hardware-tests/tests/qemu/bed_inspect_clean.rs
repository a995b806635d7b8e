//! On the QEMU test bed, the PXE-booted ramdisk reports the machine as it
//! is and cleans its disks:
//!
//! * **Inventory equals the VM's configuration**: a VM with 2 vCPUs,
//!   1536 MiB, a virtio-blk, an NVMe, a SATA and a SCSI disk (set serials,
//!   sizes and, where QEMU can set them, models) and two NICs, with an LLDP
//!   switch on the bridge, is inspected (no callback URL: IPA 13's other
//!   trigger, `ipa-inspection-collectors` with `ipa-api-url`, posts to the
//!   API's `/v1/continue_inspection`; `ipa-collect-lldp=1`); the document
//!   the conductor receives has exactly
//!   those CPUs, memory, disks and MACs, and the chassis and port the
//!   switch sent on both NICs.
//! * **Automated cleaning** (`erase_devices_metadata` at 99, then
//!   `erase_devices` at 10, as Ironic runs the agent's priorities) of
//!   virtio-blk, NVMe and SATA disks that carry a GPT and ext4: afterwards
//!   no disk has a partition table or filesystem signature (checked on the
//!   disk files by the host's libblkid after the VM is gone), and the NVMe
//!   disk was erased by Format NVM with secure erase.

use std::path::Path;
use std::time::Duration;

use agent::testconductor::{Settings, TestConductor};
use hardware_tests::bed::dirty_disk;
use hardware_tests::bed::lldp::Switch;
use hardware_tests::bed::{self, Bus, Disk, Net, NetOptions, Nic, Vm, VmSpec, BRIDGE_IP};
use hardware_tests::require_root;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const CHASSIS: [u8; 6] = [0x52, 0x54, 0x00, 0xbe, 0xd0, 0x01];

fn kernel_args(extra: &str) -> String {
    format!("console=ttyS0 quiet panic=-1 ipa-api-url=http://{BRIDGE_IP}:6385 {extra}")
}

fn disk(dir: &Path, name: &str, size: u64, bus: Bus, model: Option<&str>) -> Disk {
    Disk {
        path: dir.join(format!("{name}.img")),
        size,
        bus,
        serial: name.to_string(),
        model: model.map(str::to_string),
    }
}

/// Boots `spec` and runs `operation` on its node until `state`; returns the node.
fn run_node(
    net: &Net,
    spec: &VmSpec,
    macs: &[&str],
    state: &str,
    operation: impl Fn(&TestConductor, &str) -> anyhow::Result<()> + Send + Sync,
) -> (agent::testconductor::node::Node, String) {
    let out = net
        .block_on(async {
            let conductor = TestConductor::start_on(
                Settings::default(),
                format!("{BRIDGE_IP}:6385").parse().unwrap(),
            )
            .await?;
            let uuid = conductor.enroll(macs);
            operation(&conductor, &uuid)?;
            let mut vm = Vm::start(net, spec)?;
            let node = conductor
                .wait_for_state(&uuid, state, Duration::from_secs(420))
                .await;
            println!(
                "{}: {state} after {:?} (QEMU wall time)",
                spec.name,
                vm.elapsed()
            );
            vm.kill();
            let console = vm.console();
            let node = node.map_err(|e| {
                anyhow::anyhow!(
                    "{e:#}\n--- transcript ---\n{}\n--- console {} ---\n{console}",
                    conductor.transcript().join("\n"),
                    vm.console_path().display()
                )
            })?;
            anyhow::Ok((node, console))
        })
        .unwrap();
    out.unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn inventory_equals_the_vm() {
    require_root("the QEMU test bed");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let macs = ["52:54:00:20:00:01", "52:54:00:20:00:02"];
    let net = Net::start(NetOptions::pxe(
        "inspect",
        &ramdisk,
        &kernel_args("ipa-inspection-collectors=default ipa-collect-lldp=1"),
    ))
    .unwrap();
    let _switch = Switch::start(&net, CHASSIS, "Ethernet1/7", "leaf-7").unwrap();
    let mut spec = VmSpec::new("vm");
    spec.cpus = 2;
    spec.memory_mb = 1536;
    spec.disks = vec![
        disk(tmp.path(), "VIRT0001", 4 * GIB, Bus::Virtio, None),
        disk(tmp.path(), "NVME0002", 5 * GIB, Bus::Nvme, None),
        disk(
            tmp.path(),
            "SATA0003",
            6 * GIB,
            Bus::Sata,
            Some("BED SATA DISK"),
        ),
        disk(
            tmp.path(),
            "SCSI0004",
            7 * GIB,
            Bus::Scsi,
            Some("BED SCSI DISK"),
        ),
    ];
    spec.nics = macs.iter().map(|m| Nic { mac: m.to_string() }).collect();
    let (node, console) = run_node(&net, &spec, &macs, "manageable", |c, uuid| {
        c.start_inspect(uuid)
    });
    let doc = node
        .inspection_data
        .unwrap_or_else(|| panic!("no inspection data; console:\n{console}"));
    let inv = &doc["inventory"];
    let ctx = format!("\ninventory: {inv:#}");

    assert_eq!(inv["cpu"]["count"], 2, "CPU count{ctx}");
    assert_eq!(inv["cpu"]["architecture"], "x86_64", "{ctx}");
    assert_eq!(inv["memory"]["physical_mb"], 1536, "physical memory{ctx}");
    let total = inv["memory"]["total"].as_u64().unwrap();
    assert!(
        total > 1200 * MIB && total < 1536 * MIB,
        "MemTotal {total} is not a little below 1536 MiB{ctx}"
    );

    let disks = inv["disks"].as_array().unwrap();
    assert_eq!(disks.len(), spec.disks.len(), "disk count{ctx}");
    for d in &spec.disks {
        let found = disks
            .iter()
            .find(|x| x["serial"] == d.serial.as_str())
            .unwrap_or_else(|| panic!("disk {} missing{ctx}", d.serial));
        assert_eq!(found["size"], d.size, "size of {}{ctx}", d.serial);
        if let Some(m) = &d.model {
            assert_eq!(found["model"], m.as_str(), "model of {}{ctx}", d.serial);
        }
        let name = found["name"].as_str().unwrap();
        let expect = match d.bus {
            Bus::Virtio => "/dev/vd",
            Bus::Nvme => "/dev/nvme",
            Bus::Sata | Bus::Scsi | Bus::Usb => "/dev/sd",
        };
        assert!(name.starts_with(expect), "{} is {name}{ctx}", d.serial);
    }

    let ifaces = inv["interfaces"].as_array().unwrap();
    let chassis: String = CHASSIS.iter().map(|b| format!("{b:02x}")).collect();
    let port: String = b"Ethernet1/7".iter().map(|b| format!("{b:02x}")).collect();
    for mac in macs {
        let i = ifaces
            .iter()
            .find(|i| i["mac_address"] == mac)
            .unwrap_or_else(|| panic!("NIC {mac} missing{ctx}"));
        let tlvs = i["lldp"].as_array().cloned().unwrap_or_default();
        let has = |t: u64, hex: &str| tlvs.iter().any(|x| x[0] == t && x[1] == hex);
        assert!(has(1, &format!("04{chassis}")), "{mac}: chassis TLV{ctx}");
        assert!(has(2, &format!("05{port}")), "{mac}: port TLV{ctx}");
    }
    assert_eq!(
        node.properties["cpus"], 2,
        "the conductor's hooks did not set cpus"
    );
}

#[test]
fn automated_clean_leaves_no_signatures_and_formats_nvme() {
    require_root("the QEMU test bed");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mac = "52:54:00:20:00:11";
    let net = Net::start(NetOptions::pxe("clean", &ramdisk, &kernel_args(""))).unwrap();
    let mut spec = VmSpec::new("vm");
    spec.disks = vec![
        disk(tmp.path(), "VIRT0011", 128 * MIB, Bus::Virtio, None),
        disk(tmp.path(), "NVME0012", 128 * MIB, Bus::Nvme, None),
        disk(
            tmp.path(),
            "SATA0013",
            128 * MIB,
            Bus::Sata,
            Some("BED SATA DISK"),
        ),
    ];
    for d in &spec.disks {
        dirty_disk::gpt_ext4(&d.path, d.size).unwrap();
    }
    spec.nics.push(Nic { mac: mac.into() });
    let (_node, console) = run_node(&net, &spec, &[mac], "available", |c, uuid| {
        c.start_clean(uuid, None)
    });
    for d in &spec.disks {
        let left = dirty_disk::signatures(&d.path).unwrap();
        assert!(
            left.is_empty(),
            "{} still has: {left}\nconsole:\n{console}",
            d.serial
        );
    }
    assert!(
        console.contains("NVMe format, secure erase setting"),
        "the NVMe disk was not erased by Format NVM; console {}:\n{console}",
        net.logs.join("vm.console.log").display()
    );
}
