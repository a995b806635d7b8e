//! The optional inspection collectors (`usb-devices`, `numa-topology`,
//! `dmi-decode`, `logs`) on the captured fixture trees: concrete values of
//! the machines `hardware-tests/fixtures/capture*.sh` captured.

use std::path::{Path, PathBuf};

use agent::inspect;
use agent_base::config::Config;
use agent_devices::collectors::{dmi, extra, numa, usb};
use agent_devices::inventory;
use base64::Engine;
use serde_json::{json, Value};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn usb_devices_of_the_uefi_vm() {
    // xHCI with the QEMU USB stick; both root hubs are left out.
    assert_eq!(
        usb::devices(&fixture("qemu-q35-uefi")),
        json!([{
            "product": "QEMU USB HARDDRIVE",
            "vendor": "QEMU",
            "handle": "USB:2:2",
            "serial": "USB-0001",
            "vendor_id": "46f4",
            "product_id": "0001",
        }])
    );
    // No USB bus at all: null, as IPA reports it.
    assert_eq!(usb::devices(&fixture("dev-vm")), Value::Null);
}

#[test]
fn numa_topology_of_the_two_node_vm_and_this_machine() {
    assert_eq!(
        numa::topology(&fixture("qemu-q35-bios")).unwrap(),
        json!({
            "ram": [
                {"numa_node": 0, "size_kb": 514_636},
                {"numa_node": 1, "size_kb": 470_160},
            ],
            "cpus": [
                {"cpu": 0, "numa_node": 0, "thread_siblings": [0]},
                {"cpu": 0, "numa_node": 1, "thread_siblings": [1]},
            ],
            // e1000e and e1000 (PCI) state no node; virtio-net has no numa_node file.
            "nics": [
                {"name": "eth1", "numa_node": -1},
                {"name": "eth2", "numa_node": -1},
            ],
        })
    );
    let dev = numa::topology(&fixture("dev-vm")).unwrap();
    assert_eq!(dev["ram"], json!([{"numa_node": 0, "size_kb": 23_947_468}]));
    assert_eq!(
        dev["cpus"],
        json!([{"cpu": 0, "numa_node": 0, "thread_siblings": [0]},
               {"cpu": 1, "numa_node": 0, "thread_siblings": [1]}])
    );
    let uefi = numa::topology(&fixture("qemu-q35-uefi")).unwrap();
    assert_eq!(uefi["ram"], json!([{"numa_node": 0, "size_kb": 978_200}]));
    assert_eq!(uefi["nics"], json!([{"name": "eth1", "numa_node": -1}]));
}

#[test]
fn dmi_of_the_bios_vm() {
    let d = dmi::decode(&fixture("qemu-q35-bios")).unwrap();
    assert_eq!(d["bios"]["Vendor"], "SeaBIOS-Fixture");
    assert_eq!(d["bios"]["Version"], "1.16.2-fixture");
    assert_eq!(d["bios"]["Release Date"], "04/01/2014");
    assert_eq!(d["cpu"].as_array().unwrap().len(), 2);
    assert_eq!(d["cpu"][0]["Socket Designation"], "CPU 0");
    assert_eq!(d["cpu"][1]["Socket Designation"], "CPU 1");
    assert_eq!(d["cpu"][0]["Manufacturer"], "QEMU");
    assert_eq!(d["cpu"][0]["Type"], "Central Processor");
    assert_eq!(d["cpu"][0]["Status"], "Populated, Enabled");
    assert_eq!(d["cpu"][0]["Max Speed"], "2000 MHz");
    assert_eq!(d["cpu"][0]["Handle"], "Handle 0x0400, DMI type 4, 42 bytes");
    assert_eq!(d["memory"]["Number Of Devices"], 1);
    assert_eq!(d["memory"]["Use"], "System Memory");
    let devices = d["memory"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["Size"], "1 GB");
    assert_eq!(devices[0]["Locator"], "DIMM 0");
    assert_eq!(devices[0]["Form Factor"], "DIMM");
    assert_eq!(devices[0]["Type"], "RAM");
    assert!(dmi::decode(&fixture("dev-vm")).is_none());
}

#[test]
fn extra_hardware_tuples_of_the_bios_vm() {
    let root = fixture("qemu-q35-bios");
    let inv = inventory::collect(&inventory::Options::fixture(&root)).unwrap();
    let data = extra::data(&root, &inv);
    let has = |a: &str, b: &str, c: &str, v: Value| {
        assert!(
            data.contains(&json!([a, b, c, v])),
            "[{a}, {b}, {c}, {v}] missing from {data:#?}"
        )
    };
    has("system", "product", "name", json!("Q35 Capture"));
    has("system", "product", "vendor", json!("Fixture Systems"));
    has("system", "product", "serial", json!("FIX-0001"));
    has("firmware", "bios", "vendor", json!("SeaBIOS-Fixture"));
    has("cpu", "physical", "number", json!(2));
    has("cpu", "logical", "number", json!(2));
    has(
        "cpu",
        "physical_1",
        "product",
        json!("QEMU Virtual CPU version 2.5+"),
    );
    has("numa", "nodes", "count", json!(2));
    has("memory", "total", "size", json!("1073741824"));
    has("memory", "banks", "count", json!("1"));
    has("memory", "bank:0", "slot", json!("DIMM 0"));
    has("disk", "logical", "count", json!("4"));
    has("disk", "nvme0n1", "size", json!("8"));
    has("disk", "vda", "size", json!("6"));
    has("network", "eth0", "serial", json!("52:54:00:f1:00:01"));
    has("network", "eth0", "ipv4", json!("192.0.2.10"));
    has("network", "eth0", "businfo", json!("pci@0000:00:05.0"));
    assert!(data
        .iter()
        .all(|t| t.as_array().is_some_and(|a| a.len() == 4)));
}

#[tokio::test]
async fn collectors_put_their_keys_in_the_document() {
    let config = Config {
        inspection_collectors: [
            "default",
            "usb-devices",
            "numa-topology",
            "dmi-decode",
            "extra-hardware",
            "logs",
        ]
        .map(String::from)
        .to_vec(),
        ..Config::default()
    };
    let doc = inspect::collect(
        &config,
        &inventory::Options::fixture(&fixture("qemu-q35-bios")),
    )
    .await;
    assert_eq!(doc["usb_devices"], Value::Null);
    assert_eq!(doc["numa_topology"]["ram"][1]["size_kb"], 470_160);
    assert_eq!(doc["dmi"]["bios"]["Vendor"], "SeaBIOS-Fixture");
    assert_eq!(
        doc["data"][0],
        json!(["system", "product", "serial", "FIX-0001"])
    );
    assert_eq!(doc["error"], Value::Null);
    // logs: base64 of a gzip stream (the tar inside is tested in logs/).
    let gz = base64::engine::general_purpose::STANDARD
        .decode(doc["logs"].as_str().unwrap())
        .unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b]);
}
