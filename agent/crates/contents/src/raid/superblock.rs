//! md's version-1 superblock (`struct mdp_superblock_1`,
//! `include/uapi/linux/raid/md_p.h`), written by the agent for a new array
//! and read back to find members: [`encode`] builds one member's 512-byte
//! superblock (256 bytes plus the role table of [`MAX_DEV`] slots) with the
//! kernel's checksum, [`decode`] checks and reads one, [`offsets`] says
//! where each minor version keeps it (1.0 near the end, 1.1 at 0, 1.2 at
//! 4 KiB). Version 0.90 is never written: its location ([`v090_offset`])
//! is looked at to wipe it and to recognise a member ([`is_v090`]).

/// `MD_SB_MAGIC`.
pub const MAGIC: u32 = 0xa92b_4efc;
/// Role slots in the superblocks written here (mdadm writes 384 at most;
/// 128 is plenty and keeps the superblock at 512 bytes).
pub const MAX_DEV: u32 = 128;
/// Bytes of a superblock written here.
pub const SB_BYTES: usize = 256 + 2 * MAX_DEV as usize;
/// Role of a spare.
pub const ROLE_SPARE: u16 = 0xffff;
/// Role of a faulty member.
pub const ROLE_FAULTY: u16 = 0xfffe;
/// `resync_offset` of an array whose redundancy is in sync.
pub const IN_SYNC: u64 = u64::MAX;

/// The array-wide values of a new array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayInfo {
    /// `set_uuid`.
    pub uuid: [u8; 16],
    /// `set_name` (at most 32 bytes).
    pub name: String,
    /// Seconds since the epoch.
    pub ctime: u64,
    /// md level (0, 1, 5, 6, 10).
    pub level: u32,
    /// md layout.
    pub layout: u32,
    /// Chunk size, 512-byte sectors (0 for raid1).
    pub chunk_sectors: u32,
    /// Members.
    pub raid_disks: u32,
    /// Sectors of each member used for data (`size`).
    pub size: u64,
    /// Where a resync must start (0: all of it; [`IN_SYNC`]: none).
    pub resync_offset: u64,
}

/// One member's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// `dev_number` and its role (members are numbered by role here).
    pub role: u32,
    /// `device_uuid`.
    pub uuid: [u8; 16],
    /// Sector of the data start on the member.
    pub data_offset: u64,
    /// Sectors available for data on the member.
    pub data_size: u64,
    /// Sector where this superblock is written.
    pub super_offset: u64,
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn get64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The kernel's `calc_sb_1_csum` over the first `len` bytes, with the
/// checksum field itself counted as zero.
pub fn checksum(sb: &[u8], len: usize) -> u32 {
    let mut sum: u64 = 0;
    let mut i = 0;
    while i + 4 <= len {
        let w = if i == 216 { 0 } else { get32(sb, i) };
        sum += u64::from(w);
        i += 4;
    }
    if len - i == 2 {
        sum += u64::from(u16::from_le_bytes([sb[i], sb[i + 1]]));
    }
    ((sum & 0xffff_ffff) + (sum >> 32)) as u32
}

/// One member's superblock, [`SB_BYTES`] long.
pub fn encode(array: &ArrayInfo, member: &MemberInfo) -> Vec<u8> {
    let mut b = vec![0u8; SB_BYTES];
    put32(&mut b, 0, MAGIC);
    put32(&mut b, 4, 1);
    // feature_map 0: no bitmap, no bad-block log, no reshape.
    b[16..32].copy_from_slice(&array.uuid);
    let name = array.name.as_bytes();
    let n = name.len().min(32);
    b[32..32 + n].copy_from_slice(&name[..n]);
    put64(&mut b, 64, array.ctime);
    put32(&mut b, 72, array.level);
    put32(&mut b, 76, array.layout);
    put64(&mut b, 80, array.size);
    put32(&mut b, 88, array.chunk_sectors);
    put32(&mut b, 92, array.raid_disks);
    put64(&mut b, 128, member.data_offset);
    put64(&mut b, 136, member.data_size);
    put64(&mut b, 144, member.super_offset);
    put32(&mut b, 160, member.role);
    b[168..184].copy_from_slice(&member.uuid);
    put64(&mut b, 192, array.ctime);
    put64(&mut b, 200, 1); // events
    put64(&mut b, 208, array.resync_offset);
    put32(&mut b, 220, MAX_DEV);
    for slot in 0..MAX_DEV as usize {
        let role = if (slot as u32) < array.raid_disks {
            slot as u16
        } else {
            ROLE_SPARE
        };
        b[256 + 2 * slot..258 + 2 * slot].copy_from_slice(&role.to_le_bytes());
    }
    let csum = checksum(&b, SB_BYTES);
    put32(&mut b, 216, csum);
    b
}

/// What a member's superblock says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `set_uuid`.
    pub uuid: [u8; 16],
    /// `set_name` up to its first NUL.
    pub name: String,
    /// md level.
    pub level: u32,
    /// Members.
    pub raid_disks: u32,
    /// `dev_number`.
    pub dev_number: u32,
    /// The member's role (from the role table), if it has one.
    pub role: Option<u16>,
    /// `super_offset`.
    pub super_offset: u64,
    /// `data_offset`: where the member's share of the array's data starts,
    /// in sectors.
    pub data_offset: u64,
    /// `events`.
    pub events: u64,
}

impl Found {
    /// `set_uuid` as mdadm prints it (`xxxxxxxx:xxxxxxxx:xxxxxxxx:xxxxxxxx`).
    pub fn uuid_text(&self) -> String {
        self.uuid
            .chunks(4)
            .map(|c| c.iter().map(|b| format!("{b:02x}")).collect::<String>())
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// Reads a version-1 superblock from `b` (read at sector `at` of the
/// member): `None` unless the magic, version, recorded position and
/// checksum all agree.
pub fn decode(b: &[u8], at: u64) -> Option<Found> {
    if b.len() < 256 || get32(b, 0) != MAGIC || get32(b, 4) != 1 {
        return None;
    }
    let max_dev = get32(b, 220) as usize;
    let len = 256 + 2 * max_dev;
    if max_dev > 1920 || len > b.len() || get64(b, 144) != at {
        return None;
    }
    if checksum(b, len) != get32(b, 216) {
        return None;
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[16..32]);
    let name_raw = &b[32..64];
    let end = name_raw.iter().position(|&c| c == 0).unwrap_or(32);
    let dev_number = get32(b, 160);
    let role = (dev_number as usize).lt(&max_dev).then(|| {
        u16::from_le_bytes([
            b[256 + 2 * dev_number as usize],
            b[257 + 2 * dev_number as usize],
        ])
    });
    Some(Found {
        uuid,
        name: String::from_utf8_lossy(&name_raw[..end]).into_owned(),
        level: get32(b, 72),
        raid_disks: get32(b, 92),
        dev_number,
        role,
        super_offset: get64(b, 144),
        data_offset: get64(b, 128),
        events: get64(b, 200),
    })
}

/// Where versions 1.0, 1.1 and 1.2 keep the superblock on a member of
/// `sectors` 512-byte sectors (the kernel's `super_1_load`), as sectors.
pub fn offsets(sectors: u64) -> [u64; 3] {
    let end = sectors.saturating_sub(16) & !7;
    [end, 0, 8]
}

/// Where version 0.90 keeps its superblock (the last 64 KiB-aligned 64 KiB),
/// in bytes, on a member of `bytes`.
pub fn v090_offset(bytes: u64) -> Option<u64> {
    let sectors = bytes / 512;
    (sectors >= 128).then(|| ((sectors & !127) - 128) * 512)
}

/// Version 0.90's magic at the start of its superblock (little endian on x86).
pub const V090_MAGIC: u32 = MAGIC;

/// `b` starts a version-0.90 superblock (`mdp_super_t`: magic, major
/// version 0, minor version 90, in the byte order of the machine that wrote
/// it: little endian here; mdadm on x86 and the kernel's autodetect write it
/// so).
pub fn is_v090(b: &[u8]) -> bool {
    b.len() >= 12 && get32(b, 0) == V090_MAGIC && get32(b, 4) == 0 && get32(b, 8) == 90
}
