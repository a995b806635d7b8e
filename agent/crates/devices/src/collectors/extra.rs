//! The `extra-hardware` inspection collector: IPA's `data`, the list of
//! `[category, item, key, value]` 4-tuples the `hardware` library's
//! `hardware-detect` prints (what ironic's `extra_hardware` hook and
//! inspection rules read), for a subset of its categories: system and
//! firmware identity, kernel, CPUs, NUMA node count, memory and banks,
//! disks and NICs. Built from the inventory and sysfs; no lshw, lscpu or
//! hardware-detect. Values are strings except the counts the library itself
//! reports as numbers (`cpu/physical/number`, `cpu/logical/number`,
//! `numa/nodes/count`).

use std::path::Path;

use serde_json::{json, Value};

use crate::inventory::{read_attr, smbios, under, Inventory};

/// The 4-tuples for `inv`, read from the machine under `root`.
pub fn data(root: &Path, inv: &Inventory) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut push = |a: &str, b: &str, c: &str, v: Value| out.push(json!([a, b, c, v]));
    let text = |v: &str| (!v.is_empty()).then(|| json!(v));

    // system / firmware (lshw's top node, `core` and `firmware`)
    let sv = &inv.system_vendor;
    for (key, v) in [
        ("serial", &sv.serial_number),
        ("name", &sv.product_name),
        ("vendor", &sv.manufacturer),
    ] {
        if let Some(v) = text(v) {
            push("system", "product", key, v);
        }
    }
    if let Some(uuid) = read_attr(&under(root, "/sys/class/dmi/id/product_uuid")) {
        push(
            "system",
            "product",
            "uuid",
            json!(uuid.to_ascii_lowercase()),
        );
    }
    for (key, v) in [
        ("version", &sv.firmware.version),
        ("date", &sv.firmware.build_date),
        ("vendor", &sv.firmware.vendor),
    ] {
        if let Some(v) = text(v) {
            push("firmware", "bios", key, v);
        }
    }
    if let Some(v) = read_attr(&under(root, "/proc/sys/kernel/osrelease")) {
        push("system", "kernel", "version", json!(v));
    }
    push("system", "kernel", "arch", json!(inv.cpu.architecture));
    if let Some(v) = read_attr(&under(root, "/proc/cmdline")) {
        push("system", "kernel", "cmdline", json!(v));
    }

    // cpu (lscpu's view: every socket gets the model of the first)
    let sockets = inv.cpu.socket_count.max(1);
    push("cpu", "physical", "number", json!(sockets));
    for s in 0..sockets {
        let tag = format!("physical_{s}");
        if let Some(m) = &inv.cpu.model_name {
            push("cpu", &tag, "product", json!(m));
        }
        push("cpu", &tag, "architecture", json!(inv.cpu.architecture));
        if !inv.cpu.flags.is_empty() {
            push("cpu", &tag, "flags", json!(inv.cpu.flags.join(" ")));
        }
    }
    push("cpu", "logical", "number", json!(inv.cpu.count));
    let nodes = std::fs::read_dir(under(root, "/sys/devices/system/node"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .strip_prefix("node")
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .count()
        })
        .unwrap_or(0);
    if nodes > 0 {
        push("numa", "nodes", "count", json!(nodes));
    }

    // memory (lshw: total in bytes, one bank per SMBIOS memory device)
    if let Some(mb) = inv.memory.physical_mb {
        push("memory", "total", "size", json!((mb << 20).to_string()));
    }
    let table = std::fs::read(under(root, "/sys/firmware/dmi/tables/DMI")).unwrap_or_default();
    let banks: Vec<_> = smbios::parse(&table)
        .into_iter()
        .filter(|s| s.kind == 17)
        .collect();
    for (i, b) in banks.iter().enumerate() {
        let tag = format!("bank:{i}");
        if let Some(mb) = smbios::memory_device_mib(b) {
            push("memory", &tag, "size", json!((mb << 20).to_string()));
        }
        if let Some(slot) = b.string(0x10) {
            push("memory", &tag, "slot", json!(slot));
        }
        if let Some(v) = b.string(0x17) {
            push("memory", &tag, "vendor", json!(v));
        }
    }
    if !banks.is_empty() {
        push("memory", "banks", "count", json!(banks.len().to_string()));
    }

    // disk (diskinfo.py: sd*/hd*/vd*/nvme*, size in GB of 10^9 bytes)
    let mut disks: Vec<(String, u64)> = std::fs::read_dir(under(root, "/sys/block"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    let b = n.as_bytes();
                    (b.len() > 2 && b[1] == b'd' && b"shv".contains(&b[0])) || n.starts_with("nvme")
                })
                .filter_map(|n| {
                    let sectors: u64 = read_attr(&under(root, &format!("/sys/block/{n}/size")))?
                        .parse()
                        .ok()?;
                    let gb = sectors * 512 / 1_000_000_000;
                    (gb > 0).then_some((n, gb))
                })
                .collect()
        })
        .unwrap_or_default();
    disks.sort();
    push("disk", "logical", "count", json!(disks.len().to_string()));
    for (name, gb) in &disks {
        push("disk", name, "size", json!(gb.to_string()));
        let dir = under(root, &format!("/sys/block/{name}"));
        for (file, key) in [
            ("device/vendor", "vendor"),
            ("device/model", "model"),
            ("device/rev", "rev"),
            ("queue/optimal_io_size", "optimal_io_size"),
            ("queue/physical_block_size", "physical_block_size"),
            ("queue/rotational", "rotational"),
        ] {
            if let Some(v) = read_attr(&dir.join(file)) {
                push("disk", name, key, json!(v));
            }
        }
    }

    // network (lshw's settings for each NIC)
    for i in &inv.interfaces {
        push("network", &i.name, "serial", json!(i.mac_address));
        if let Some(ip) = &i.ipv4_address {
            push("network", &i.name, "ipv4", json!(ip));
        }
        push(
            "network",
            &i.name,
            "link",
            json!(if i.has_carrier { "yes" } else { "no" }),
        );
        if let Some(d) = &i.driver {
            push("network", &i.name, "driver", json!(d));
        }
        if let Some(p) = &i.pci_address {
            push("network", &i.name, "businfo", json!(format!("pci@{p}")));
        }
    }
    out
}
