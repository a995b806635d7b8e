//! The inventory read from captured machines (`tests/fixtures/<machine>/`,
//! made with `hardware-tests/fixtures/capture.sh`), and from this machine.

use std::path::{Path, PathBuf};

use agent_devices::hints;
use agent_devices::inventory::{self, Inventory, Options};
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

fn disk<'a>(inv: &'a Inventory, name: &str) -> &'a inventory::Disk {
    inv.disks
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", inv.disks))
}

/// q35 + SeaBIOS, 2 sockets, SMBIOS strings, SATA/NVMe/virtio-blk/virtio-scsi,
/// three NICs (see hardware-tests/fixtures/capture-qemu.sh).
#[test]
fn qemu_q35_bios_with_sata_nvme_virtio_and_scsi_disks() {
    let inv = read("qemu-q35-bios");
    assert_eq!(
        inv.cpu.model_name.as_deref(),
        Some("QEMU Virtual CPU version 2.5+")
    );
    assert_eq!((inv.cpu.count, inv.cpu.socket_count), (2, 2));
    assert_eq!(inv.memory.physical_mb, Some(1024), "SMBIOS type 17");
    assert_eq!(inv.memory.total, 1_007_038_464);
    let sv = &inv.system_vendor;
    assert_eq!(
        (
            sv.manufacturer.as_str(),
            sv.product_name.as_str(),
            sv.serial_number.as_str()
        ),
        ("Fixture Systems", "Q35 Capture", "FIX-0001")
    );
    assert_eq!(
        (
            sv.firmware.vendor.as_str(),
            sv.firmware.version.as_str(),
            sv.firmware.build_date.as_str()
        ),
        ("SeaBIOS-Fixture", "1.16.2-fixture", "04/01/2014")
    );
    assert_eq!(inv.boot.current_boot_mode, "bios");
    assert_eq!(
        inv.boot.pxe_interface.as_deref(),
        Some("01-52-54-00-f1-00-01")
    );
    assert_eq!(inv.hostname, "guest");

    let names: Vec<&str> = inv.disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["/dev/nvme0n1", "/dev/sda", "/dev/sdb", "/dev/vda"]);
    let nvme = disk(&inv, "/dev/nvme0n1");
    assert_eq!(nvme.size, 8 << 30);
    assert_eq!(nvme.tran.as_deref(), Some("nvme"));
    assert_eq!(nvme.model.as_deref(), Some("QEMU NVMe Ctrl"));
    assert_eq!(nvme.serial.as_deref(), Some("NVME-0001"));
    assert_eq!(
        nvme.wwn.as_deref(),
        Some("nvme.1b36-4e564d452d30303031-51454d55204e564d65204374726c-00000001")
    );
    assert_eq!(
        nvme.by_path.as_deref(),
        Some("/dev/disk/by-path/pci-0000:00:02.0-nvme-1")
    );
    assert!(!nvme.rotational);

    let scsi = disk(&inv, "/dev/sda");
    assert_eq!(scsi.size, 100 << 30);
    assert_eq!(scsi.wwn.as_deref(), Some("0x5000c500a1b2c3d4"));
    assert_eq!(
        scsi.wwn_with_extension.as_deref(),
        Some("0x5000c500a1b2c3d4")
    );
    assert_eq!(scsi.wwn_vendor_extension, None);
    assert_eq!(
        scsi.serial.as_deref(),
        Some("SCSI-0001"),
        "from VPD page 0x80"
    );
    assert_eq!(
        (scsi.vendor.as_deref(), scsi.model.as_deref()),
        (Some("FIXTURE"), Some("ScsiDisk"))
    );
    assert_eq!(scsi.hctl.as_deref(), Some("0:0:1:0"));
    assert_eq!(
        scsi.by_path.as_deref(),
        Some("/dev/disk/by-path/pci-0000:00:04.0-scsi-0:0:1:0")
    );
    assert!(!scsi.rotational, "rotation_rate=1 means SSD");

    let sata = disk(&inv, "/dev/sdb");
    assert_eq!(sata.tran.as_deref(), Some("sata"));
    assert_eq!(sata.vendor.as_deref(), Some("ATA"));
    assert_eq!(sata.model.as_deref(), Some("FixtureSATA"));
    assert_eq!(sata.serial.as_deref(), Some("SATA-0001"));
    assert_eq!(sata.wwn, None, "a T10 vendor id is not a WWN");
    assert_eq!(sata.hctl.as_deref(), Some("3:0:0:0"));
    assert_eq!(
        sata.by_path.as_deref(),
        Some("/dev/disk/by-path/pci-0000:00:1f.2-ata-3.0")
    );
    assert!(sata.rotational);

    let vda = disk(&inv, "/dev/vda");
    assert_eq!((vda.size, vda.tran.as_deref()), (6 << 30, Some("virtio")));
    assert_eq!(vda.serial.as_deref(), Some("VBLK-0001"));

    let nics: Vec<(&str, &str, Option<&str>, Option<u64>)> = inv
        .interfaces
        .iter()
        .map(|i| {
            (
                i.name.as_str(),
                i.mac_address.as_str(),
                i.driver.as_deref(),
                i.speed_mbps,
            )
        })
        .collect();
    assert_eq!(
        nics,
        [
            ("eth0", "52:54:00:f1:00:01", Some("virtio_net"), None),
            ("eth1", "52:54:00:f1:00:03", Some("e1000"), Some(1000)),
            ("eth2", "52:54:00:f1:00:02", Some("e1000e"), Some(1000)),
        ]
    );
    let eth1 = &inv.interfaces[1];
    assert_eq!(
        (eth1.vendor.as_deref(), eth1.product.as_deref()),
        (Some("0x8086"), Some("0x100e"))
    );
    assert_eq!(eth1.pci_address.as_deref(), Some("0000:00:07.0"));
    assert_eq!(
        inv.interfaces[0].ipv4_address.as_deref(),
        Some("192.0.2.10")
    );
    assert_eq!(
        inv.interfaces[2].ipv6_address.as_deref(),
        Some("fe80::5054:ff:fef1:2%eth2")
    );
    assert!(inv.interfaces.iter().all(|i| i.has_carrier));

    // Root device: default, then by each kind of stable id.
    let pick = |h: Value| hints::choose(&inv.disks, Some(&h)).map(|c| c.disk.name);
    assert_eq!(
        hints::choose(&inv.disks, None).unwrap().disk.name,
        "/dev/vda"
    );
    assert_eq!(
        pick(json!({"wwn": "0x5000c500a1b2c3d4"})).unwrap(),
        "/dev/sda"
    );
    assert_eq!(pick(json!({"serial": "sata-0001"})).unwrap(), "/dev/sdb");
    assert_eq!(pick(json!({"tran": "nvme"})).unwrap(), "/dev/nvme0n1");
    assert_eq!(
        pick(json!({"by_path": "/dev/disk/by-path/pci-0000:00:1f.2-ata-3.0"})).unwrap(),
        "/dev/sdb"
    );
    assert_eq!(
        pick(json!({"rotational": false, "size": ">= 50"})).unwrap(),
        "/dev/sda"
    );
    assert!(pick(json!({"hctl": "9:0:0:0"})).is_err());
}

/// q35 + OVMF: a USB stick, a 4Kn SCSI disk, a read-only virtio disk.
#[test]
fn qemu_q35_uefi_with_usb_4kn_and_read_only_disks() {
    let inv = read("qemu-q35-uefi");
    assert_eq!(inv.boot.current_boot_mode, "uefi");
    assert_eq!(inv.boot.pxe_interface, None);
    assert_eq!((inv.cpu.count, inv.cpu.socket_count), (1, 1));
    assert_eq!(inv.memory.physical_mb, Some(1024));
    assert_eq!(inv.system_vendor.manufacturer, "QEMU");
    assert_eq!(
        inv.system_vendor.product_name,
        "Standard PC (Q35 + ICH9, 2009)"
    );
    assert_eq!(
        inv.system_vendor.firmware.vendor,
        "EFI Development Kit II / OVMF"
    );

    let sda = disk(&inv, "/dev/sda");
    assert_eq!((sda.logical_sectors, sda.physical_sectors), (4096, 4096));
    assert_eq!(sda.size, 50 << 30);
    assert_eq!(sda.wwn.as_deref(), Some("0x5000c500deadbeef"));
    let usb = disk(&inv, "/dev/sdb");
    assert_eq!(usb.tran.as_deref(), Some("usb"));
    assert!(usb.removable);
    assert_eq!(
        usb.serial.as_deref(),
        Some("USB-0001"),
        "from the USB device"
    );
    assert_eq!(
        usb.by_path.as_deref(),
        Some("/dev/disk/by-path/pci-0000:00:02.0-usb-0:1:1.0-scsi-0:0:0:0")
    );
    let vda = disk(&inv, "/dev/vda");
    assert!(vda.read_only);
    assert_eq!(vda.serial.as_deref(), Some("VBLK-RO"));

    // The 5 GiB read-only disk would be IPA's guess; it is refused here.
    let c = hints::choose(&inv.disks, None).unwrap();
    assert_eq!(c.disk.name, "/dev/sda");
    let reasons: Vec<(&str, &str)> = c
        .rejected
        .iter()
        .map(|r| (r.name.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("/dev/sdb", "smaller than 4 GiB (2147483648 bytes)"),
            ("/dev/vda", "read-only device")
        ]
    );
    assert_eq!(inv.interfaces.len(), 2);
    assert_eq!(inv.interfaces[1].driver.as_deref(), Some("e1000e"));
}
