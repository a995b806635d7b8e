//! Test support: writes small, valid qcow2 v3 images by hand with a chosen
//! host layout (tables before or after their data), and reads the L1/L2
//! tables of existing images so tests can patch them.

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
    let cs = 1u64 << cluster_bits;
    let l2_entries = cs / 8;
    let guest_clusters = virtual_size.div_ceil(cs);
    let l1_entries = guest_clusters.div_ceil(l2_entries).max(1);
    assert!(
        l1_entries * 8 <= cs,
        "test images keep the L1 table in one cluster"
    );
    let mut l2_used: Vec<u64> = clusters.iter().map(|(g, _)| g / l2_entries).collect();
    l2_used.sort_unstable();
    l2_used.dedup();

    // Host clusters: header, refcount table, refcount blocks, L1, then the rest.
    let tables = l2_used.len() as u64;
    let payload = clusters.len() as u64;
    let per_block = cs / 2;
    let mut rc_blocks = 1;
    while (4 + rc_blocks + tables + payload).div_ceil(per_block) > rc_blocks {
        rc_blocks += 1;
    }
    let l1_cluster = 2 + rc_blocks;
    let first_free = l1_cluster + 1;
    let (l2_base, data_base) = match order {
        Order::TablesFirst => (first_free, first_free + tables),
        Order::DataFirst => (first_free + payload, first_free),
    };
    let total = first_free + tables + payload;
    let mut img = vec![0u8; (total * cs) as usize];

    // Header.
    put32(&mut img, 0, 0x5146_49fb);
    put32(&mut img, 4, 3);
    put32(&mut img, 20, cluster_bits);
    put64(&mut img, 24, virtual_size);
    put32(&mut img, 36, l1_entries as u32);
    put64(&mut img, 40, l1_cluster * cs);
    put64(&mut img, 48, cs);
    put32(&mut img, 56, 1);
    put32(&mut img, 96, 4);
    put32(&mut img, 100, 112);

    // Refcounts: every cluster of the file is used once.
    for b in 0..rc_blocks {
        put64(&mut img, (cs + b * 8) as usize, (2 + b) * cs);
    }
    for c in 0..total {
        let at = 2 * cs + c * 2;
        img[at as usize..at as usize + 2].copy_from_slice(&1u16.to_be_bytes());
    }

    // L1 and L2 tables, data.
    const COPIED: u64 = 1 << 63;
    for (i, l1_index) in l2_used.iter().enumerate() {
        let at = l1_cluster * cs + l1_index * 8;
        put64(&mut img, at as usize, ((l2_base + i as u64) * cs) | COPIED);
    }
    for (n, (guest_cluster, content)) in clusters.iter().enumerate() {
        let host = (data_base + n as u64) * cs;
        let table = l2_used
            .iter()
            .position(|&t| t == guest_cluster / l2_entries)
            .expect("table listed") as u64;
        let entry_at = (l2_base + table) * cs + (guest_cluster % l2_entries) * 8;
        let range = host as usize..(host + cs) as usize;
        let entry = match content {
            Cluster::Data(bytes) => {
                assert_eq!(bytes.len() as u64, cs, "data must be one cluster");
                img[range].copy_from_slice(bytes);
                host | COPIED
            }
            Cluster::PreallocatedZero => {
                img[range].fill(0xee);
                host | COPIED | 1
            }
        };
        put64(&mut img, entry_at as usize, entry);
    }
    img
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
