//! Per-block digests of the host file as it first streams through: what
//! lets bytes that are read again later (see [`super::Reread`]) be trusted
//! exactly as far as the first stream was.
//!
//! The whole-image checksum covers the first stream only. A server that
//! serves other bytes the second time must not get them onto the disk, so
//! every block read again is compared with a BLAKE3 digest of the same block
//! taken the first time. BLAKE3 because it is collision resistant (the
//! server picks both versions) and, with SIMD, about four times as fast as
//! SHA-256 here, so digesting every block costs little next to the image
//! checksum itself. One 32-byte digest per block: 32 KiB per GiB of image.

/// BLAKE3 digests of the host file's blocks, by block index.
#[derive(Debug, Default)]
pub(crate) struct BlockDigests {
    /// Digest and length of block `i` (host bytes `[i × block size, …)`).
    blocks: Vec<([u8; 32], usize)>,
}

impl BlockDigests {
    /// Records block `index` (which must be the next one) as first read.
    pub fn record(&mut self, index: usize, bytes: &[u8]) {
        debug_assert_eq!(index, self.blocks.len(), "blocks are recorded in order");
        self.blocks
            .push((*blake3::hash(bytes).as_bytes(), bytes.len()));
    }

    /// Length of block `index` as first read, if it was.
    pub fn block_len(&self, index: usize) -> Option<usize> {
        self.blocks.get(index).map(|(_, len)| *len)
    }

    /// Whether `bytes` are exactly block `index` as first read.
    pub fn matches(&self, index: usize, bytes: &[u8]) -> bool {
        self.blocks
            .get(index)
            .is_some_and(|(digest, len)| *len == bytes.len() && blake3::hash(bytes) == *digest)
    }
}

#[cfg(test)]
mod tests {
    //! Matching of re-read blocks.

    use super::BlockDigests;

    #[test]
    fn only_the_same_bytes_match() {
        let mut d = BlockDigests::default();
        d.record(0, b"first block!");
        d.record(1, b"last");
        assert!(d.matches(0, b"first block!"));
        assert!(d.matches(1, b"last"));
        assert!(!d.matches(0, b"first block?"));
        assert!(!d.matches(1, b"last+"));
        assert!(!d.matches(2, b""));
        assert_eq!((d.block_len(1), d.block_len(2)), (Some(4), None));
    }
}
