//! The FAT12/FAT16 layout the floppy reader needs: the boot sector's
//! geometry and label, the fixed root directory (volume label, long and
//! short names) and one file's cluster chain. Every offset is computed
//! with checked arithmetic and every byte fetched with `get`.

use super::{is_floppy_label, Refusal, PARAMETERS_FILE};

/// Bytes of the boot sector read before anything else.
pub(super) const BOOT_SECTOR: usize = 512;

/// Bytes of a directory entry.
const ENTRY: usize = 32;

/// Clusters from which the FAT type is FAT16, and FAT32 (Microsoft's rule,
/// which Linux and fatfs follow).
const FAT16_MIN_CLUSTERS: u64 = 4085;
const FAT32_MIN_CLUSTERS: u64 = 65525;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([*s.first()?, *s.get(1)?]))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

/// A FAT boot sector's fields, before the volume's geometry is checked.
#[derive(Debug, Clone, Copy)]
struct Bpb {
    bytes_per_sector: u64,
    sectors_per_cluster: u64,
    reserved: u64,
    fats: u64,
    root_entries: u64,
    total_sectors: u64,
    fat_sectors: u64,
}

impl Bpb {
    /// The fields, if `boot` is a FAT boot sector (as Linux's
    /// `fat_read_bpb` checks it); exFAT is named.
    fn read(boot: &[u8]) -> Result<Bpb, Refusal> {
        if boot.get(3..11) == Some(b"EXFAT   ".as_slice()) {
            return Err(Refusal::ExFat);
        }
        let field = |at| u16_at(boot, at).map(u64::from).ok_or(Refusal::NotFat);
        let byte = |at: usize| boot.get(at).copied().map(u64::from).ok_or(Refusal::NotFat);
        let bpb = Bpb {
            bytes_per_sector: field(11)?,
            sectors_per_cluster: byte(13)?,
            reserved: field(14)?,
            fats: byte(16)?,
            root_entries: field(17)?,
            total_sectors: match field(19)? {
                0 => u32_at(boot, 32).map(u64::from).ok_or(Refusal::NotFat)?,
                n => n,
            },
            fat_sectors: field(22)?,
        };
        let media = byte(21)?;
        let sane = matches!(bpb.bytes_per_sector, 512 | 1024 | 2048 | 4096)
            && bpb.sectors_per_cluster.is_power_of_two()
            && bpb.reserved != 0
            && bpb.fats != 0
            && (media == 0xf0 || media >= 0xf8);
        if sane {
            Ok(bpb)
        } else {
            Err(Refusal::NotFat)
        }
    }

    /// FAT32's layout: no FAT16 size and no fixed root directory.
    fn fat32_layout(&self) -> bool {
        self.fat_sectors == 0 || self.root_entries == 0
    }
}

/// Ok when `boot` is a FAT boot sector; else why not (another kind of
/// media, or exFAT).
pub(super) fn check_boot_sector(boot: &[u8]) -> Result<(), Refusal> {
    Bpb::read(boot).map(|_| ())
}

/// The label in the boot sector (FAT12/16 or FAT32 layout), if it is a FAT
/// boot sector with an extended boot signature.
pub(super) fn boot_label(boot: &[u8]) -> Option<String> {
    let bpb = Bpb::read(boot).ok()?;
    let (sig, label) = if bpb.fat32_layout() {
        (66, 71)
    } else {
        (38, 43)
    };
    (*boot.get(sig)? == 0x29).then_some(())?;
    text_11(boot.get(label..label + 11)?)
}

/// An 11-byte FAT name field as text, trailing spaces dropped.
fn text_11(raw: &[u8]) -> Option<String> {
    Some(String::from_utf8_lossy(raw).trim_end().to_string())
}

/// FAT12 or FAT16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Fat12,
    Fat16,
}

/// A checked FAT12/FAT16 volume's layout, in bytes from the image's start.
#[derive(Debug, Clone)]
pub(super) struct Volume {
    pub kind: Kind,
    fat_start: u64,
    root_start: u64,
    root_bytes: u64,
    data_start: u64,
    cluster_bytes: u64,
    /// Data clusters; valid cluster numbers are 2..clusters + 2.
    pub clusters: u32,
}

/// What the root directory says.
#[derive(Debug, Default)]
pub(super) struct Root {
    /// The volume-label entry's text.
    pub label: Option<String>,
    /// `parameters.txt`'s first cluster and size.
    pub parameters: Option<(u32, u32)>,
}

fn malformed(what: &str) -> Refusal {
    Refusal::Malformed(what.into())
}

impl Volume {
    /// The layout of the FAT12/FAT16 volume at the start of `image`. A
    /// volume that is not usable is refused as such only when its boot
    /// sector says it is the floppy; otherwise it is another label.
    pub(super) fn parse(image: &[u8]) -> Result<Volume, Refusal> {
        let boot = image.get(..BOOT_SECTOR).ok_or(Refusal::NotFat)?;
        let bpb = Bpb::read(boot)?;
        let label = boot_label(boot);
        Volume::layout(&bpb, image.len()).map_err(|e| {
            if label.as_deref().is_some_and(is_floppy_label) {
                e
            } else {
                Refusal::OtherLabel(label.clone().unwrap_or_default())
            }
        })
    }

    fn layout(bpb: &Bpb, image_len: usize) -> Result<Volume, Refusal> {
        if bpb.fat32_layout() {
            return Err(Refusal::Fat32);
        }
        let overflow = || malformed("its geometry overflows");
        let bps = bpb.bytes_per_sector;
        let root_bytes = bpb
            .root_entries
            .checked_mul(ENTRY as u64)
            .ok_or_else(overflow)?;
        let root_sectors = root_bytes.div_ceil(bps);
        let fat_start = bpb.reserved.checked_mul(bps).ok_or_else(overflow)?;
        let fat_bytes = bpb.fat_sectors.checked_mul(bps).ok_or_else(overflow)?;
        let root_start = bpb
            .fats
            .checked_mul(fat_bytes)
            .and_then(|f| f.checked_add(fat_start))
            .ok_or_else(overflow)?;
        let data_start = root_sectors
            .checked_mul(bps)
            .and_then(|r| r.checked_add(root_start))
            .ok_or_else(overflow)?;
        let volume_bytes = bpb.total_sectors.checked_mul(bps).ok_or_else(overflow)?;
        let image_bytes = u64::try_from(image_len).unwrap_or(u64::MAX);
        if volume_bytes > image_bytes {
            return Err(Refusal::Malformed(format!(
                "the volume claims {volume_bytes} bytes, the device has {image_bytes}"
            )));
        }
        let data_bytes = volume_bytes
            .checked_sub(data_start)
            .ok_or_else(|| malformed("its FATs and root directory overrun the volume"))?;
        let cluster_bytes = bpb
            .sectors_per_cluster
            .checked_mul(bps)
            .ok_or_else(overflow)?;
        let clusters = data_bytes.checked_div(cluster_bytes).ok_or_else(overflow)?;
        if clusters >= FAT32_MIN_CLUSTERS {
            return Err(Refusal::Fat32);
        }
        let kind = if clusters < FAT16_MIN_CLUSTERS {
            Kind::Fat12
        } else {
            Kind::Fat16
        };
        // Entries 0 and 1 are reserved; FAT12 packs two entries in 3 bytes.
        let entries = clusters.checked_add(2).ok_or_else(overflow)?;
        let needed = match kind {
            Kind::Fat12 => entries.checked_mul(3).map(|b| b.div_ceil(2)),
            Kind::Fat16 => entries.checked_mul(2),
        }
        .ok_or_else(overflow)?;
        if fat_bytes < needed {
            return Err(Refusal::Malformed(format!(
                "a FAT of {fat_bytes} bytes cannot map {clusters} clusters"
            )));
        }
        Ok(Volume {
            kind,
            fat_start,
            root_start,
            root_bytes,
            data_start,
            cluster_bytes,
            clusters: u32::try_from(clusters).map_err(|_| overflow())?,
        })
    }

    /// The root directory's volume label and `parameters.txt` (its long
    /// name, or its short name, in any case).
    pub(super) fn root_entries(&self, image: &[u8]) -> Result<Root, Refusal> {
        let dir = slice(image, self.root_start, self.root_bytes)
            .ok_or_else(|| malformed("its root directory lies outside the device"))?;
        let mut root = Root::default();
        let mut long = LongName::default();
        for e in dir.chunks_exact(ENTRY) {
            let (Some(&first), Some(&attr)) = (e.first(), e.get(11)) else {
                break;
            };
            match (first, attr) {
                (0, _) => break,
                (0xe5, _) => long = LongName::default(),
                _ if attr & 0x3f == 0x0f => long.push(e),
                _ if attr & 0x08 != 0 => {
                    long = LongName::default();
                    if root.label.is_none() {
                        root.label = e.get(..11).and_then(text_11);
                    }
                }
                _ if attr & 0x10 != 0 => long = LongName::default(),
                _ => {
                    let name = std::mem::take(&mut long)
                        .finish(e)
                        .or_else(|| short_name(e));
                    let wanted = name.is_some_and(|n| n.eq_ignore_ascii_case(PARAMETERS_FILE));
                    if wanted && root.parameters.is_none() {
                        let first = u16_at(e, 26).map(u32::from);
                        let size = u32_at(e, 28);
                        root.parameters = first.zip(size);
                    }
                }
            }
        }
        Ok(root)
    }

    /// The FAT's entry for `cluster` (already checked to be in range).
    fn next(&self, image: &[u8], cluster: u32) -> Result<u32, Refusal> {
        let c = u64::from(cluster);
        let at = match self.kind {
            Kind::Fat12 => c.checked_add(c / 2),
            Kind::Fat16 => c.checked_mul(2),
        }
        .and_then(|o| o.checked_add(self.fat_start));
        let raw = at
            .and_then(|at| slice(image, at, 2))
            .and_then(|b| u16_at(b, 0))
            .ok_or_else(|| malformed("its FAT lies outside the device"))?;
        Ok(u32::from(match self.kind {
            Kind::Fat12 if cluster % 2 == 1 => raw >> 4,
            Kind::Fat12 => raw & 0xfff,
            Kind::Fat16 => raw,
        }))
    }

    /// The first `size` bytes of the chain from `first`. The whole chain is
    /// walked, each cluster at most once: a chain that comes back to a
    /// cluster is a loop, so the walk ends after at most `clusters` steps.
    pub(super) fn read_chain(
        &self,
        image: &[u8],
        first: u32,
        size: usize,
    ) -> Result<Vec<u8>, Refusal> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let end = u64::from(self.clusters).saturating_add(2);
        let (eoc, bad) = match self.kind {
            Kind::Fat12 => (0xff8, 0xff7),
            Kind::Fat16 => (0xfff8, 0xfff7),
        };
        let mut seen = vec![false; usize::try_from(end).unwrap_or(0)];
        let mut out = Vec::with_capacity(size);
        let mut cluster = first;
        loop {
            let index = cluster
                .checked_sub(2)
                .filter(|_| u64::from(cluster) < end)
                .ok_or_else(|| {
                    Refusal::BadChain(format!("points to cluster {cluster}, outside 2..{end}"))
                })?;
            let seen_it = seen
                .get_mut(usize::try_from(cluster).unwrap_or(usize::MAX))
                .ok_or_else(|| malformed("a cluster beyond its FAT"))?;
            if std::mem::replace(seen_it, true) {
                return Err(Refusal::Loop(cluster));
            }
            let want = size.saturating_sub(out.len());
            if want > 0 {
                let take = u64::try_from(want)
                    .unwrap_or(u64::MAX)
                    .min(self.cluster_bytes);
                let at = u64::from(index)
                    .checked_mul(self.cluster_bytes)
                    .and_then(|o| o.checked_add(self.data_start));
                let bytes = at
                    .and_then(|at| slice(image, at, take))
                    .ok_or_else(|| malformed("a data cluster lies outside the device"))?;
                out.extend_from_slice(bytes);
            }
            match self.next(image, cluster)? {
                n if n >= eoc => break,
                n if n == bad => {
                    return Err(Refusal::BadChain(format!(
                        "passes cluster {cluster}, marked bad"
                    )))
                }
                0 => {
                    return Err(Refusal::BadChain(format!(
                        "passes cluster {cluster}, marked free"
                    )))
                }
                n => cluster = n,
            }
        }
        if out.len() < size {
            return Err(Refusal::BadChain(format!(
                "ends after {} of its {size} bytes",
                out.len()
            )));
        }
        Ok(out)
    }
}

/// `len` bytes of `image` at `at`, if all there.
fn slice(image: &[u8], at: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(at).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    image.get(start..end)
}

/// The 8.3 name of a directory entry (`NAME.EXT`).
fn short_name(e: &[u8]) -> Option<String> {
    let mut raw = e.get(..11)?.to_vec();
    if let Some(b) = raw.first_mut().filter(|b| **b == 0x05) {
        *b = 0xe5;
    }
    let base = String::from_utf8_lossy(raw.get(..8)?)
        .trim_end()
        .to_string();
    let ext = String::from_utf8_lossy(raw.get(8..11)?)
        .trim_end()
        .to_string();
    Some(if ext.is_empty() {
        base
    } else {
        format!("{base}.{ext}")
    })
}

/// The long-name entries in front of a short entry: sequence numbers
/// counting down to 1, all with the short name's checksum.
#[derive(Debug, Default)]
struct LongName {
    /// (sequence number, checksum, 13 UTF-16 units), in directory order.
    parts: Vec<(u8, u8, [u16; 13])>,
}

/// Most long-name entries one name can have (255 characters).
const MAX_LONG_PARTS: usize = 20;

impl LongName {
    fn push(&mut self, e: &[u8]) {
        let (Some(&seq), Some(&sum)) = (e.first(), e.get(13)) else {
            return;
        };
        if seq & 0x40 != 0 {
            self.parts.clear();
        }
        if self.parts.len() >= MAX_LONG_PARTS {
            self.parts.clear();
            return;
        }
        let mut units = [0u16; 13];
        let offsets = (1..11)
            .step_by(2)
            .chain((14..26).step_by(2))
            .chain((28..32).step_by(2));
        for (u, at) in units.iter_mut().zip(offsets) {
            *u = u16_at(e, at).unwrap_or(0xffff);
        }
        self.parts.push((seq, sum, units));
    }

    /// The long name, if the parts form one for the short entry `e`.
    fn finish(self, e: &[u8]) -> Option<String> {
        let short = e.get(..11)?;
        let sum = short
            .iter()
            .fold(0u8, |s, &c| s.rotate_right(1).wrapping_add(c));
        let n = self.parts.len();
        let ordered = self.parts.iter().enumerate().all(|(i, (seq, s, _))| {
            let want = u8::try_from(n - i).unwrap_or(0) | if i == 0 { 0x40 } else { 0 };
            *seq == want && *s == sum
        });
        if n == 0 || !ordered {
            return None;
        }
        let units: Vec<u16> = self
            .parts
            .iter()
            .rev()
            .flat_map(|(_, _, u)| u.iter().copied())
            .take_while(|&u| u != 0)
            .collect();
        String::from_utf16(&units).ok()
    }
}
