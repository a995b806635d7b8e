//! Test support: small, valid qcow2 v3 images with the tables before or
//! after their data (built by [`super::test_layout`]), and a reader of the
//! L1/L2 tables of existing images so tests can patch them.

use super::test_layout::{Content, Layout, Piece};

/// Contents of one guest cluster in a hand-made image.
#[derive(Debug, Clone)]
pub(super) enum Cluster {
    /// Uncompressed data (exactly one cluster).
    Data(Vec<u8>),
    /// Zero flag set, with a preallocated host cluster full of 0xEE bytes
    /// that must never be read.
    PreallocatedZero,
}

/// Where the L2 tables go relative to the data clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// L1, L2 tables, then data (what `qemu-img convert` does, roughly).
    TablesFirst,
    /// L1, data, then the L2 tables: every table comes after its data.
    DataFirst,
}

/// Builds a qcow2 v3 image with 16-bit refcounts, correct enough for
/// `qemu-img check`. `clusters` maps guest cluster indices to contents, in
/// the host order wanted for the data.
pub(super) fn build(
    cluster_bits: u32,
    virtual_size: u64,
    clusters: &[(u64, Cluster)],
    order: Order,
) -> Vec<u8> {
    let layout = Layout {
        cluster_bits,
        virtual_size,
        extended_l2: false,
        clusters: clusters
            .iter()
            .map(|(g, c)| {
                let content = match c {
                    Cluster::Data(d) => Content::Data(d.clone()),
                    Cluster::PreallocatedZero => Content::PreallocatedZero,
                };
                (*g, content)
            })
            .collect(),
    };
    let mut pieces = layout.pieces();
    if order == Order::DataFirst {
        // Refcount table and blocks, L1, then the clusters before the L2 tables.
        let (tables, mut rest): (Vec<Piece>, Vec<Piece>) =
            pieces.into_iter().partition(|p| matches!(p, Piece::L2(_)));
        rest.extend(tables);
        pieces = rest;
    }
    layout.build(&pieces)
}

/// One L2 entry of an existing image.
#[derive(Debug, Clone, Copy)]
pub(super) struct L2Entry {
    /// Guest offset it maps.
    pub guest: u64,
    /// Host offset of the entry itself.
    pub at: u64,
    /// Its raw value.
    pub raw: u64,
}

/// Cluster bits, L1 offset and L1 entry count of an image.
pub(super) fn geometry(img: &[u8]) -> (u32, u64, u64) {
    (get32(img, 20), get64(img, 40), u64::from(get32(img, 36)))
}

/// Every non-zero L2 entry reachable from the active L1 table.
pub(super) fn l2_entries(img: &[u8]) -> Vec<L2Entry> {
    let (bits, l1, l1_entries) = geometry(img);
    let cs = 1u64 << bits;
    let mut out = Vec::new();
    for i in 0..l1_entries {
        let table = get64(img, (l1 + i * 8) as usize) & 0x00ff_ffff_ffff_fe00;
        if table == 0 {
            continue;
        }
        for j in 0..cs / 8 {
            let at = table + j * 8;
            let raw = get64(img, at as usize);
            if raw != 0 {
                out.push(L2Entry {
                    guest: (i * (cs / 8) + j) * cs,
                    at,
                    raw,
                });
            }
        }
    }
    out
}

/// Writes a big-endian u32.
pub(super) fn put32(img: &mut [u8], at: usize, v: u32) {
    img[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u64.
pub(super) fn put64(img: &mut [u8], at: usize, v: u64) {
    img[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Reads a big-endian u32.
pub(super) fn get32(img: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(img[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads a big-endian u64.
pub(super) fn get64(img: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(img[at..at + 8].try_into().expect("8 bytes"))
}
