//! Reading one file out of an ISO9660 image in memory (the config drive),
//! through the Joliet names when present (Ironic builds config drives with
//! `-J -r`), else the Rock Ridge names, else the primary names
//! (case-insensitive, `;1` ignored). No
//! mount needed, so it works where the kernel lacks iso9660.

const SECTOR: usize = 2048;

fn u32_le(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize
}

/// The content of the file at `path` (`/`-separated), if present.
pub fn read_file(iso: &[u8], path: &str) -> Option<Vec<u8>> {
    let (root, joliet) = root_record(iso)?;
    let mut extent = root;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, want) in parts.iter().enumerate() {
        let (lba, len, is_dir) = find(iso, extent, want, joliet)?;
        if i + 1 == parts.len() {
            return (!is_dir).then(|| {
                iso.get(lba * SECTOR..lba * SECTOR + len)
                    .map(<[u8]>::to_vec)
            })?;
        }
        if !is_dir {
            return None;
        }
        extent = (lba, len);
    }
    None
}

/// The root directory's (extent, length), preferring the Joliet tree.
fn root_record(iso: &[u8]) -> Option<((usize, usize), bool)> {
    let mut primary = None;
    for n in 16..64 {
        let vd = iso.get(n * SECTOR..(n + 1) * SECTOR)?;
        if &vd[1..6] != b"CD001" {
            return None;
        }
        let root = (u32_le(vd, 156 + 2), u32_le(vd, 156 + 10));
        match vd[0] {
            1 => primary = Some(root),
            2 if matches!(&vd[88..91], b"%/@" | b"%/C" | b"%/E") => return Some((root, true)),
            255 => break,
            _ => {}
        }
    }
    primary.map(|r| (r, false))
}

fn name_of(raw: &[u8], joliet: bool) -> String {
    let name = if joliet {
        let units: Vec<u16> = raw
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
            .collect();
        String::from_utf16_lossy(&units)
    } else {
        String::from_utf8_lossy(raw).into_owned()
    };
    let name = name.split(';').next().unwrap_or_default();
    name.strip_suffix('.').unwrap_or(name).to_string()
}

/// The Rock Ridge `NM` name in the record's system use area, if any.
fn rock_ridge_name(rec: &[u8], name_len: usize) -> Option<String> {
    let mut at = 33 + name_len + (name_len + 1) % 2;
    let mut name = String::new();
    while at + 4 <= rec.len() {
        let (sig, len) = (&rec[at..at + 2], rec[at + 2] as usize);
        if len < 4 || at + len > rec.len() {
            break;
        }
        if sig == b"NM" && len >= 5 {
            name.push_str(&String::from_utf8_lossy(&rec[at + 5..at + len]));
        }
        at += len;
    }
    (!name.is_empty()).then_some(name)
}

/// Looks `want` up in the directory at `(lba, len)`: (lba, len, is_dir).
fn find(
    iso: &[u8],
    (lba, len): (usize, usize),
    want: &str,
    joliet: bool,
) -> Option<(usize, usize, bool)> {
    let dir = iso.get(lba * SECTOR..lba * SECTOR + len)?;
    let mut at = 0;
    while at < dir.len() {
        let rec_len = dir[at] as usize;
        if rec_len == 0 {
            at = (at / SECTOR + 1) * SECTOR;
            continue;
        }
        let rec = dir.get(at..at + rec_len)?;
        // A record shorter than its fixed part is malformed: stop looking.
        let name_len = *rec.get(32)? as usize;
        let raw = rec.get(33..33 + name_len)?;
        // One byte 0 or 1 names the directory itself or its parent.
        if name_len > 1 || raw.first().is_some_and(|b| *b > 1) {
            let name = if joliet {
                name_of(raw, true)
            } else {
                rock_ridge_name(rec, name_len).unwrap_or_else(|| name_of(raw, false))
            };
            if name.eq_ignore_ascii_case(want) {
                return Some((u32_le(rec, 2), u32_le(rec, 10), rec[25] & 2 != 0));
            }
        }
        at += rec_len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iso(joliet: bool) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("cd/openstack/latest");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("user_data"), "hello user data").unwrap();
        std::fs::write(tree.join("meta_data.json"), "{}").unwrap();
        let out = dir.path().join("cd.iso");
        let mut cmd = std::process::Command::new("genisoimage");
        cmd.args(["-quiet", "-r", "-V", "config-2", "-o"]).arg(&out);
        if joliet {
            cmd.arg("-J");
        }
        crate::tool::run(cmd.arg(dir.path().join("cd"))).unwrap_or_else(|e| panic!("{e}"));
        std::fs::read(out).unwrap()
    }

    #[test]
    fn reads_user_data_through_joliet_or_primary_names() {
        for joliet in [true, false] {
            let iso = iso(joliet);
            assert_eq!(
                read_file(&iso, "openstack/latest/user_data").as_deref(),
                Some(&b"hello user data"[..]),
                "joliet={joliet}"
            );
            assert_eq!(read_file(&iso, "openstack/latest/missing"), None);
            assert_eq!(
                read_file(&iso, "openstack/latest"),
                None,
                "a directory is not a file"
            );
        }
        assert_eq!(read_file(b"not an iso", "x"), None);
    }

    #[test]
    fn short_records_and_empty_names_are_not_found_not_panics() {
        let good = iso(true);
        let (root, joliet) = root_record(&good).unwrap();
        let at = root.0 * SECTOR;
        // A record length of 20: shorter than the fixed 33 bytes.
        let mut short = good.clone();
        short[at] = 20;
        assert_eq!(find(&short, root, "openstack", joliet), None);
        // A record with a zero-length name.
        let mut empty = good.clone();
        empty[at + 32] = 0;
        let _ = find(&empty, root, "openstack", joliet);
        // Truncated images anywhere: no panic.
        for cut in [0, 100, 16 * SECTOR + 10, good.len() / 2, good.len() - 1] {
            let _ = read_file(&good[..cut], "openstack/latest/user_data");
        }
    }
}
