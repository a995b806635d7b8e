//! The qcow2 header and its extensions: parsing the first cluster of the
//! image, and refusing everything the converter does not support.

use super::error::Qcow2Error;
use super::Limits;

/// The qcow2 magic, "QFI\xfb".
pub(crate) const MAGIC: [u8; 4] = *b"QFI\xfb";
/// Length of a version 2 header (and of the common part of a version 3 one).
const V2_HEADER_LEN: u64 = 72;
/// Minimum length of a version 3 header.
const V3_MIN_HEADER_LEN: u64 = 104;
/// Smallest supported cluster_bits (512 B clusters).
const MIN_CLUSTER_BITS: u32 = 9;
/// Largest supported cluster_bits (2 MiB clusters, QEMU's limit too).
const MAX_CLUSTER_BITS: u32 = 21;
/// Largest active L1 table accepted, in bytes (QEMU's limit too).
const MAX_L1_BYTES: u64 = 32 << 20;
/// Host offsets must stay below 2^56 (the width of the offset fields).
pub(crate) const MAX_HOST_OFFSET: u64 = 1 << 56;

/// Incompatible feature bit 0: refcounts may be stale. Harmless here.
const INCOMPAT_DIRTY: u64 = 1 << 0;
/// Incompatible feature bit 1: QEMU found the image corrupt.
const INCOMPAT_CORRUPT: u64 = 1 << 1;
/// Incompatible feature bit 2: guest data lives in an external file.
const INCOMPAT_DATA_FILE: u64 = 1 << 2;
/// Incompatible feature bit 3: compression_type is not deflate.
const INCOMPAT_COMPRESSION: u64 = 1 << 3;
/// Incompatible feature bit 4: extended L2 entries (subclusters).
const INCOMPAT_EXTENDED_L2: u64 = 1 << 4;
/// Every incompatible bit this converter knows.
const INCOMPAT_KNOWN: u64 = INCOMPAT_DIRTY
    | INCOMPAT_CORRUPT
    | INCOMPAT_DATA_FILE
    | INCOMPAT_COMPRESSION
    | INCOMPAT_EXTENDED_L2;

/// Header extension: end of the extension area.
const EXT_END: u32 = 0;
/// Header extension: full disk encryption header pointer.
const EXT_CRYPTO: u32 = 0x0537_be77;
/// Header extension: external data file name.
const EXT_DATA_FILE: u32 = 0x4441_5441;

/// How compressed clusters are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compression {
    /// Raw deflate (RFC 1951, no zlib header): compression_type 0.
    Deflate,
    /// zstd frames: compression_type 1.
    Zstd,
}

/// The validated facts of a qcow2 header that the conversion needs.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    /// 2 or 3.
    pub version: u32,
    /// log2 of the cluster size, 9..=21.
    pub cluster_bits: u32,
    /// Guest disk size in bytes.
    pub virtual_size: u64,
    /// Entries in the active L1 table.
    pub l1_entries: u64,
    /// Host offset of the active L1 table.
    pub l1_offset: u64,
    /// Compression of compressed clusters.
    pub compression: Compression,
    /// Extended L2 entries: 128 bits each, with 32 subclusters per cluster.
    pub extended_l2: bool,
    /// Internal snapshots in the image (ignored: the active L1 is converted).
    pub snapshots: u32,
}

impl Header {
    /// Cluster size in bytes.
    pub(super) fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Bytes of one L2 entry: 8, or 16 with extended L2 entries.
    pub(super) fn l2_entry_size(&self) -> u64 {
        if self.extended_l2 {
            16
        } else {
            8
        }
    }

    /// Entries in one L2 table.
    pub(super) fn l2_entries(&self) -> u64 {
        self.cluster_size() / self.l2_entry_size()
    }

    /// log2 of the smallest guest unit a table can map on its own: the
    /// subcluster (1/32 cluster) with extended L2 entries, else the cluster.
    pub(super) fn granule_bits(&self) -> u32 {
        if self.extended_l2 {
            self.cluster_bits - 5
        } else {
            self.cluster_bits
        }
    }

    /// Guest bytes one L1 entry (one L2 table) maps.
    pub(super) fn l2_coverage(&self) -> u64 {
        self.l2_entries() << self.cluster_bits
    }

    /// Guest clusters in the virtual disk (the last one may be partial).
    pub(super) fn guest_clusters(&self) -> u64 {
        self.virtual_size.div_ceil(self.cluster_size())
    }

    /// L1 entries that map the virtual disk; later ones are ignored.
    pub(super) fn l1_entries_used(&self) -> u64 {
        self.guest_clusters().div_ceil(self.l2_entries())
    }

    /// Parses and validates the header from the first bytes of the image.
    ///
    /// `buf` holds the image from offset 0; it should cover the first
    /// cluster (or the whole image, if shorter) so the header extensions
    /// can be checked.
    pub(super) fn parse(buf: &[u8], limits: &Limits) -> Result<Header, Qcow2Error> {
        let have = buf.len() as u64;
        let magic_len = buf.len().min(4);
        if buf[..magic_len] != MAGIC[..magic_len] {
            return Err(Qcow2Error::BadMagic {
                found: buf[..magic_len].to_vec(),
            });
        }
        if have < V2_HEADER_LEN {
            return Err(Qcow2Error::TruncatedHeader {
                len: have,
                needed: V2_HEADER_LEN,
            });
        }
        let version = be32(buf, 4);
        if version != 2 && version != 3 {
            return Err(Qcow2Error::UnsupportedVersion { version });
        }
        let backing_offset = be64(buf, 8);
        let backing_len = be32(buf, 16);
        let cluster_bits = be32(buf, 20);
        let virtual_size = be64(buf, 24);
        let crypt_method = be32(buf, 32);
        let l1_entries = u64::from(be32(buf, 36));
        let l1_offset = be64(buf, 40);
        let snapshots = be32(buf, 60);

        if !(MIN_CLUSTER_BITS..=MAX_CLUSTER_BITS).contains(&cluster_bits) {
            return Err(invalid(format!(
                "cluster_bits is {cluster_bits}, supported are {MIN_CLUSTER_BITS}..={MAX_CLUSTER_BITS} (512 B to 2 MiB clusters)"
            )));
        }
        let cluster_size = 1u64 << cluster_bits;

        let (header_len, incompat, compression_type) = if version == 2 {
            (V2_HEADER_LEN, 0, 0)
        } else {
            if have < V3_MIN_HEADER_LEN {
                return Err(Qcow2Error::TruncatedHeader {
                    len: have,
                    needed: V3_MIN_HEADER_LEN,
                });
            }
            let header_len = u64::from(be32(buf, 100));
            if header_len < V3_MIN_HEADER_LEN || header_len % 8 != 0 || header_len > cluster_size {
                return Err(invalid(format!(
                    "header_length is {header_len}, expected a multiple of 8 from {V3_MIN_HEADER_LEN} to the cluster size {cluster_size}"
                )));
            }
            if have < header_len {
                return Err(Qcow2Error::TruncatedHeader {
                    len: have,
                    needed: header_len,
                });
            }
            let compression_type = if header_len > V3_MIN_HEADER_LEN {
                buf[V3_MIN_HEADER_LEN as usize]
            } else {
                0
            };
            (header_len, be64(buf, 72), compression_type)
        };

        if backing_offset != 0 {
            return Err(Qcow2Error::BackingFile {
                offset: backing_offset,
                len: backing_len,
            });
        }
        if crypt_method != 0 {
            return Err(Qcow2Error::Encrypted {
                method: crypt_method,
            });
        }
        check_incompatible(incompat)?;
        let compression = compression_of(incompat, compression_type)?;
        let extended_l2 = incompat & INCOMPAT_EXTENDED_L2 != 0;
        if extended_l2 && cluster_bits < MIN_CLUSTER_BITS + 5 {
            return Err(invalid(format!(
                "extended L2 entries need clusters of at least {} bytes (subclusters of 512), this image has {cluster_size}",
                1u64 << (MIN_CLUSTER_BITS + 5)
            )));
        }

        if virtual_size > limits.max_virtual_size {
            return Err(Qcow2Error::VirtualSizeTooLarge {
                virtual_size,
                limit: limits.max_virtual_size,
            });
        }
        let header = Header {
            version,
            cluster_bits,
            virtual_size,
            l1_entries,
            l1_offset,
            compression,
            extended_l2,
            snapshots,
        };
        header.check_l1()?;
        check_extensions(buf, header_len, cluster_size)?;
        Ok(header)
    }

    /// Checks that the active L1 table covers the disk and lies after the header.
    fn check_l1(&self) -> Result<(), Qcow2Error> {
        let needed = self.l1_entries_used();
        if self.l1_entries < needed {
            return Err(invalid(format!(
                "l1_size is {} entries, but virtual size {} with {}-byte clusters needs at least {needed}",
                self.l1_entries,
                self.virtual_size,
                self.cluster_size()
            )));
        }
        let l1_bytes = self.l1_entries * 8;
        if l1_bytes > MAX_L1_BYTES {
            return Err(invalid(format!(
                "l1_size is {} entries ({l1_bytes} bytes), more than the {MAX_L1_BYTES}-byte maximum",
                self.l1_entries
            )));
        }
        if needed == 0 {
            return Ok(());
        }
        if self.l1_offset & (self.cluster_size() - 1) != 0 {
            return Err(invalid(format!(
                "l1_table_offset {} is not aligned to the cluster size {}",
                self.l1_offset,
                self.cluster_size()
            )));
        }
        if self.l1_offset < self.cluster_size() {
            return Err(invalid(format!(
                "l1_table_offset {} lies inside the header cluster",
                self.l1_offset
            )));
        }
        if self
            .l1_offset
            .checked_add(l1_bytes)
            .is_none_or(|end| end > MAX_HOST_OFFSET)
        {
            return Err(invalid(format!(
                "l1_table_offset {} is beyond the 2^56 host offset limit",
                self.l1_offset
            )));
        }
        Ok(())
    }
}

/// Whether `first_bytes` starts with the qcow2 magic.
pub(crate) fn has_magic(first_bytes: &[u8]) -> bool {
    first_bytes.starts_with(&MAGIC)
}

/// Refuses incompatible feature bits other than the dirty and compression-type bits.
fn check_incompatible(incompat: u64) -> Result<(), Qcow2Error> {
    let unknown = incompat & !INCOMPAT_KNOWN;
    if unknown != 0 {
        return Err(Qcow2Error::Unsupported {
            feature: format!("unknown incompatible feature bits {unknown:#x}"),
        });
    }
    if incompat & INCOMPAT_DATA_FILE != 0 {
        return Err(Qcow2Error::Unsupported {
            feature: "external data file (incompatible feature bit 2)".into(),
        });
    }
    if incompat & INCOMPAT_CORRUPT != 0 {
        return Err(Qcow2Error::MarkedCorrupt);
    }
    Ok(())
}

/// The compression of compressed clusters, from feature bit 3 and compression_type.
fn compression_of(incompat: u64, compression_type: u8) -> Result<Compression, Qcow2Error> {
    let bit = incompat & INCOMPAT_COMPRESSION != 0;
    match (bit, compression_type) {
        (false, 0) => Ok(Compression::Deflate),
        (false, t) => Err(invalid(format!(
            "compression_type is {t} but incompatible feature bit 3 (compression type) is clear"
        ))),
        (true, 0) => Err(invalid(
            "incompatible feature bit 3 (compression type) is set but compression_type is 0".into(),
        )),
        (true, 1) => Ok(Compression::Zstd),
        (true, t) => Err(Qcow2Error::Unsupported {
            feature: format!("compression_type {t} (only 0 = deflate and 1 = zstd are known)"),
        }),
    }
}

/// Walks the header extensions, refusing those that change how data is read.
fn check_extensions(buf: &[u8], header_len: u64, cluster_size: u64) -> Result<(), Qcow2Error> {
    let have = buf.len() as u64;
    let mut at = header_len;
    while at + 8 <= cluster_size {
        if at + 8 > have {
            return Err(Qcow2Error::TruncatedHeader {
                len: have,
                needed: at + 8,
            });
        }
        let kind = be32(buf, at as usize);
        let len = u64::from(be32(buf, at as usize + 4));
        match kind {
            EXT_END => return Ok(()),
            EXT_DATA_FILE => {
                return Err(Qcow2Error::Unsupported {
                    feature: format!(
                        "external data file (header extension {kind:#010x} at offset {at})"
                    ),
                })
            }
            EXT_CRYPTO => {
                return Err(Qcow2Error::Unsupported {
                    feature: format!(
                        "full disk encryption (header extension {kind:#010x} at offset {at})"
                    ),
                })
            }
            _ => {}
        }
        let next = at + 8 + len.next_multiple_of(8);
        if next > cluster_size {
            return Err(invalid(format!(
                "header extension {kind:#010x} at offset {at} with length {len} runs past the first cluster ({cluster_size} bytes)"
            )));
        }
        at = next;
    }
    Ok(())
}

/// An [`Qcow2Error::InvalidHeader`] with this detail.
fn invalid(detail: String) -> Qcow2Error {
    Qcow2Error::InvalidHeader { detail }
}

/// Big-endian u32 at `at`.
fn be32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_be_bytes(b)
}

/// Big-endian u64 at `at`.
fn be64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_be_bytes(b)
}
