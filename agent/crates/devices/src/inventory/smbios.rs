//! SMBIOS/DMI tables as the kernel exports them
//! (`/sys/firmware/dmi/tables/DMI`): a parser for the structure table and
//! the few structures the inventory needs (BIOS, system, memory devices).
//!
//! Layout per the DMTF SMBIOS specification (DSP0134): each structure is a
//! header (type, length, handle), a formatted area of `length` bytes, then
//! NUL-terminated strings ending with an extra NUL. String fields hold a
//! 1-based index into those strings (0 = none). The parser never panics on a
//! damaged table: it stops at the first structure that does not fit.

/// One SMBIOS structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Structure<'a> {
    /// Structure type (0 BIOS, 1 system, 17 memory device, 127 end).
    pub kind: u8,
    formatted: &'a [u8],
    strings: Vec<&'a [u8]>,
}

impl<'a> Structure<'a> {
    /// Byte at `offset` of the formatted area (offsets as in DSP0134,
    /// counted from the start of the header).
    pub(crate) fn byte(&self, offset: usize) -> Option<u8> {
        self.formatted.get(offset).copied()
    }

    /// Little-endian word at `offset`.
    pub(crate) fn word(&self, offset: usize) -> Option<u16> {
        let b = self.formatted.get(offset..offset + 2)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }

    /// Little-endian double word at `offset`.
    pub(crate) fn dword(&self, offset: usize) -> Option<u32> {
        let b = self.formatted.get(offset..offset + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The string a string-index byte at `offset` points to, trimmed;
    /// `None` when absent or blank.
    pub(crate) fn string(&self, offset: usize) -> Option<String> {
        let idx = usize::from(self.byte(offset)?);
        let raw = self.strings.get(idx.checked_sub(1)?)?;
        let s = String::from_utf8_lossy(raw).trim().to_string();
        (!s.is_empty()).then_some(s)
    }
}

/// Splits a structure table into structures, stopping at the end-of-table
/// structure (type 127) or at the first one that does not fit.
pub(crate) fn parse(table: &[u8]) -> Vec<Structure<'_>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 4 <= table.len() {
        let kind = table[pos];
        let len = usize::from(table[pos + 1]);
        if len < 4 || pos + len > table.len() {
            break;
        }
        let formatted = &table[pos..pos + len];
        // Strings run until a double NUL (just two NULs when there are none).
        let area_start = pos + len;
        let mut i = area_start;
        loop {
            if i + 1 >= table.len() {
                return out;
            }
            if table[i] == 0 && table[i + 1] == 0 {
                break;
            }
            i += 1;
        }
        let strings: Vec<&[u8]> = table[area_start..i]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .collect();
        let end = i + 2;
        out.push(Structure {
            kind,
            formatted,
            strings,
        });
        if kind == 127 {
            break;
        }
        pos = end;
    }
    out
}

/// Size in MiB of an SMBIOS memory device (type 17); `None` for an empty
/// slot or an unknown size.
pub(crate) fn memory_device_mib(s: &Structure<'_>) -> Option<u64> {
    if s.kind != 17 {
        return None;
    }
    let size = s.word(0x0C)?;
    match size {
        0 | 0xFFFF => None,
        // Extended size (SMBIOS ≥ 2.7): a dword in MiB at 0x1C.
        0x7FFF => s
            .dword(0x1C)
            .map(|mb| u64::from(mb & 0x7FFF_FFFF))
            .filter(|mb| *mb > 0),
        // Bit 15: the value is in KiB.
        s if s & 0x8000 != 0 => Some(u64::from(s & 0x7FFF) / 1024).filter(|mb| *mb > 0),
        s => Some(u64::from(s)),
    }
}

/// Total installed memory in MiB from the memory devices, if any is listed.
pub(crate) fn physical_memory_mib(table: &[u8]) -> Option<u64> {
    let sizes: Vec<u64> = parse(table).iter().filter_map(memory_device_mib).collect();
    (!sizes.is_empty()).then(|| sizes.iter().sum())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a structure: header + formatted bytes + strings.
    pub(crate) fn structure(kind: u8, body: &[u8], strings: &[&str]) -> Vec<u8> {
        let mut v = vec![kind, (4 + body.len()) as u8, 0x00, 0x01];
        v.extend_from_slice(body);
        if strings.is_empty() {
            v.extend_from_slice(&[0, 0]);
        } else {
            for s in strings {
                v.extend_from_slice(s.as_bytes());
                v.push(0);
            }
            v.push(0);
        }
        v
    }

    fn memory_device(size: u16, extended: u32) -> Vec<u8> {
        let mut body = vec![0u8; 0x24];
        body[0x0C - 4..0x0E - 4].copy_from_slice(&size.to_le_bytes());
        body[0x1C - 4..0x20 - 4].copy_from_slice(&extended.to_le_bytes());
        structure(17, &body, &["DIMM 0"])
    }

    #[test]
    fn reads_strings_and_memory_sizes() {
        let mut table = structure(
            0,
            &[1, 2, 0, 0, 3, 0, 0],
            &["SeaBIOS", "1.16.2", "04/01/2014"],
        );
        table.extend(memory_device(2048, 0));
        table.extend(memory_device(0x7FFF, 65536));
        table.extend(memory_device(0x8000 | 512, 0)); // 512 KiB: rounds to 0, ignored
        table.extend(memory_device(0, 0)); // empty slot
        table.extend(structure(127, &[], &[]));
        let s = parse(&table);
        assert_eq!(s.len(), 6);
        assert_eq!(s[0].string(4).as_deref(), Some("SeaBIOS"));
        assert_eq!(s[0].string(5).as_deref(), Some("1.16.2"));
        assert_eq!(s[0].string(8).as_deref(), Some("04/01/2014"));
        assert_eq!(s[0].string(6), None, "index 0 means no string");
        assert_eq!(physical_memory_mib(&table), Some(2048 + 65536));
    }

    #[test]
    fn damaged_tables_never_panic() {
        let mut table = structure(1, &[1, 2, 3, 4], &["QEMU", "Standard PC"]);
        table.extend(memory_device(4096, 0));
        for cut in 0..table.len() {
            let _ = parse(&table[..cut]);
            let _ = physical_memory_mib(&table[..cut]);
        }
        let mut rng = 0x1234_5678u32;
        for _ in 0..2000 {
            let mut t = table.clone();
            for _ in 0..4 {
                rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let i = (rng as usize >> 8) % t.len();
                t[i] = (rng >> 24) as u8;
            }
            for s in parse(&t) {
                let _ = (s.string(4), s.string(200), memory_device_mib(&s));
            }
        }
    }
}
