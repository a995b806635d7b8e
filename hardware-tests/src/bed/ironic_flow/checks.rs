//! The inspection and cleaning checks every form of the agent passes on the
//! bed: the deploy ramdisk (`tests/qemu/ironic_drives_ramdisk.rs`) and OpenShift's
//! container on a live system (`tests/qemu/openshift_liveos.rs`) answer Ironic
//! with the same inventory of the same kind of machine, and leave its disk
//! the same after cleaning.

use std::path::Path;

use anyhow::{ensure, Result};
use serde_json::{json, Value};

use crate::bed::dirty_disk;

/// The machine the inventory must describe.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    /// Its NIC's MAC, and the IPv4 address the bed's DHCP gives it.
    pub mac: &'a str,
    /// That address.
    pub ipv4: &'a str,
    /// vCPUs.
    pub cpus: u32,
    /// RAM.
    pub memory_mb: u32,
    /// Its disk's size in GiB (Ironic's `local_gb` is one less).
    pub disk_gib: u64,
    /// Its disk's serial.
    pub disk_serial: &'a str,
    /// `bios` or `uefi`.
    pub boot_mode: &'a str,
}

/// Checks the node Ironic left after inspection (`node`) and the inventory
/// it stored (`stored`, `Ironic::inventory`'s answer) against `want`:
/// no error, the properties Ironic derived (cpus, memory, disk, x86_64, the
/// boot mode), the NIC with its address, the disk by its serial, the boot
/// mode the agent reported.
pub fn inspected(node: &Value, stored: &Value, want: &Expected<'_>) -> Result<()> {
    ensure!(
        node["last_error"].is_null(),
        "inspection left an error: {}",
        node["last_error"]
    );
    let p = &node["properties"];
    ensure!(p["cpus"] == json!(want.cpus), "cpus: {p}");
    ensure!(p["memory_mb"] == json!(want.memory_mb), "memory_mb: {p}");
    ensure!(p["local_gb"] == json!(want.disk_gib - 1), "local_gb: {p}");
    ensure!(p["cpu_arch"] == json!("x86_64"), "cpu_arch: {p}");
    let mode = format!("boot_mode:{}", want.boot_mode);
    ensure!(
        p["capabilities"]
            .as_str()
            .is_some_and(|c| c.contains(&mode)),
        "no {mode} in the capabilities: {p}"
    );
    let inventory = &stored["inventory"];
    let nic = inventory["interfaces"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["mac_address"] == want.mac));
    ensure!(
        nic.is_some_and(|n| n["ipv4_address"] == json!(want.ipv4)),
        "no interface {} with {} in the stored inventory: {}",
        want.mac,
        want.ipv4,
        inventory["interfaces"]
    );
    let disk = inventory["disks"]
        .as_array()
        .and_then(|l| l.iter().find(|d| d["serial"] == json!(want.disk_serial)));
    ensure!(
        disk.is_some_and(|d| d["size"] == json!(want.disk_gib << 30)),
        "no {}-GiB disk {} in the stored inventory: {}",
        want.disk_gib,
        want.disk_serial,
        inventory["disks"]
    );
    ensure!(
        inventory["boot"]["current_boot_mode"] == json!(want.boot_mode),
        "boot mode: {}",
        inventory["boot"]
    );
    Ok(())
}

/// Checks a cleaning that ended `available` (`node`): no error, and the
/// machine's disk file `disk` without any partition table, filesystem
/// signature or ext4 superblock left.
pub fn cleaned(node: &Value, disk: &Path) -> Result<()> {
    ensure!(
        node["last_error"].is_null(),
        "cleaning left an error: {}",
        node["last_error"]
    );
    let left = dirty_disk::signatures(disk)?;
    ensure!(left.is_empty(), "cleaning left signatures: {left}");
    Ok(())
}
