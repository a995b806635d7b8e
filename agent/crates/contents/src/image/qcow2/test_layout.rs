//! Test support: a qcow2 v3 writer that places every piece of the file (the
//! refcount table and blocks, the L1 table, each L2 table, each data cluster
//! and each pack of compressed clusters) in whatever host order the test
//! asks for, with refcounts exact enough for `qemu-img check`.

use flate2::{Compress, Compression, FlushCompress};

use super::test_image::{put32, put64};

/// Contents of one guest cluster.
#[derive(Debug, Clone)]
pub(super) enum Content {
    /// Uncompressed data (exactly one cluster).
    Data(Vec<u8>),
    /// One cluster of data, stored deflate-compressed.
    Compressed(Vec<u8>),
    /// Zero flag set, with a preallocated host cluster full of 0xEE bytes
    /// that must never be read (not with extended L2 entries).
    PreallocatedZero,
    /// Extended L2 entries only: subclusters with bit `i` of `allocated` set
    /// hold `data`'s subcluster `i`; those in `zero` read as zeros.
    Subclusters {
        /// One cluster; only the allocated subclusters are stored.
        data: Vec<u8>,
        /// Allocated subclusters.
        allocated: u32,
        /// Subclusters that read as zeros.
        zero: u32,
    },
}

/// One piece of the host file, placed by [`Layout::build`] in the order given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Piece {
    /// The refcount table.
    RefcountTable,
    /// The refcount blocks, together.
    RefcountBlocks,
    /// The active L1 table.
    L1,
    /// The `n`th L2 table in guest order.
    L2(usize),
    /// The guest cluster at index `n` of [`Layout::clusters`]; consecutive
    /// compressed ones are packed byte after byte, as qemu does.
    Cluster(usize),
}

/// A qcow2 image to build: geometry and guest contents.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// Guest disk size.
    pub virtual_size: u64,
    /// 128-bit L2 entries with subcluster bitmaps.
    pub extended_l2: bool,
    /// (guest cluster index, contents), each guest cluster at most once.
    pub clusters: Vec<(u64, Content)>,
}

/// Where a guest cluster's bytes went.
#[derive(Debug, Clone, Copy)]
enum Stored {
    /// A host cluster.
    Cluster(u64),
    /// Compressed bytes `[offset, offset + len)`.
    Compressed(u64, u64),
}

impl Layout {
    /// Cluster size in bytes.
    fn cs(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Bytes of one L2 entry.
    fn entry_size(&self) -> u64 {
        if self.extended_l2 {
            16
        } else {
            8
        }
    }

    /// Guest clusters one L2 table maps.
    fn l2_entries(&self) -> u64 {
        self.cs() / self.entry_size()
    }

    /// The L1 indices that have an L2 table, ascending.
    pub(super) fn tables(&self) -> Vec<u64> {
        let mut t: Vec<u64> = self
            .clusters
            .iter()
            .map(|(g, _)| g / self.l2_entries())
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// Every piece, tables first, then the clusters in the order listed.
    pub(super) fn pieces(&self) -> Vec<Piece> {
        let mut p = vec![Piece::RefcountTable, Piece::RefcountBlocks, Piece::L1];
        p.extend((0..self.tables().len()).map(Piece::L2));
        p.extend((0..self.clusters.len()).map(Piece::Cluster));
        p
    }

    /// The compressed form of every compressed cluster, by cluster index.
    fn compressed(&self) -> Vec<Option<Vec<u8>>> {
        self.clusters
            .iter()
            .map(|(_, c)| match c {
                Content::Compressed(data) => {
                    assert_eq!(
                        data.len() as u64,
                        self.cs(),
                        "compressed data must be one cluster"
                    );
                    let mut out = vec![0u8; data.len() * 2 + 1024];
                    let mut z = Compress::new(Compression::default(), false);
                    z.compress(data, &mut out, FlushCompress::Finish)
                        .expect("deflate");
                    out.truncate(z.total_out() as usize);
                    Some(out)
                }
                _ => None,
            })
            .collect()
    }

    /// Builds the image with its pieces in host order `order` (a
    /// permutation of [`Layout::pieces`]).
    pub(super) fn build(&self, order: &[Piece]) -> Vec<u8> {
        let cs = self.cs();
        let tables = self.tables();
        let guest_clusters = self.virtual_size.div_ceil(cs);
        let l1_entries = guest_clusters.div_ceil(self.l2_entries()).max(1);
        let l1_clusters = (l1_entries * 8).div_ceil(cs);
        let packed = self.compressed();
        let mut all = self.pieces();
        let mut sorted = order.to_vec();
        all.sort_by_key(|p| format!("{p:?}"));
        sorted.sort_by_key(|p| format!("{p:?}"));
        assert!(all == sorted, "the order must place every piece once");

        // Sizes in clusters; the refcount blocks depend on the file's size.
        let mut rc_blocks = 1u64;
        let mut rc_table = 1u64;
        loop {
            let (end, _) = self.place(order, &packed, l1_clusters, rc_blocks, rc_table);
            let need = end.div_ceil(cs).div_ceil(cs / 2);
            if need <= rc_blocks {
                break;
            }
            rc_blocks = need;
            rc_table = (rc_blocks * 8).div_ceil(cs);
        }
        let (end, at) = self.place(order, &packed, l1_clusters, rc_blocks, rc_table);
        let mut img = vec![0u8; end.next_multiple_of(cs) as usize];
        let host_of = |p: Piece| {
            at.iter()
                .find(|(q, _)| *q == p)
                .map(|(_, h)| *h)
                .expect("placed")
        };

        // Header: v3, 16-bit refcounts, 112-byte header (deflate).
        put32(&mut img, 0, 0x5146_49fb);
        put32(&mut img, 4, 3);
        put32(&mut img, 20, self.cluster_bits);
        put64(&mut img, 24, self.virtual_size);
        put32(&mut img, 36, l1_entries as u32);
        put64(&mut img, 40, host_of(Piece::L1));
        put64(&mut img, 48, host_of(Piece::RefcountTable));
        put32(&mut img, 56, rc_table as u32);
        if self.extended_l2 {
            put64(&mut img, 72, 1 << 4);
        }
        put32(&mut img, 96, 4);
        put32(&mut img, 100, 112);

        // Tables and data.
        const COPIED: u64 = 1 << 63;
        let mut refcounts = vec![0u16; (end.div_ceil(cs)) as usize];
        let mut count = |from: u64, to: u64| {
            for c in from / cs..to.div_ceil(cs) {
                refcounts[c as usize] += 1;
            }
        };
        count(0, cs);
        count(
            host_of(Piece::RefcountTable),
            host_of(Piece::RefcountTable) + rc_table * cs,
        );
        let rc_base = host_of(Piece::RefcountBlocks);
        count(rc_base, rc_base + rc_blocks * cs);
        let l1 = host_of(Piece::L1);
        count(l1, l1 + l1_clusters * cs);
        for (i, t) in tables.iter().enumerate() {
            let host = host_of(Piece::L2(i));
            count(host, host + cs);
            put64(&mut img, (l1 + t * 8) as usize, host | COPIED);
        }
        for (n, (guest, content)) in self.clusters.iter().enumerate() {
            let table = tables
                .iter()
                .position(|&t| t == guest / self.l2_entries())
                .expect("table listed");
            let entry_at =
                host_of(Piece::L2(table)) + (guest % self.l2_entries()) * self.entry_size();
            let stored = match (content, &packed[n]) {
                (_, Some(bytes)) => {
                    let host = at_compressed(&at, n);
                    img[host as usize..][..bytes.len()].copy_from_slice(bytes);
                    Stored::Compressed(host, bytes.len() as u64)
                }
                _ => Stored::Cluster(host_of(Piece::Cluster(n))),
            };
            let (descriptor, bitmap) = match (content, stored) {
                (_, Stored::Compressed(host, len)) => {
                    let x = 62 - (self.cluster_bits - 8);
                    let first = host & !511;
                    let sectors = (host + len).div_ceil(512) - first / 512;
                    count(first, first + sectors * 512);
                    ((1 << 62) | ((sectors - 1) << x) | host, 0)
                }
                (Content::Data(bytes), Stored::Cluster(host)) => {
                    assert_eq!(bytes.len() as u64, cs, "data must be one cluster");
                    img[host as usize..][..cs as usize].copy_from_slice(bytes);
                    count(host, host + cs);
                    (host | COPIED, u64::from(u32::MAX))
                }
                (Content::PreallocatedZero, Stored::Cluster(host)) => {
                    assert!(!self.extended_l2, "extended L2 entries use the bitmap");
                    img[host as usize..][..cs as usize].fill(0xee);
                    count(host, host + cs);
                    (host | COPIED | 1, 0)
                }
                (
                    Content::Subclusters {
                        data,
                        allocated,
                        zero,
                    },
                    Stored::Cluster(host),
                ) => {
                    assert!(self.extended_l2, "subclusters need extended L2 entries");
                    let sub = cs / 32;
                    img[host as usize..][..cs as usize].fill(0xee);
                    for i in (0..32).filter(|i| allocated & (1 << i) != 0) {
                        let r = (i * sub) as usize..((i + 1) * sub) as usize;
                        img[host as usize..][r.clone()].copy_from_slice(&data[r]);
                    }
                    count(host, host + cs);
                    (
                        host | COPIED,
                        u64::from(*allocated) | (u64::from(*zero) << 32),
                    )
                }
                (Content::Compressed(_), Stored::Cluster(_)) => unreachable!("packed above"),
            };
            put64(&mut img, entry_at as usize, descriptor);
            if self.extended_l2 {
                put64(&mut img, entry_at as usize + 8, bitmap);
            }
        }
        for b in 0..rc_blocks {
            put64(
                &mut img,
                (host_of(Piece::RefcountTable) + b * 8) as usize,
                rc_base + b * cs,
            );
        }
        for (c, r) in refcounts.iter().enumerate() {
            let at = (rc_base + c as u64 * 2) as usize;
            img[at..at + 2].copy_from_slice(&r.to_be_bytes());
        }
        img
    }

    /// Host offsets of the pieces in `order` (compressed clusters at their
    /// byte offset) and the end of the file.
    fn place(
        &self,
        order: &[Piece],
        packed: &[Option<Vec<u8>>],
        l1_clusters: u64,
        rc_blocks: u64,
        rc_table: u64,
    ) -> (u64, Vec<(Piece, u64)>) {
        let cs = self.cs();
        let mut at = cs;
        let mut placed = Vec::new();
        let mut in_pack = false;
        for &p in order {
            let packed_bytes = match p {
                Piece::Cluster(n) => packed[n].as_ref().map(|b| b.len() as u64),
                _ => None,
            };
            match packed_bytes {
                Some(len) => {
                    placed.push((p, at));
                    at += len;
                    in_pack = true;
                }
                None => {
                    if in_pack {
                        at = at.next_multiple_of(cs);
                        in_pack = false;
                    }
                    let clusters = match p {
                        Piece::RefcountTable => rc_table,
                        Piece::RefcountBlocks => rc_blocks,
                        Piece::L1 => l1_clusters,
                        Piece::L2(_) | Piece::Cluster(_) => 1,
                    };
                    placed.push((p, at));
                    at += clusters * cs;
                }
            }
        }
        (at.next_multiple_of(cs), placed)
    }
}

/// Host byte offset of compressed cluster `n`.
fn at_compressed(at: &[(Piece, u64)], n: usize) -> u64 {
    at.iter()
        .find(|(p, _)| *p == Piece::Cluster(n))
        .map(|(_, h)| *h)
        .expect("placed")
}
