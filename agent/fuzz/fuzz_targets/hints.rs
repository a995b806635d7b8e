//! Root-device hints (`properties.root_device`, operators `<in>`, `<or>`,
//! `s==`, size ranges...) matched against a fixed set of disks.
#![no_main]

use agent_devices::hints::choose;
use agent_devices::inventory::disks::Disk;
use libfuzzer_sys::fuzz_target;

fn disk(name: &str, size: u64, serial: &str, rotational: bool) -> Disk {
    Disk {
        name: format!("/dev/{name}"),
        model: Some("QEMU HARDDISK".into()),
        size,
        rotational,
        wwn: Some("0x5000c500a1b2c3d4".into()),
        serial: Some(serial.into()),
        vendor: Some("ATA".into()),
        wwn_with_extension: Some("0x5000c500a1b2c3d4".into()),
        wwn_vendor_extension: None,
        hctl: Some("0:0:0:0".into()),
        by_path: Some(format!("/dev/disk/by-path/pci-0000:00:05.0-{name}")),
        logical_sectors: 512,
        physical_sectors: 4096,
        tran: Some("sata".into()),
        read_only: false,
        removable: false,
        serials: Vec::new(),
        wwns: Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let disks = [
        disk("sda", 10 << 30, "S1", true),
        disk("sdb", 40 << 30, "S2", false),
        disk("nvme0n1", 1 << 40, "N1", false),
        disk("sdc", 0, "", false),
    ];
    if let Ok(c) = choose(&disks, Some(&v)) {
        assert!(disks.iter().any(|d| d.name == c.disk.name));
    }
    // The same document as a node: its hints, typed where it arrives.
    if let Some(h) = ironic_types::node::Node::from_document(v)
        .and_then(|n| n.root_device_hints().cloned())
    {
        let _ = choose(&disks, Some(&serde_json::Value::Object(h)));
    }
});
