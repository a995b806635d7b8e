//! Reading files out of an ISO9660 image (a config drive in memory, or the
//! virtual-media disc on its block device), through the Joliet names when
//! present (Ironic builds its ISOs with `-J -r`), else the Rock Ridge
//! names, else the primary names (case-insensitive, `;1` ignored). No mount
//! needed, so it works where the kernel lacks iso9660. Only the sectors
//! the lookup needs are read; offsets from the image are checked, so a
//! hostile image gives "not found", never a panic.

use std::os::unix::fs::FileExt;

const SECTOR: usize = 2048;

/// Largest directory read (a config drive's have a few entries).
const MAX_DIR_BYTES: usize = 1 << 20;

/// Where the image's bytes come from.
pub trait Media {
    /// `len` bytes at `offset`, or `None` when they are not all there.
    fn read_at(&self, offset: u64, len: usize) -> Option<Vec<u8>>;
}

impl Media for [u8] {
    fn read_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        self.get(start..start.checked_add(len)?).map(<[u8]>::to_vec)
    }
}

impl Media for std::fs::File {
    fn read_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0; len];
        self.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }
}

fn u32_le(b: &[u8], at: usize) -> usize {
    b.get(at..at + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// An extent: (first sector, length in bytes).
type Extent = (usize, usize);

fn extent(media: &(impl Media + ?Sized), (lba, len): Extent) -> Option<Vec<u8>> {
    media.read_at((lba as u64).checked_mul(SECTOR as u64)?, len)
}

/// The content of the file at `path` (`/`-separated), if present; files
/// longer than `max` bytes count as absent.
pub fn read_file_from(media: &(impl Media + ?Sized), path: &str, max: usize) -> Option<Vec<u8>> {
    let (root, joliet) = root_record(media)?;
    let mut at = root;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, want) in parts.iter().enumerate() {
        let entry = list(media, at, joliet)?
            .into_iter()
            .find(|e| e.name.eq_ignore_ascii_case(want))?;
        if i + 1 == parts.len() {
            return (!entry.is_dir && entry.extent.1 <= max)
                .then(|| extent(media, entry.extent))?;
        }
        if !entry.is_dir {
            return None;
        }
        at = entry.extent;
    }
    None
}

/// The content of the file at `path` in an image held in memory.
pub fn read_file(iso: &[u8], path: &str) -> Option<Vec<u8>> {
    read_file_from(iso, path, iso.len())
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (Joliet, Rock Ridge or primary).
    pub name: String,
    /// A directory.
    pub is_dir: bool,
    extent: Extent,
}

/// The entries of the directory at `path` (`""` for the root), if it is one.
pub fn list_dir(media: &(impl Media + ?Sized), path: &str) -> Option<Vec<Entry>> {
    let (root, joliet) = root_record(media)?;
    let mut at = root;
    for want in path.split('/').filter(|p| !p.is_empty()) {
        let e = list(media, at, joliet)?
            .into_iter()
            .find(|e| e.name.eq_ignore_ascii_case(want))?;
        if !e.is_dir {
            return None;
        }
        at = e.extent;
    }
    list(media, at, joliet)
}

/// The volume identifier (the label `blkid` shows), trailing spaces cut.
pub fn volume_id(media: &(impl Media + ?Sized)) -> Option<String> {
    let vd = media.read_at(16 * SECTOR as u64, SECTOR)?;
    (vd[0] == 1 && &vd[1..6] == b"CD001")
        .then(|| String::from_utf8_lossy(&vd[40..72]).trim_end().to_string())
}

/// The root directory's extent, preferring the Joliet tree.
fn root_record(media: &(impl Media + ?Sized)) -> Option<(Extent, bool)> {
    let mut primary = None;
    for n in 16..64 {
        let vd = media.read_at(n * SECTOR as u64, SECTOR)?;
        if &vd[1..6] != b"CD001" {
            return None;
        }
        let root = (u32_le(&vd, 156 + 2), u32_le(&vd, 156 + 10));
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

/// The entries of the directory at `at`; `None` when it cannot be read.
fn list(media: &(impl Media + ?Sized), at: Extent, joliet: bool) -> Option<Vec<Entry>> {
    if at.1 > MAX_DIR_BYTES {
        return None;
    }
    let dir = extent(media, at)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < dir.len() {
        let rec_len = dir[at] as usize;
        if rec_len == 0 {
            at = (at / SECTOR + 1) * SECTOR;
            continue;
        }
        // A record shorter than its fixed part is malformed: stop here.
        let Some(rec) = dir.get(at..at + rec_len) else {
            break;
        };
        let Some(&name_len) = rec.get(32) else { break };
        let name_len = name_len as usize;
        let Some(raw) = rec.get(33..33 + name_len) else {
            break;
        };
        // One byte 0 or 1 names the directory itself or its parent.
        if name_len > 1 || raw.first().is_some_and(|b| *b > 1) {
            let name = if joliet {
                name_of(raw, true)
            } else {
                rock_ridge_name(rec, name_len).unwrap_or_else(|| name_of(raw, false))
            };
            out.push(Entry {
                name,
                is_dir: rec[25] & 2 != 0,
                extent: (u32_le(rec, 2), u32_le(rec, 10)),
            });
        }
        at += rec_len;
    }
    Some(out)
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
        agent_base::tool::run(cmd.arg(dir.path().join("cd"))).unwrap_or_else(|e| panic!("{e}"));
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
        let (root, joliet) = root_record(&good[..]).unwrap();
        let at = root.0 * SECTOR;
        // A record length of 20: shorter than the fixed 33 bytes.
        let mut short = good.clone();
        short[at] = 20;
        assert_eq!(list(&short[..], root, joliet), Some(vec![]));
        // A record with a zero-length name.
        let mut empty = good.clone();
        empty[at + 32] = 0;
        let _ = list(&empty[..], root, joliet);
        // Truncated images anywhere: no panic.
        for cut in [0, 100, 16 * SECTOR + 10, good.len() / 2, good.len() - 1] {
            let _ = read_file(&good[..cut], "openstack/latest/user_data");
        }
    }
}
