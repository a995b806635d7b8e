//! System identity: vendor, product, serial and firmware (SMBIOS, through
//! `/sys/class/dmi/id` or the raw table; on Arm boards without SMBIOS the
//! device tree), boot mode and host name.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{read_attr, smbios, under};

/// `inventory.system_vendor`. Unknown values are `""`, as IPA sends them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemVendor {
    /// Product name (SMBIOS type 1).
    pub product_name: String,
    /// Serial number (type 1).
    pub serial_number: String,
    /// Manufacturer (type 1).
    pub manufacturer: String,
    /// Firmware (type 0).
    pub firmware: Firmware,
}

/// `inventory.system_vendor.firmware`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Firmware {
    /// BIOS/UEFI vendor.
    pub vendor: String,
    /// Version.
    pub version: String,
    /// Release date as SMBIOS gives it (`MM/DD/YYYY`).
    pub build_date: String,
}

/// `inventory.boot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Boot {
    /// `uefi` or `bios`.
    pub current_boot_mode: String,
    /// The raw `BOOTIF` argument.
    pub pxe_interface: Option<String>,
}

/// Reads the SMBIOS identity: the kernel's `dmi/id` attributes first (the
/// kernel already decoded them), the raw table for whatever is missing.
pub fn vendor(root: &Path) -> SystemVendor {
    let id = |name: &str| read_attr(&under(root, "/sys/class/dmi/id").join(name));
    let table = std::fs::read(under(root, "/sys/firmware/dmi/tables/DMI")).unwrap_or_default();
    let structures = smbios::parse(&table);
    let from_table = |kind: u8, offset: usize| {
        structures
            .iter()
            .find(|s| s.kind == kind)
            .and_then(|s| s.string(offset))
    };
    let pick = |name: &str, kind: u8, offset: usize| {
        id(name)
            .or_else(|| from_table(kind, offset))
            .unwrap_or_default()
    };
    let dt = device_tree(root);
    let or_dt = |v: String, dt: &Option<String>| match (v.is_empty(), dt) {
        (true, Some(d)) => d.clone(),
        _ => v,
    };
    SystemVendor {
        product_name: or_dt(pick("product_name", 1, 0x05), &dt.model),
        serial_number: or_dt(pick("product_serial", 1, 0x07), &dt.serial),
        manufacturer: or_dt(pick("sys_vendor", 1, 0x04), &dt.vendor),
        firmware: Firmware {
            vendor: pick("bios_vendor", 0, 0x04),
            version: pick("bios_version", 0, 0x05),
            build_date: pick("bios_date", 0, 0x08),
        },
    }
}

/// What an Arm (or other device-tree) machine says about itself when its
/// firmware gives no SMBIOS: `model` (the product), the vendor prefix of the
/// first `compatible` entry (`ampere` of `ampere,mtjade`), `serial-number`.
#[derive(Debug, Default, PartialEq)]
struct DeviceTree {
    model: Option<String>,
    vendor: Option<String>,
    serial: Option<String>,
}

/// Reads the device tree's identity under `root` (nothing when the kernel
/// booted with ACPI or on x86: there is no device tree then).
fn device_tree(root: &Path) -> DeviceTree {
    let base = under(root, "/sys/firmware/devicetree/base");
    // Device-tree strings end in NUL; `compatible` is a NUL-separated list.
    let strings = |name: &str| -> Vec<String> {
        std::fs::read(base.join(name))
            .map(|b| {
                b.split(|c| *c == 0)
                    .map(|s| String::from_utf8_lossy(s).trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = |name: &str| strings(name).into_iter().next();
    DeviceTree {
        model: first("model"),
        vendor: first("compatible")
            .and_then(|c| c.split_once(',').map(|(v, _)| v.to_string()))
            .filter(|v| !v.is_empty()),
        serial: first("serial-number"),
    }
}

/// `uefi` when the kernel booted through EFI (`/sys/firmware/efi` exists).
pub fn boot_mode(root: &Path) -> &'static str {
    if under(root, "/sys/firmware/efi").is_dir() {
        "uefi"
    } else {
        "bios"
    }
}

/// The host name (`/proc/sys/kernel/hostname`, what `gethostname` returns).
pub fn hostname(root: &Path) -> String {
    read_attr(&under(root, "/proc/sys/kernel/hostname")).unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::smbios::tests::structure;

    #[test]
    fn identity_from_the_raw_table_when_dmi_id_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let dmi = dir.path().join("sys/firmware/dmi/tables");
        std::fs::create_dir_all(&dmi).unwrap();
        let mut t = structure(
            0,
            &[1, 2, 0, 0, 3, 0, 0],
            &["SeaBIOS", "1.16.2", "04/01/2014"],
        );
        t.extend(structure(
            1,
            &[1, 2, 3, 4],
            &["QEMU", "Standard PC", "pc-1", "SER1"],
        ));
        std::fs::write(dmi.join("DMI"), t).unwrap();
        let id = dir.path().join("sys/class/dmi/id");
        std::fs::create_dir_all(&id).unwrap();
        std::fs::write(id.join("sys_vendor"), "Overridden\n").unwrap();
        let v = vendor(dir.path());
        assert_eq!(v.manufacturer, "Overridden");
        assert_eq!(v.product_name, "Standard PC");
        assert_eq!(v.serial_number, "SER1");
        assert_eq!(v.firmware.vendor, "SeaBIOS");
        assert_eq!(v.firmware.build_date, "04/01/2014");
        assert_eq!(boot_mode(dir.path()), "bios");
    }

    #[test]
    fn arm_board_identity_from_the_device_tree_when_smbios_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let dt = dir.path().join("sys/firmware/devicetree/base");
        std::fs::create_dir_all(&dt).unwrap();
        std::fs::write(dt.join("model"), b"Raspberry Pi 4 Model B Rev 1.4\0").unwrap();
        std::fs::write(
            dt.join("compatible"),
            b"raspberrypi,4-model-b\0brcm,bcm2711\0",
        )
        .unwrap();
        std::fs::write(dt.join("serial-number"), b"10000000abcdef01\0").unwrap();
        let v = vendor(dir.path());
        assert_eq!(v.product_name, "Raspberry Pi 4 Model B Rev 1.4");
        assert_eq!(v.manufacturer, "raspberrypi");
        assert_eq!(v.serial_number, "10000000abcdef01");
        assert_eq!(v.firmware.vendor, "", "the device tree names no firmware");

        // SMBIOS wins where it has a value; the tree fills only the gaps.
        let id = dir.path().join("sys/class/dmi/id");
        std::fs::create_dir_all(&id).unwrap();
        std::fs::write(id.join("sys_vendor"), "Ampere\n").unwrap();
        let v = vendor(dir.path());
        assert_eq!(v.manufacturer, "Ampere");
        assert_eq!(v.product_name, "Raspberry Pi 4 Model B Rev 1.4");

        // QEMU's virt machine (booted with its device tree, not ACPI);
        // a compatible string without a vendor prefix names no vendor.
        std::fs::write(dt.join("compatible"), b"linux,dummy-virt\0").unwrap();
        assert_eq!(device_tree(dir.path()).vendor.as_deref(), Some("linux"));
        std::fs::write(dt.join("compatible"), b"dummy\0\0").unwrap();
        assert_eq!(device_tree(dir.path()).vendor, None);
        assert_eq!(device_tree(&dir.path().join("none")), DeviceTree::default());
    }
}
