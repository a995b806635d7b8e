//! UEFI device paths as text, the way `efibootmgr -v` prints them
//! (`HD(1,GPT,<guid>,0x800,0x32000)/File(\EFI\debian\shimx64.efi)`,
//! `PciRoot(0x0)/Pci(0x2,0x0)/MAC(525400123456,0x1)`), so IPA's
//! `clean_uefi_nvram` patterns (`^HD\(`, `shim.*\.efi`, `grub.*\.efi`) match
//! the same entries here. Node types this agent does not name are printed
//! as `Path(type,subtype)`; a malformed path gives `None`.

/// The device path of an `EFI_LOAD_OPTION` as text.
pub(crate) fn load_option_path(option: &[u8]) -> Option<String> {
    let list_len = usize::from(u16::from_le_bytes([*option.get(4)?, *option.get(5)?]));
    // The description: UTF-16, NUL-terminated, after attributes and length.
    let mut at = 6;
    loop {
        let unit = option.get(at..at + 2)?;
        at += 2;
        if unit == [0, 0] {
            break;
        }
    }
    text(option.get(at..at.checked_add(list_len)?)?)
}

/// A device path list as text: nodes joined by `/`, instances by `,`.
pub(crate) fn text(mut path: &[u8]) -> Option<String> {
    let mut out = String::new();
    while path.len() >= 4 {
        let (kind, sub) = (path[0], path[1]);
        let len = usize::from(u16::from_le_bytes([path[2], path[3]]));
        if len < 4 || len > path.len() {
            return None;
        }
        let data = &path[4..len];
        path = &path[len..];
        match (kind, sub) {
            (0x7f, 0xff) => return Some(out),
            (0x7f, 0x01) => {
                out.push(',');
                continue;
            }
            _ => {}
        }
        if !out.is_empty() && !out.ends_with(',') {
            out.push('/');
        }
        out.push_str(&node(kind, sub, data));
    }
    (path.is_empty() && !out.is_empty()).then_some(out)
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(d.get(at..at + 8)?.try_into().ok()?))
}

/// A GUID in its on-disk (mixed-endian) bytes, as text.
pub(crate) fn guid_text(g: &[u8; 16]) -> String {
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]
    )
}

fn node(kind: u8, sub: u8, d: &[u8]) -> String {
    let named = match (kind, sub) {
        // ACPI PNP0A03/PNP0A08: the PCI root.
        (0x02, 0x01) => u32_at(d, 0)
            .filter(|hid| *hid == 0x0a03_41d0 || *hid == 0x0a08_41d0)
            .and_then(|_| u32_at(d, 4))
            .map(|uid| format!("PciRoot(0x{uid:x})")),
        (0x01, 0x01) if d.len() >= 2 => Some(format!("Pci(0x{:x},0x{:x})", d[1], d[0])),
        (0x03, 0x0b) if d.len() >= 33 => Some(format!(
            "MAC({},0x{:x})",
            d[..6]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            d[32]
        )),
        (0x03, 0x0c) => Some("IPv4(...)".to_string()),
        (0x03, 0x0d) => Some("IPv6(...)".to_string()),
        (0x03, 0x18) => Some(format!("Uri({})", String::from_utf8_lossy(d))),
        (0x04, 0x01) if d.len() >= 38 => {
            let mut sig = [0u8; 16];
            sig.copy_from_slice(&d[20..36]);
            let (number, start, size) = (u32_at(d, 0), u64_at(d, 4), u64_at(d, 12));
            match (number, start, size, d[37]) {
                (Some(n), Some(s), Some(z), 2) => {
                    Some(format!("HD({n},GPT,{},0x{s:x},0x{z:x})", guid_text(&sig)))
                }
                (Some(n), Some(s), Some(z), 1) => Some(format!(
                    "HD({n},MBR,0x{:x},0x{s:x},0x{z:x})",
                    u32_at(&sig, 0).unwrap_or(0)
                )),
                _ => None,
            }
        }
        (0x04, 0x04) => {
            let units: Vec<u16> = d
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .take_while(|u| *u != 0)
                .collect();
            Some(format!("File({})", String::from_utf16_lossy(&units)))
        }
        _ => None,
    };
    named.unwrap_or_else(|| format!("Path({kind},{sub})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uefi::loadopt::{load_option, Partition};

    #[test]
    fn our_own_entries_print_as_efibootmgr_does() {
        let part = Partition {
            number: 1,
            start_lba: 2048,
            size_lba: 204_800,
            // 12345678-9abc-def0-1122-334455667788 on disk.
            guid: [
                0x78, 0x56, 0x34, 0x12, 0xbc, 0x9a, 0xf0, 0xde, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
                0x77, 0x88,
            ],
        };
        let o = load_option("debian", &part, r"\EFI\debian\shimx64.efi");
        assert_eq!(
            load_option_path(&o).as_deref(),
            Some(
                r"HD(1,GPT,12345678-9abc-def0-1122-334455667788,0x800,0x32000)/File(\EFI\debian\shimx64.efi)"
            )
        );
    }

    #[test]
    fn network_entries_and_malformed_paths() {
        // PciRoot(0x0)/Pci(0x2,0x0)/MAC(525400123456,0x1), as OVMF writes.
        let mut p = vec![0x02, 0x01, 12, 0, 0xd0, 0x41, 0x03, 0x0a, 0, 0, 0, 0];
        p.extend_from_slice(&[0x01, 0x01, 6, 0, 0x00, 0x02]);
        let mut mac = vec![0x03, 0x0b, 37, 0, 0x52, 0x54, 0, 0x12, 0x34, 0x56];
        mac.resize(36, 0);
        mac.push(1);
        p.extend_from_slice(&mac);
        p.extend_from_slice(&[0x7f, 0xff, 4, 0]);
        assert_eq!(
            text(&p).as_deref(),
            Some("PciRoot(0x0)/Pci(0x2,0x0)/MAC(525400123456,0x1)")
        );
        assert_eq!(text(&[0x04, 0x01, 2, 0]), None, "length below 4");
        assert_eq!(text(&[0x04, 0x01, 40, 0, 1]), None, "length past the end");
        assert_eq!(text(&[]), None);
        assert_eq!(
            load_option_path(&[1, 0, 0, 0, 4, 0, b'a', 0]),
            None,
            "no NUL"
        );
        assert_eq!(
            text(&[0x05, 0x07, 4, 0, 0x7f, 0xff, 4, 0]).as_deref(),
            Some("Path(5,7)")
        );
    }
}
