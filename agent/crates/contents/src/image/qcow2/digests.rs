//! Per-block digests of the host file as it first streams through: what
//! lets bytes that are read again later (see [`super::Reread`]) be trusted
//! exactly as far as the first stream was.
//!
//! The whole-image checksum covers the first stream only. A server that
//! serves other bytes the second time must not get them onto the disk, so
//! every block read again is compared with a BLAKE3 digest of the same block
//! taken the first time. BLAKE3 because it is collision resistant (the
//! server picks both versions). One 32-byte digest per block: 32 KiB per GiB
//! of image.
//!
//! Only blocks that may be needed again are digested: a block every byte of
//! which was already used when it left the window (table entries, mapped
//! data) can only be asked for again by a second mapping of the same bytes,
//! which no valid image has. Images as `qemu-img` writes them (tables before
//! the data they map) then cost no digest per data block; before, digesting
//! every block took about an eighth of a qcow2 write's CPU time.

/// BLAKE3 digests of the host file's blocks, by block index.
#[derive(Debug, Default)]
pub(crate) struct BlockDigests {
    /// Length of block `i` (host bytes `[i × block size, …)`) as first read,
    /// and its digest if it was kept.
    blocks: Vec<(usize, Option<[u8; 32]>)>,
}

/// What is known of a block read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// The first stream never reached it.
    Unknown,
    /// Every byte of it had been used: no digest was taken.
    Used(usize),
    /// Its length and digest.
    Digest(usize),
}

impl BlockDigests {
    /// Records block `index` (which must be the next one) as first read,
    /// without a digest yet.
    pub(super) fn record_len(&mut self, index: usize, len: usize) {
        debug_assert_eq!(index, self.blocks.len(), "blocks are recorded in order");
        self.blocks.push((len, None));
    }

    /// Takes the digest of block `index` (recorded before) from its bytes.
    pub(super) fn keep(&mut self, index: usize, bytes: &[u8]) {
        if let Some(b) = self.blocks.get_mut(index) {
            debug_assert_eq!(b.0, bytes.len(), "the block as first read");
            b.1 = Some(*blake3::hash(bytes).as_bytes());
        }
    }

    /// Length of block `index` as first read, and whether it was kept.
    pub(super) fn kept(&self, index: usize) -> Kept {
        match self.blocks.get(index) {
            None => Kept::Unknown,
            Some((len, None)) => Kept::Used(*len),
            Some((len, Some(_))) => Kept::Digest(*len),
        }
    }

    /// Whether `bytes` are exactly block `index` as first read (never for a
    /// block without a digest).
    pub(super) fn matches(&self, index: usize, bytes: &[u8]) -> bool {
        self.blocks.get(index).is_some_and(|(len, digest)| {
            *len == bytes.len() && digest.is_some_and(|d| blake3::hash(bytes) == d)
        })
    }
}

#[cfg(test)]
mod tests {
    //! Matching of re-read blocks.

    use super::{BlockDigests, Kept};

    #[test]
    fn only_the_same_bytes_of_a_kept_block_match() {
        let mut d = BlockDigests::default();
        d.record_len(0, 12);
        d.record_len(1, 4);
        d.record_len(2, 5);
        d.keep(0, b"first block!");
        d.keep(1, b"last");
        assert!(d.matches(0, b"first block!"));
        assert!(d.matches(1, b"last"));
        assert!(!d.matches(0, b"first block?"));
        assert!(!d.matches(1, b"last+"));
        assert!(!d.matches(3, b""));
        // Block 2 was used up: nothing read again matches it.
        assert!(!d.matches(2, b"bytes"));
        assert_eq!(
            (d.kept(1), d.kept(2), d.kept(3)),
            (Kept::Digest(4), Kept::Used(5), Kept::Unknown)
        );
    }
}
