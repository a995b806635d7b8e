//! The `dmi-decode` inspection collector: IPA's `dmi` document
//! (`{"bios": {...}, "cpu": [...], "memory": {..., "devices": [...]}}`)
//! built from the SMBIOS table the inventory already parses, with
//! dmidecode's field names and value spellings, so it matches what IPA's
//! `dmi_inspector.py` makes of `dmidecode -t bios -t processor -t memory`.
//!
//! Covered: BIOS (type 0), processors (type 4), physical memory arrays
//! (type 16; the first one, `Number Of Devices` summed over all, as IPA
//! does) and memory devices (type 17), each with its `Handle` line. Fields
//! dmidecode prints but no consumer reads (characteristics bit lists,
//! processor flags) are left out.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::inventory::smbios::{self, Structure};
use crate::inventory::under;

/// The `dmi` document for the machine under `root`; `None` without a table.
pub fn decode(root: &Path) -> Option<Value> {
    let table = std::fs::read(under(root, "/sys/firmware/dmi/tables/DMI")).ok()?;
    Some(from_table(&table))
}

/// The `dmi` document of a raw structure table.
pub fn from_table(table: &[u8]) -> Value {
    let structures = smbios::parse(table);
    let mut bios = json!({});
    let mut cpus = Vec::new();
    let mut arrays = Vec::new();
    let mut devices = Vec::new();
    for s in &structures {
        match s.kind {
            0 => bios = Value::Object(bios_fields(s)),
            4 => cpus.push(Value::Object(cpu_fields(s))),
            16 => arrays.push(array_fields(s)),
            17 => devices.push(Value::Object(device_fields(s))),
            _ => {}
        }
    }
    let mut memory = Map::new();
    if let Some(first) = arrays.first() {
        let total: u64 = arrays
            .iter()
            .filter_map(|a| a.get("Number Of Devices").and_then(Value::as_u64))
            .sum();
        memory = first.clone();
        memory.remove("Handle");
        memory.insert("Number Of Devices".into(), json!(total));
    }
    memory.insert("devices".into(), Value::Array(devices));
    json!({"bios": bios, "cpu": cpus, "memory": memory})
}

/// `Handle 0x0100, DMI type 17, 40 bytes`.
fn handle(s: &Structure<'_>) -> String {
    format!(
        "Handle 0x{:04X}, DMI type {}, {} bytes",
        s.word(2).unwrap_or(0),
        s.kind,
        s.byte(1).unwrap_or(0)
    )
}

/// A string field as dmidecode prints it.
fn text(s: &Structure<'_>, offset: usize) -> String {
    s.string(offset).unwrap_or_else(|| "Not Specified".into())
}

fn insert(m: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    m.insert(key.into(), value.into());
}

fn bios_fields(s: &Structure<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    insert(&mut m, "Handle", handle(s));
    insert(&mut m, "Vendor", text(s, 0x04));
    insert(&mut m, "Version", text(s, 0x05));
    insert(&mut m, "Release Date", text(s, 0x08));
    if let Some(seg) = s.word(0x06).filter(|w| *w != 0) {
        insert(&mut m, "Address", format!("0x{seg:04X}0"));
        let bytes = (0x10000 - u32::from(seg)) << 4;
        insert(&mut m, "Runtime Size", size_text(u64::from(bytes)));
    }
    if let Some(rom) = s.byte(0x09) {
        insert(&mut m, "ROM Size", size_text((u64::from(rom) + 1) << 16));
    }
    if let (Some(major), Some(minor)) = (s.byte(0x14), s.byte(0x15)) {
        if major != 0xFF && minor != 0xFF {
            insert(&mut m, "BIOS Revision", format!("{major}.{minor}"));
        }
    }
    if let (Some(major), Some(minor)) = (s.byte(0x16), s.byte(0x17)) {
        if major != 0xFF && minor != 0xFF {
            insert(&mut m, "Firmware Revision", format!("{major}.{minor}"));
        }
    }
    m
}

/// dmidecode's sizes: `64 kB`, `16 MB`, whichever unit divides exactly.
fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MB", bytes >> 20)
    } else if bytes % 1024 == 0 {
        format!("{} kB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// `N MHz`, or `Unknown` for 0.
fn mhz(v: Option<u16>) -> Option<String> {
    v.map(|v| {
        if v == 0 {
            "Unknown".to_string()
        } else {
            format!("{v} MHz")
        }
    })
}

fn cpu_fields(s: &Structure<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    insert(&mut m, "Handle", handle(s));
    insert(&mut m, "Socket Designation", text(s, 0x04));
    if let Some(t) = s.byte(0x05) {
        let name = match t {
            1 => "Other",
            3 => "Central Processor",
            4 => "Math Processor",
            5 => "DSP Processor",
            6 => "Video Processor",
            _ => "Unknown",
        };
        insert(&mut m, "Type", name);
    }
    insert(&mut m, "Manufacturer", text(s, 0x07));
    if let Some(id) = (0x08..0x10).map(|o| s.byte(o)).collect::<Option<Vec<u8>>>() {
        let hex: Vec<String> = id.iter().map(|b| format!("{b:02X}")).collect();
        insert(&mut m, "ID", hex.join(" "));
    }
    insert(&mut m, "Version", text(s, 0x10));
    if let Some(v) = mhz(s.word(0x12)) {
        insert(&mut m, "External Clock", v);
    }
    if let Some(v) = mhz(s.word(0x14)) {
        insert(&mut m, "Max Speed", v);
    }
    if let Some(v) = mhz(s.word(0x16)) {
        insert(&mut m, "Current Speed", v);
    }
    if let Some(st) = s.byte(0x18) {
        let status = if st & 0x40 == 0 {
            "Unpopulated".to_string()
        } else {
            let state = match st & 0x07 {
                1 => "Enabled",
                2 => "Disabled By User",
                3 => "Disabled By BIOS",
                4 => "Idle",
                7 => "Other",
                _ => "Unknown",
            };
            format!("Populated, {state}")
        };
        insert(&mut m, "Status", status);
    }
    if s.byte(1).unwrap_or(0) > 0x20 {
        insert(&mut m, "Serial Number", text(s, 0x20));
        insert(&mut m, "Asset Tag", text(s, 0x21));
        insert(&mut m, "Part Number", text(s, 0x22));
    }
    for (offset, key) in [
        (0x23, "Core Count"),
        (0x24, "Core Enabled"),
        (0x25, "Thread Count"),
    ] {
        if let Some(n) = s.byte(offset).filter(|n| *n != 0) {
            insert(&mut m, key, n.to_string());
        }
    }
    m
}

fn array_fields(s: &Structure<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    insert(&mut m, "Handle", handle(s));
    if let Some(l) = s.byte(0x04) {
        let name = match l {
            3 => "System Board Or Motherboard",
            4 => "ISA Add-on Card",
            5 => "EISA Add-on Card",
            6 => "PCI Add-on Card",
            _ => "Other",
        };
        insert(&mut m, "Location", name);
    }
    if let Some(u) = s.byte(0x05) {
        let name = match u {
            3 => "System Memory",
            4 => "Video Memory",
            5 => "Flash Memory",
            6 => "Non-volatile RAM",
            7 => "Cache Memory",
            _ => "Other",
        };
        insert(&mut m, "Use", name);
    }
    if let Some(e) = s.byte(0x06) {
        let name = match e {
            3 => "None",
            4 => "Parity",
            5 => "Single-bit ECC",
            6 => "Multi-bit ECC",
            7 => "CRC",
            2 => "Unknown",
            _ => "Other",
        };
        insert(&mut m, "Error Correction Type", name);
    }
    if let Some(kib) = s.dword(0x07) {
        let bytes = if kib == 0x8000_0000 {
            s.dword(0x0F)
                .map(|lo| u64::from(lo) | (u64::from(s.dword(0x13).unwrap_or(0)) << 32))
        } else {
            Some(u64::from(kib) << 10)
        };
        if let Some(b) = bytes {
            insert(&mut m, "Maximum Capacity", size_text(b));
        }
    }
    if let Some(n) = s.word(0x0D) {
        insert(&mut m, "Number Of Devices", n);
    }
    m
}

fn device_fields(s: &Structure<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    insert(&mut m, "Handle", handle(s));
    for (offset, key) in [(0x08, "Total Width"), (0x0A, "Data Width")] {
        if let Some(w) = s.word(offset) {
            let v = if w == 0xFFFF || w == 0 {
                "Unknown".to_string()
            } else {
                format!("{w} bits")
            };
            insert(&mut m, key, v);
        }
    }
    let size = match smbios::memory_device_mib(s) {
        Some(mib) => size_text(mib << 20),
        None if s.word(0x0C) == Some(0xFFFF) => "Unknown".into(),
        None => "No Module Installed".into(),
    };
    insert(&mut m, "Size", size);
    if let Some(f) = s.byte(0x0E) {
        let name = match f {
            0x09 => "DIMM",
            0x0D => "SODIMM",
            0x0B => "Row Of Chips",
            0x0F => "FB-DIMM",
            0x01 => "Other",
            _ => "Unknown",
        };
        insert(&mut m, "Form Factor", name);
    }
    insert(&mut m, "Locator", text(s, 0x10));
    insert(&mut m, "Bank Locator", text(s, 0x11));
    if let Some(t) = s.byte(0x12) {
        let name = match t {
            0x01 => "Other",
            0x03 => "DRAM",
            0x07 => "RAM",
            0x0F => "SDRAM",
            0x12 => "DDR",
            0x13 => "DDR2",
            0x18 => "DDR3",
            0x1A => "DDR4",
            0x1B => "LPDDR",
            0x1C => "LPDDR2",
            0x1D => "LPDDR3",
            0x1E => "LPDDR4",
            0x22 => "DDR5",
            0x23 => "LPDDR5",
            _ => "Unknown",
        };
        insert(&mut m, "Type", name);
    }
    if let Some(v) = s.word(0x15) {
        insert(&mut m, "Speed", mt_s(v));
    }
    if s.byte(1).unwrap_or(0) > 0x17 {
        insert(&mut m, "Manufacturer", text(s, 0x17));
        insert(&mut m, "Serial Number", text(s, 0x18));
        insert(&mut m, "Asset Tag", text(s, 0x19));
        insert(&mut m, "Part Number", text(s, 0x1A));
    }
    if let Some(r) = s.byte(0x1B) {
        let rank = r & 0x0F;
        insert(
            &mut m,
            "Rank",
            if rank == 0 {
                "Unknown".to_string()
            } else {
                rank.to_string()
            },
        );
    }
    if let Some(v) = s.word(0x20) {
        insert(&mut m, "Configured Memory Speed", mt_s(v));
    }
    m
}

fn mt_s(v: u16) -> String {
    if v == 0 {
        "Unknown".into()
    } else {
        format!("{v} MT/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::smbios::tests::structure;

    #[test]
    fn sections_from_a_built_table() {
        let mut t = structure(
            0,
            &[
                1, 2, 0x00, 0xE8, 3, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 0xFF, 0xFF,
            ],
            &["Vendor X", "1.2.3", "04/01/2014"],
        );
        let mut mem_array = vec![0u8; 0x17 - 4];
        mem_array[0] = 3; // location
        mem_array[1] = 3; // use
        mem_array[2] = 6; // multi-bit ECC
        mem_array[3..7].copy_from_slice(&(64u32 << 20).to_le_bytes()); // 64 GiB in KiB
        mem_array[9..11].copy_from_slice(&2u16.to_le_bytes());
        t.extend(structure(16, &mem_array, &[]));
        t.extend(structure(16, &mem_array, &[]));
        let mut dimm = vec![0u8; 0x28 - 4];
        dimm[0x08 - 4..0x0A - 4].copy_from_slice(&72u16.to_le_bytes());
        dimm[0x0C - 4..0x0E - 4].copy_from_slice(&16384u16.to_le_bytes());
        dimm[0x0E - 4] = 0x09;
        dimm[0x10 - 4] = 1;
        dimm[0x12 - 4] = 0x1A;
        dimm[0x15 - 4..0x17 - 4].copy_from_slice(&3200u16.to_le_bytes());
        dimm[0x17 - 4] = 2;
        dimm[0x1B - 4] = 2;
        t.extend(structure(17, &dimm, &["DIMM A1", "Samsung"]));
        t.extend(structure(127, &[], &[]));
        let d = from_table(&t);
        assert_eq!(d["bios"]["Vendor"], "Vendor X");
        assert_eq!(d["bios"]["Release Date"], "04/01/2014");
        assert_eq!(d["bios"]["Address"], "0xE8000");
        assert_eq!(d["bios"]["Runtime Size"], "96 kB");
        assert_eq!(d["bios"]["ROM Size"], "64 kB");
        assert_eq!(d["bios"]["BIOS Revision"], "2.5");
        assert!(d["bios"].get("Firmware Revision").is_none());
        assert_eq!(d["bios"]["Handle"], "Handle 0x0100, DMI type 0, 24 bytes");
        assert_eq!(d["memory"]["Number Of Devices"], 4);
        assert_eq!(d["memory"]["Maximum Capacity"], "64 GB");
        assert_eq!(d["memory"]["Error Correction Type"], "Multi-bit ECC");
        assert!(d["memory"].get("Handle").is_none());
        let dev = &d["memory"]["devices"][0];
        assert_eq!(dev["Size"], "16 GB");
        assert_eq!(dev["Locator"], "DIMM A1");
        assert_eq!(dev["Bank Locator"], "Not Specified");
        assert_eq!(dev["Type"], "DDR4");
        assert_eq!(dev["Speed"], "3200 MT/s");
        assert_eq!(dev["Manufacturer"], "Samsung");
        assert_eq!(dev["Total Width"], "72 bits");
        assert_eq!(dev["Rank"], "2");
        assert_eq!(d["cpu"], json!([]));
    }
}
