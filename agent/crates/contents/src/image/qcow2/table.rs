//! Decoding of single L1 and L2 table entries into what they map, with the
//! checks that keep every mapped host range inside a sane part of the file.

use super::header::{Header, MAX_HOST_OFFSET};

/// Bits 9..=55: the host offset field of L1 entries and standard L2 entries.
const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
/// L1 entry bits that must be zero: 0..=8 and 56..=62.
const L1_RESERVED: u64 = 0x7f00_0000_0000_01ff;
/// Standard L2 descriptor bits that must be zero: 1..=8 and 56..=61.
const L2_RESERVED: u64 = 0x3f00_0000_0000_01fe;
/// L2 entry bit 62: compressed cluster.
const L2_COMPRESSED: u64 = 1 << 62;
/// Standard L2 descriptor bit 0: the cluster reads as zeros (version 3).
const L2_ZERO: u64 = 1;
/// Compressed data is counted in 512-byte sectors.
const SECTOR: u64 = 512;

/// What is wrong with one table entry (without the entry's position, which
/// the caller adds).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryError {
    /// Bits that must be zero are set.
    #[error("entry {raw:#018x} has reserved bits {bits:#x} set")]
    Reserved {
        /// The entry.
        raw: u64,
        /// The reserved bits set.
        bits: u64,
    },
    /// The zero flag in a version 2 image.
    #[error("entry {0:#018x} has the zero flag (bit 0) set, which version 2 images do not have")]
    ZeroFlagV2(u64),
    /// The zero flag in an extended entry.
    #[error("entry {0:#018x} has the zero flag (bit 0) set, which extended L2 entries keep in the subcluster bitmap instead")]
    ZeroFlagExtended(u64),
    /// A compressed descriptor beyond 2^56.
    #[error("compressed descriptor {raw:#018x} has host offset {host} beyond the 2^56 limit")]
    CompressedBeyond {
        /// The entry.
        raw: u64,
        /// Its host offset.
        host: u64,
    },
    /// A compressed descriptor inside the header cluster.
    #[error(
        "compressed descriptor {raw:#018x} points to host offset {host}, inside the header cluster"
    )]
    CompressedInHeader {
        /// The entry.
        raw: u64,
        /// Its host offset.
        host: u64,
    },
    /// A host offset that is not cluster-aligned.
    #[error("{what} host offset {host} is not aligned to the cluster size {cluster_size}")]
    Unaligned {
        /// What it points to.
        what: &'static str,
        /// The host offset.
        host: u64,
        /// The cluster size.
        cluster_size: u64,
    },
    /// A host offset inside the header cluster.
    #[error("{what} host offset {host} lies inside the header cluster")]
    InHeader {
        /// What it points to.
        what: &'static str,
        /// The host offset.
        host: u64,
    },
    /// Subclusters both allocated and zero.
    #[error(
        "subcluster bitmap {bitmap:#018x} marks subclusters {both:#010x} both allocated and zero"
    )]
    BitmapConflict {
        /// The bitmap.
        bitmap: u64,
        /// The subclusters marked both ways.
        both: u32,
    },
    /// Allocated subclusters without a host cluster.
    #[error("subcluster bitmap {0:#018x} marks subclusters allocated, but the entry has no host cluster")]
    BitmapWithoutHost(u64),
}

/// What one L2 entry maps its guest cluster to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum L2Mapping {
    /// Unallocated or zero-flagged: the guest cluster reads as zeros.
    Zero,
    /// Uncompressed data in the host cluster at this offset.
    Data {
        /// Cluster-aligned host offset.
        host: u64,
    },
    /// Some subclusters (extended L2 entries) hold data in the host cluster
    /// at `host`; the others read as zeros.
    Subclusters {
        /// Cluster-aligned host offset.
        host: u64,
        /// Bit `i` set: subcluster `i` is at `host + i × subcluster size`.
        allocated: u32,
    },
    /// Compressed data in host bytes `[host, end)`; decompression may stop
    /// before `end`, which is rounded up to a sector.
    Compressed {
        /// Host offset of the first compressed byte.
        host: u64,
        /// End of the last sector the descriptor covers.
        end: u64,
    },
}

/// Decodes an L1 entry: the host offset of its L2 table, or `None` if unallocated.
///
/// The error is a detail message (without the entry's position).
pub(crate) fn decode_l1(raw: u64, header: &Header) -> Result<Option<u64>, EntryError> {
    if raw & L1_RESERVED != 0 {
        return Err(EntryError::Reserved {
            raw,
            bits: raw & L1_RESERVED,
        });
    }
    let host = raw & OFFSET_MASK;
    if host == 0 {
        return Ok(None);
    }
    check_cluster_offset(host, header, "L2 table")?;
    Ok(Some(host))
}

/// Decodes an L2 entry.
///
/// The error is a detail message (without the entry's position).
pub(crate) fn decode_l2(raw: u64, header: &Header) -> Result<L2Mapping, EntryError> {
    if raw & L2_COMPRESSED != 0 {
        return decode_compressed(raw, header);
    }
    if raw & L2_ZERO != 0 {
        if header.version < 3 {
            return Err(EntryError::ZeroFlagV2(raw));
        }
        // Zero-flagged: reads as zeros whatever the (preallocated) offset is.
        return Ok(L2Mapping::Zero);
    }
    if raw & L2_RESERVED != 0 {
        return Err(EntryError::Reserved {
            raw,
            bits: raw & L2_RESERVED,
        });
    }
    let host = raw & OFFSET_MASK;
    if host == 0 {
        return Ok(L2Mapping::Zero);
    }
    check_cluster_offset(host, header, "data cluster")?;
    Ok(L2Mapping::Data { host })
}

/// Decodes a compressed cluster descriptor (bit 62 set).
fn decode_compressed(raw: u64, header: &Header) -> Result<L2Mapping, EntryError> {
    // Offset in bits 0..x, additional sector count in bits x..=61.
    let x = 62 - (header.cluster_bits - 8);
    let host = raw & ((1u64 << x) - 1);
    let extra_sectors = (raw >> x) & ((1u64 << (header.cluster_bits - 8)) - 1);
    if host >= MAX_HOST_OFFSET {
        return Err(EntryError::CompressedBeyond { raw, host });
    }
    if host < header.cluster_size() {
        return Err(EntryError::CompressedInHeader { raw, host });
    }
    // At most 2^(cluster_bits-8) sectors: two clusters, by the field's width.
    let end = (host & !(SECTOR - 1)) + (extra_sectors + 1) * SECTOR;
    Ok(L2Mapping::Compressed { host, end })
}

/// Checks a cluster-aligned host offset of an L2 table or data cluster.
fn check_cluster_offset(host: u64, header: &Header, what: &'static str) -> Result<(), EntryError> {
    let cluster_size = header.cluster_size();
    if host & (cluster_size - 1) != 0 {
        return Err(EntryError::Unaligned {
            what,
            host,
            cluster_size,
        });
    }
    if host < cluster_size {
        return Err(EntryError::InHeader { what, host });
    }
    Ok(())
}

/// Decodes an extended L2 entry: the standard descriptor `raw` and the
/// subcluster bitmap (bits 0..32 allocated, 32..64 reads as zeros).
///
/// The error is a detail message (without the entry's position).
pub(crate) fn decode_l2_extended(
    raw: u64,
    bitmap: u64,
    header: &Header,
) -> Result<L2Mapping, EntryError> {
    if raw & L2_COMPRESSED != 0 {
        // The bitmap of a compressed cluster is reserved; qemu ignores it too.
        return decode_compressed(raw, header);
    }
    if raw & L2_ZERO != 0 {
        return Err(EntryError::ZeroFlagExtended(raw));
    }
    if raw & L2_RESERVED != 0 {
        return Err(EntryError::Reserved {
            raw,
            bits: raw & L2_RESERVED,
        });
    }
    let allocated = bitmap as u32;
    let zero = (bitmap >> 32) as u32;
    if allocated & zero != 0 {
        return Err(EntryError::BitmapConflict {
            bitmap,
            both: allocated & zero,
        });
    }
    let host = raw & OFFSET_MASK;
    if host == 0 {
        if allocated != 0 {
            return Err(EntryError::BitmapWithoutHost(bitmap));
        }
        return Ok(L2Mapping::Zero);
    }
    check_cluster_offset(host, header, "data cluster")?;
    Ok(match allocated {
        0 => L2Mapping::Zero,
        u32::MAX => L2Mapping::Data { host },
        allocated => L2Mapping::Subclusters { host, allocated },
    })
}
