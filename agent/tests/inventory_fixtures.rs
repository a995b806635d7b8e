//! The inventory read from captured machines (`tests/fixtures/<machine>/`,
//! made with `hardware-tests/fixtures/capture.sh`), and from this machine.

use std::path::{Path, PathBuf};

use agent::hints;
use agent::inventory::{self, Inventory, Options};
use serde_json::{json, Value};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str) -> Inventory {
    inventory::collect(&Options::fixture(&fixture(name))).unwrap()
}

#[test]
fn dev_vm_the_development_machine() {
    let inv = read("dev-vm");
    assert_eq!(inv.cpu.model_name.as_deref(), Some("AMD EPYC"));
    assert_eq!(inv.cpu.count, 2);
    assert_eq!(inv.cpu.socket_count, 1);
    assert_eq!(inv.cpu.architecture, "x86_64");
    assert_eq!(inv.cpu.frequency.as_deref(), Some("2596.1480"));
    assert!(inv.cpu.flags.iter().any(|f| f == "avx512f"));
    assert_eq!(inv.cpu.flags.len(), 105);
    assert_eq!(inv.memory.total, 24_684_084 * 1024);
    // No SMBIOS here: 192 online 128 MiB memory blocks.
    assert_eq!(inv.memory.physical_mb, Some(24_576));

    // Loop devices and zram are not disks an OS can go to.
    assert_eq!(inv.disks.len(), 1, "{:#?}", inv.disks);
    let vda = &inv.disks[0];
    assert_eq!(vda.name, "/dev/vda");
    assert_eq!(vda.size, 536_870_912 * 512);
    assert_eq!(vda.tran.as_deref(), Some("virtio"));
    assert_eq!(vda.vendor.as_deref(), Some("0x1af4"));
    assert_eq!(vda.serial.as_deref(), Some("overlayblk"));
    assert_eq!(vda.model, None);
    assert_eq!(vda.wwn, None);
    assert_eq!(vda.hctl, None);
    assert!(vda.rotational);
    assert_eq!((vda.logical_sectors, vda.physical_sectors), (512, 4096));
    assert_eq!(
        vda.by_path.as_deref(),
        Some("/dev/disk/by-path/pci-0000:00:02.0")
    );
    assert!(!vda.read_only && !vda.removable);

    // ifb0/ifb1 are virtual, lo is loopback: only eth0 is a NIC.
    assert_eq!(inv.interfaces.len(), 1);
    let eth0 = &inv.interfaces[0];
    assert_eq!(eth0.name, "eth0");
    assert_eq!(eth0.mac_address, "02:fc:00:00:00:01");
    assert_eq!(eth0.ipv4_address.as_deref(), Some("192.0.2.2"));
    assert_eq!(eth0.ipv6_address.as_deref(), Some("fd00::2"));
    assert!(eth0.has_carrier);
    assert_eq!(eth0.speed_mbps, None, "virtio reports speed -1");
    assert_eq!(eth0.driver.as_deref(), Some("virtio_net"));
    assert_eq!(eth0.pci_address.as_deref(), Some("0000:00:03.0"));
    assert_eq!(
        (eth0.vendor.as_deref(), eth0.product.as_deref()),
        (Some("0x1af4"), Some("0x0001"))
    );

    assert_eq!(inv.hostname, "vm");
    assert_eq!(inv.boot.current_boot_mode, "bios");
    assert_eq!(inv.boot.pxe_interface, None);
    assert_eq!(
        (inv.bmc_address.clone(), inv.bmc_v6address.clone()),
        (None, None)
    );
    assert_eq!(inv.system_vendor.manufacturer, "");

    let choice = hints::choose(&inv.disks, None).unwrap();
    assert_eq!(choice.disk.name, "/dev/vda");
    let e = hints::choose(&inv.disks, Some(&json!({"size": "< 100"}))).unwrap_err();
    assert!(
        e.to_string()
            .contains("/dev/vda: size 256.00 GiB does not satisfy size < 100"),
        "{e}"
    );
}

#[test]
fn the_json_has_every_field_of_spec_4_1() {
    let v: Value = serde_json::to_value(read("dev-vm")).unwrap();
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        [
            "bmc_address",
            "bmc_v6address",
            "boot",
            "cpu",
            "disks",
            "hostname",
            "interfaces",
            "memory",
            "system_vendor"
        ]
    );
    assert_eq!(
        keys(&v["interfaces"][0]),
        [
            "biosdevname",
            "client_id",
            "driver",
            "has_carrier",
            "ipv4_address",
            "ipv6_address",
            "lldp",
            "mac_address",
            "name",
            "pci_address",
            "product",
            "speed_mbps",
            "vendor"
        ]
    );
    assert_eq!(
        keys(&v["cpu"]),
        [
            "architecture",
            "count",
            "flags",
            "frequency",
            "model_name",
            "socket_count"
        ]
    );
    assert_eq!(
        keys(&v["disks"][0]),
        [
            "by_path",
            "hctl",
            "logical_sectors",
            "model",
            "name",
            "physical_sectors",
            "read_only",
            "removable",
            "rotational",
            "serial",
            "size",
            "tran",
            "vendor",
            "wwn",
            "wwn_vendor_extension",
            "wwn_with_extension"
        ]
    );
    assert_eq!(keys(&v["memory"]), ["physical_mb", "total"]);
    assert_eq!(
        keys(&v["system_vendor"]),
        ["firmware", "manufacturer", "product_name", "serial_number"]
    );
    assert_eq!(
        keys(&v["system_vendor"]["firmware"]),
        ["build_date", "vendor", "version"]
    );
    assert_eq!(keys(&v["boot"]), ["current_boot_mode", "pxe_interface"]);
    assert!(v["memory"]["total"].is_u64() && v["disks"][0]["size"].is_u64());
    assert!(v["cpu"]["frequency"].is_string());
}

/// The live inventory agrees with what /proc and /sys say, read here
/// independently of the agent's code.
#[test]
fn this_machine_agrees_with_proc_and_sys() {
    let inv = inventory::collect(&Options::live(None)).unwrap();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let processors = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    assert_eq!(inv.cpu.count as usize, processors);
    assert_eq!(
        inv.cpu.count as usize,
        std::thread::available_parallelism().unwrap().get()
    );
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(inv.memory.total, kib * 1024);

    let mut disks = Vec::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if ["loop", "ram", "zram", "sr", "fd", "dm-", "md"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            continue;
        }
        let sectors: u64 = std::fs::read_to_string(e.path().join("size"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if sectors > 0 {
            disks.push((format!("/dev/{name}"), sectors * 512));
        }
    }
    disks.sort();
    let got: Vec<(String, u64)> = inv.disks.iter().map(|d| (d.name.clone(), d.size)).collect();
    assert_eq!(got, disks);
    assert!(!got.is_empty(), "this machine has at least one disk");

    for i in &inv.interfaces {
        let mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", i.name)).unwrap();
        assert_eq!(i.mac_address, mac.trim().to_lowercase());
    }
    let physical: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("device").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for n in physical {
        assert!(inv.interfaces.iter().any(|i| i.name == n), "{n} missing");
    }
}
