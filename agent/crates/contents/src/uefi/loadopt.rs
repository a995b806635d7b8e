//! UEFI boot variables as bytes (UEFI 2.10 §3.1.3 `EFI_LOAD_OPTION`,
//! §10.3 device paths): a load option pointing at a file on a GPT
//! partition, and the efivarfs file layout (4-byte attributes, then data).

/// `LOAD_OPTION_ACTIVE`.
const ACTIVE: u32 = 1;
/// NON_VOLATILE | BOOTSERVICE_ACCESS | RUNTIME_ACCESS.
pub const VAR_ATTRS: u32 = 0x7;

/// The partition a load option points into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// 1-based partition number.
    pub number: u32,
    /// First LBA.
    pub start_lba: u64,
    /// Size in LBAs.
    pub size_lba: u64,
    /// Unique partition GUID, in on-disk byte order.
    pub guid: [u8; 16],
}

fn utf16z(s: &str) -> Vec<u8> {
    s.encode_utf16()
        .chain(std::iter::once(0))
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// An active `EFI_LOAD_OPTION` for `loader` (`\EFI\fedora\shimx64.efi`) on
/// `part`, described as `label`.
pub fn load_option(label: &str, part: &Partition, loader: &str) -> Vec<u8> {
    let mut path = Vec::new();
    // Hard drive media device path: GPT partition by GUID.
    path.extend_from_slice(&[0x04, 0x01, 42, 0]);
    path.extend_from_slice(&part.number.to_le_bytes());
    path.extend_from_slice(&part.start_lba.to_le_bytes());
    path.extend_from_slice(&part.size_lba.to_le_bytes());
    path.extend_from_slice(&part.guid);
    path.extend_from_slice(&[0x02, 0x02]);
    // File path media device path.
    let file = utf16z(loader);
    path.extend_from_slice(&[0x04, 0x04]);
    path.extend_from_slice(&((4 + file.len()) as u16).to_le_bytes());
    path.extend_from_slice(&file);
    // End of the whole device path.
    path.extend_from_slice(&[0x7f, 0xff, 0x04, 0x00]);

    let mut out = Vec::new();
    out.extend_from_slice(&ACTIVE.to_le_bytes());
    out.extend_from_slice(&(path.len() as u16).to_le_bytes());
    out.extend_from_slice(&utf16z(label));
    out.extend_from_slice(&path);
    out
}

/// The description of a load option, if it parses.
pub fn description(option: &[u8]) -> Option<String> {
    let units: Vec<u16> = option
        .get(6..)?
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|u| *u != 0)
        .collect();
    Some(String::from_utf16_lossy(&units))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_option_layout_matches_the_spec() {
        let part = Partition {
            number: 1,
            start_lba: 2048,
            size_lba: 204_800,
            guid: [0xab; 16],
        };
        let o = load_option("ironic1", &part, r"\EFI\BOOT\BOOTX64.EFI");
        assert_eq!(&o[..4], &[1, 0, 0, 0], "active");
        let path_len = u16::from_le_bytes([o[4], o[5]]) as usize;
        let label_end = 6 + 2 * ("ironic1".len() + 1);
        assert_eq!(description(&o).as_deref(), Some("ironic1"));
        let path = &o[label_end..];
        assert_eq!(path.len(), path_len);
        assert_eq!(&path[..4], &[4, 1, 42, 0]);
        assert_eq!(u32::from_le_bytes(path[4..8].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(path[8..16].try_into().unwrap()), 2048);
        assert_eq!(
            u64::from_le_bytes(path[16..24].try_into().unwrap()),
            204_800
        );
        assert_eq!(&path[24..40], &[0xab; 16]);
        assert_eq!(&path[40..42], &[2, 2]);
        let file_len = u16::from_le_bytes([path[44], path[45]]) as usize;
        assert_eq!(file_len, 4 + 2 * (r"\EFI\BOOT\BOOTX64.EFI".len() + 1));
        assert_eq!(&path[42 + file_len..], &[0x7f, 0xff, 4, 0]);
    }
}
