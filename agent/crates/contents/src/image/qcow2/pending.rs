//! The host → guest map of a conversion: host ranges that the L1 or an L2
//! table maps (L2 tables, data runs, compressed clusters), queued by the host
//! offset they wait for until the stream reaches them.

use std::collections::BTreeMap;

use super::error::Qcow2Error;

/// A host range that something maps, waiting for (the rest of) its bytes.
#[derive(Debug)]
pub(crate) struct Item {
    /// First host byte.
    pub start: u64,
    /// One past the last host byte.
    pub end: u64,
    /// Host bytes before this were handled already.
    pub done: u64,
    /// What the range holds.
    pub kind: Kind,
}

impl Item {
    /// A range nothing of which was handled yet.
    pub(super) fn new(start: u64, end: u64, kind: Kind) -> Item {
        Item {
            start,
            end,
            done: start,
            kind,
        }
    }

    /// The host offset it waits for: its next byte, or for a compressed
    /// cluster (handled only once complete) its last byte.
    fn key(&self) -> u64 {
        match self.kind {
            Kind::Compressed { .. } => self.end - 1,
            _ => self.done,
        }
    }

    /// First host offset not handled yet; a table entry split by a block
    /// boundary counts as missing as a whole.
    pub(super) fn first_missing(&self) -> u64 {
        match &self.kind {
            Kind::L1 { carry } => self.done - carry.len as u64,
            Kind::L2 { carry, half, .. } => {
                self.done - carry.len as u64 - if half.is_some() { 8 } else { 0 }
            }
            _ => self.done,
        }
    }
}

/// What a mapped host range holds.
#[derive(Debug)]
pub(crate) enum Kind {
    /// The used part of the active L1 table.
    L1 {
        /// A table entry split across two blocks.
        carry: Carry,
    },
    /// An L2 table (or its used part, for the last one).
    L2 {
        /// Guest offset of its first entry.
        guest: u64,
        /// A table entry split across two blocks.
        carry: Carry,
        /// The descriptor word of an extended entry whose bitmap is next.
        half: Option<u64>,
    },
    /// Host-contiguous data clusters mapping guest-contiguous clusters.
    Data {
        /// Guest offset of `start`.
        guest: u64,
    },
    /// One compressed cluster; handled once all of it has arrived.
    Compressed {
        /// Guest offset of the cluster.
        guest: u64,
    },
}

impl Kind {
    /// How error messages call it.
    pub(super) fn what(&self) -> &'static str {
        match self {
            Kind::L1 { .. } => "the L1 table",
            Kind::L2 { .. } => "an L2 table",
            Kind::Data { .. } => "data",
            Kind::Compressed { .. } => "a compressed cluster",
        }
    }
}

/// The first bytes of a big-endian table entry that straddles two blocks.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    /// Bytes so far.
    bytes: [u8; 8],
    /// How many of `bytes` are filled.
    len: usize,
}

impl Carry {
    /// Calls `f(index, entry)` for each big-endian 8-byte entry that `bytes`
    /// completes, where `index` is the entry `bytes[0]` belongs to; partial
    /// entries at either end go through this carry.
    pub(super) fn entries(
        &mut self,
        mut index: u64,
        mut bytes: &[u8],
        mut f: impl FnMut(u64, u64) -> Result<(), Qcow2Error>,
    ) -> Result<(), Qcow2Error> {
        if self.len > 0 {
            let take = (8 - self.len).min(bytes.len());
            self.bytes[self.len..self.len + take].copy_from_slice(&bytes[..take]);
            self.len += take;
            bytes = &bytes[take..];
            if self.len < 8 {
                return Ok(());
            }
            self.len = 0;
            f(index, u64::from_be_bytes(self.bytes))?;
            index += 1;
        }
        let mut entries = bytes.chunks_exact(8);
        for entry in &mut entries {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(entry);
            f(index, u64::from_be_bytes(raw))?;
            index += 1;
        }
        let tail = entries.remainder();
        self.bytes[..tail.len()].copy_from_slice(tail);
        self.len = tail.len();
        Ok(())
    }
}

/// Items ordered by the host offset they wait for.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// Keyed by (host offset waited for, sequence number for uniqueness).
    items: BTreeMap<(u64, u64), Item>,
    /// Next sequence number.
    seq: u64,
}

impl Pending {
    /// Queues `item`.
    pub(super) fn push(&mut self, item: Item) {
        self.items.insert((item.key(), self.seq), item);
        self.seq += 1;
    }

    /// Number of items waiting.
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Takes the item waiting for the lowest host offset, if that is below
    /// `position` (the stream has reached it).
    pub(super) fn pop_ready(&mut self, position: u64) -> Option<Item> {
        let entry = self.items.first_entry()?;
        (entry.key().0 < position).then(|| entry.remove())
    }

    /// All items, in the order they wait in.
    pub(super) fn into_items(self) -> impl Iterator<Item = Item> {
        self.items.into_values()
    }
}

#[cfg(test)]
mod tests {
    //! Entry splitting across arbitrary boundaries.

    use super::Carry;

    #[test]
    fn entries_survive_any_split() {
        let raw: Vec<u8> = (0..5u64).flat_map(|v| (v * 0x0101).to_be_bytes()).collect();
        for cut in 0..=raw.len() {
            let mut carry = Carry::default();
            let mut seen = Vec::new();
            let (a, b) = raw.split_at(cut);
            let mut record = |i, v| {
                seen.push((i, v));
                Ok(())
            };
            carry.entries(0, a, &mut record).expect("first part");
            carry
                .entries(cut as u64 / 8, b, &mut record)
                .expect("second part");
            let want: Vec<_> = (0..5u64).map(|v| (v, v * 0x0101)).collect();
            assert_eq!(seen, want, "cut at {cut}");
        }
    }
}
