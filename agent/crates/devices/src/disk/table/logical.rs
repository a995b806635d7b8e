//! The logical partitions of an MBR table: the chain of extended boot
//! records (EBRs) inside its extended partition, numbered from 5 as the
//! kernel and kpartx number them. [`super::read`] gives only the four
//! primary entries; what maps a dm device's partitions (multipath) needs
//! these too. A chain that loops, leaves the extended partition or runs
//! past 128 records ends there: the records read so far count.

use super::{u32_at, Disk, Kind, Part, Table, TableError};

/// MBR partition types of an extended partition (DOS, Windows LBA, Linux).
pub const EXTENDED_TYPES: [u8; 3] = [0x05, 0x0f, 0x85];
/// The most logical partitions read from one chain.
const MAX_LOGICAL: u32 = 128;

/// Whether `p` is an MBR extended partition.
pub fn is_extended(p: &Part) -> bool {
    EXTENDED_TYPES.contains(&p.mbr_type)
}

/// The logical partitions of `table` (empty for GPT or without an
/// extended partition), in chain order, numbered 5, 6, …
pub fn logical_partitions(disk: &dyn Disk, table: &Table) -> Result<Vec<Part>, TableError> {
    if table.kind != Kind::Mbr {
        return Ok(Vec::new());
    }
    let Some(ext) = table.parts.iter().find(|p| is_extended(p)) else {
        return Ok(Vec::new());
    };
    let sector = table.sector;
    let ext_end = ext.start.saturating_add(ext.len);
    let mut out = Vec::new();
    let mut ebr_at = ext.start;
    let mut seen = Vec::new();
    while out.len() < MAX_LOGICAL as usize && ebr_at >= ext.start && ebr_at < ext_end {
        if seen.contains(&ebr_at) {
            tracing::warn!(
                at = ebr_at,
                "the extended partition's EBR chain loops; ending it there"
            );
            break;
        }
        seen.push(ebr_at);
        let mut ebr = [0u8; 512];
        disk.read_at(&mut ebr, ebr_at)
            .map_err(super::io("reading an extended boot record"))?;
        if ebr[510..512] != [0x55, 0xaa] {
            break;
        }
        let (first, next) = (&ebr[446..462], &ebr[462..478]);
        let start = u64::from(u32_at(first, 8)) * sector;
        let len = u64::from(u32_at(first, 12)) * sector;
        if first[4] != 0 && len > 0 {
            let begin = ebr_at.saturating_add(start);
            if begin.saturating_add(len) > ext_end {
                tracing::warn!(
                    at = ebr_at,
                    "a logical partition ends past its extended partition; ending the chain"
                );
                break;
            }
            out.push(Part {
                number: 5 + out.len() as u32,
                start: begin,
                len,
                name: String::new(),
                type_guid: [0; 16],
                guid: [0; 16],
                mbr_type: first[4],
            });
        }
        let link = u64::from(u32_at(next, 8)) * sector;
        if next[4] == 0 || link == 0 {
            break;
        }
        ebr_at = ext.start.saturating_add(link);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_testkit::{sfdisk_json, sparse_disk};

    #[test]
    fn logical_partitions_match_what_sfdisk_made() {
        let dir = tempfile::tempdir().unwrap();
        let script = "label: dos\nsize=16MiB, type=83\ntype=5\nsize=8MiB, type=83\nsize=16MiB, type=82\nsize=20MiB, type=83\n";
        let path = sparse_disk(dir.path(), 128, script);
        let f = std::fs::File::open(&path).unwrap();
        let t = super::super::read(&f, 512).unwrap().unwrap();
        assert_eq!(t.parts.len(), 2, "primary and extended entries");
        assert!(is_extended(&t.parts[1]));
        let logical = logical_partitions(&f, &t).unwrap();
        let j = sfdisk_json(&path);
        let want: Vec<(u32, u64, u64)> = j["partitiontable"]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let node = p["node"].as_str()?;
                let n: u32 = node
                    .rsplit(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()?;
                let (start, size) = (p["start"].as_u64()?, p["size"].as_u64()?);
                (n >= 5).then_some((n, start * 512, size * 512))
            })
            .collect();
        let got: Vec<(u32, u64, u64)> =
            logical.iter().map(|p| (p.number, p.start, p.len)).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got, want);
        assert_eq!(logical[1].mbr_type, 0x82);
    }

    #[test]
    fn a_looping_or_escaping_chain_ends_without_panic() {
        let dir = tempfile::tempdir().unwrap();
        let script = "label: dos\ntype=5\nsize=8MiB, type=83\n";
        let path = sparse_disk(dir.path(), 128, script);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let t = super::super::read(&f, 512).unwrap().unwrap();
        let ext = t.parts[0].start;
        let mut first = [0u8; 512];
        f.read_at(&mut first, ext).unwrap();
        assert_eq!(logical_partitions(&f, &t).unwrap().len(), 1);
        let link = |ebr: &mut [u8; 512], sectors: u32| {
            ebr[462 + 4] = 0x05;
            ebr[462 + 8..462 + 12].copy_from_slice(&sectors.to_le_bytes());
        };
        // The first record links to a second one, which links to itself.
        link(&mut first, 4096);
        f.write_at(&first, ext).unwrap();
        let mut second = first;
        second[446 + 4] = 0;
        f.write_at(&second, ext + 4096 * 512).unwrap();
        assert_eq!(logical_partitions(&f, &t).unwrap().len(), 1);
        // The second links past the extended partition.
        link(&mut second, u32::MAX);
        f.write_at(&second, ext + 4096 * 512).unwrap();
        assert_eq!(logical_partitions(&f, &t).unwrap().len(), 1);
        // A logical partition longer than its extended partition.
        first[446 + 12..446 + 16].copy_from_slice(&u32::MAX.to_le_bytes());
        f.write_at(&first, ext).unwrap();
        assert!(logical_partitions(&f, &t).unwrap().is_empty());
    }
}
