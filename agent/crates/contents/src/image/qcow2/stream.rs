//! The conversion engine: walks the host file once, front to back, and hands
//! every host range that something maps (the L1 table, L2 tables, runs of
//! data clusters, compressed clusters) to its handler as soon as its bytes
//! have arrived. Ranges whose bytes streamed past before their mapping was
//! known are deferred and read again afterwards ([`super::reread`]); the
//! zero ranges are emitted at the end.

use std::collections::BTreeMap;
use std::io::Read;

use super::decompress::{ClusterDecompressor, DecompressError};
use super::digests::BlockDigests;
use super::error::Qcow2Error;
use super::header::Header;
use super::pending::{Carry, Item, Kind, Pending};
use super::runs::ClusterRuns;
use super::source::Reread;
use super::table::{decode_l1, decode_l2, decode_l2_extended, L2Mapping};
use super::window::Window;
use super::{Limits, Sink, Summary};

/// Size of one read from the input.
pub(crate) const BLOCK_SIZE: usize = 1 << 20;
/// Bytes read before the header is parsed: the largest cluster, which holds
/// the header and its extensions.
const HEADER_READ: u64 = 2 << 20;

/// Converts like [`super::convert`], reading the input in `block_size` blocks.
pub(super) fn run<R: Read, S: Sink + ?Sized>(
    mut input: R,
    again: &mut dyn Reread,
    sink: &mut S,
    limits: &Limits,
    block_size: usize,
) -> Result<Summary, Qcow2Error> {
    let mut window = Window::new(block_size, u64::MAX);
    let mut digests = BlockDigests::default();
    while window.end() < HEADER_READ && !window.at_eof() {
        read(&mut window, &mut input, &mut digests)?;
    }
    let header = parse_header(&window, limits)?;
    // Compressed clusters span up to two clusters and are decompressed once
    // complete, so the window never shrinks below that plus a block.
    let floor = 2 * header.cluster_size() + block_size as u64;
    window.set_keep((limits.lookahead_bytes as u64).max(floor));

    sink.begin(header.virtual_size)
        .map_err(|source| Qcow2Error::Sink {
            op: "begin",
            offset: 0,
            source,
        })?;

    let mut engine = Engine::new(header, sink, limits.max_ranges);
    engine.schedule_l1(&window)?;
    let bs = block_size as u64;
    loop {
        engine.process(&window)?;
        if window.at_eof() {
            break;
        }
        // A block leaving the window keeps a digest unless all of it was
        // used ([`super::digests`]).
        window.evict_each(|at, bytes| {
            if engine.take_used(at / bs) < bytes.len() as u64 {
                digests.keep((at / bs) as usize, bytes);
            }
        });
        read(&mut window, &mut input, &mut digests)?;
    }
    engine.end_of_stream(&window)?;
    // What the window still holds may be read again whatever was used.
    for (at, bytes) in window.held() {
        digests.keep((at / bs) as usize, bytes);
    }
    engine.used = None;
    engine.read_deferred(again, &mut window, &digests)?;
    engine.finish()
}

/// Reads the next block and records its length, blaming the reader for errors.
fn read<R: Read>(
    window: &mut Window,
    input: &mut R,
    digests: &mut BlockDigests,
) -> Result<usize, Qcow2Error> {
    let n = window
        .read_block(input)
        .map_err(|source| Qcow2Error::Read {
            offset: window.end(),
            source,
        })?;
    if n > 0 {
        if let Some((at, bytes)) = window.last_block() {
            digests.record_len((at / window.block_size() as u64) as usize, bytes.len());
        }
    }
    Ok(n)
}

/// Parses the header from the bytes read so far.
fn parse_header(window: &Window, limits: &Limits) -> Result<Header, Qcow2Error> {
    let end = window.end();
    if let Some(bytes) = window.contiguous(0, end) {
        return Header::parse(bytes, limits);
    }
    let mut bytes = Vec::with_capacity(end as usize);
    for (_, piece) in window.pieces(0, end) {
        bytes.extend_from_slice(piece);
    }
    Header::parse(&bytes, limits)
}

/// A run of data clusters being collected from consecutive L2 entries.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    /// Host offset of its first byte.
    host: u64,
    /// Host offset past its last byte.
    host_end: u64,
    /// Guest offset of its first byte.
    guest: u64,
}

/// State of one conversion after the header.
pub(super) struct Engine<'a, S: ?Sized> {
    /// The validated header.
    pub(super) header: Header,
    /// Where guest bytes go.
    sink: &'a mut S,
    /// Mapped host ranges waiting for their bytes: the host → guest map.
    pub(super) pending: Pending,
    /// Mapped host ranges whose bytes had streamed past: read again later.
    pub(super) deferred: Vec<Item>,
    /// Guest granules (clusters, or subclusters with extended L2 entries)
    /// that hold data; the rest reads as zeros.
    mapped: ClusterRuns,
    /// Data run being collected while an L2 table is parsed.
    open_run: Option<OpenRun>,
    /// Created at the first compressed cluster.
    decompressor: Option<ClusterDecompressor>,
    /// One decompressed cluster.
    cluster: Vec<u8>,
    /// Compressed bytes that straddle blocks, made contiguous.
    scratch: Vec<u8>,
    /// Oldest host offset still held, while processing a block.
    window_start: u64,
    /// Stream position, while processing a block.
    position: u64,
    /// Uncompressed data clusters mapped.
    data_clusters: u64,
    /// Compressed clusters mapped.
    compressed_clusters: u64,
    /// Host bytes read again, and in how many rounds.
    pub(super) reread_bytes: u64,
    /// Rounds of reading again.
    pub(super) reread_rounds: u32,
    /// Where the stream ended.
    pub(super) eof: u64,
    /// [`Limits::max_ranges`].
    max_ranges: usize,
    /// During the first stream: bytes of each block (by index) fed to a
    /// table or to the disk so far.
    used: Option<BTreeMap<u64, u64>>,
}

impl<'a, S: Sink + ?Sized> Engine<'a, S> {
    /// A fresh engine for `header`.
    fn new(header: Header, sink: &'a mut S, max_ranges: usize) -> Self {
        Engine {
            header,
            sink,
            pending: Pending::default(),
            deferred: Vec::new(),
            mapped: ClusterRuns::default(),
            open_run: None,
            decompressor: None,
            cluster: Vec::new(),
            scratch: Vec::new(),
            window_start: 0,
            position: 0,
            data_clusters: 0,
            compressed_clusters: 0,
            reread_bytes: 0,
            reread_rounds: 0,
            eof: 0,
            max_ranges,
            used: Some(BTreeMap::new()),
        }
    }

    /// Bytes of block `index` used so far in the first stream; forgets it.
    fn take_used(&mut self, index: u64) -> u64 {
        self.used
            .as_mut()
            .and_then(|u| u.remove(&index))
            .unwrap_or(0)
    }

    /// Queues the used part of the active L1 table.
    fn schedule_l1(&mut self, window: &Window) -> Result<(), Qcow2Error> {
        let entries = self.header.l1_entries_used();
        if entries == 0 {
            return Ok(());
        }
        self.window_start = window.start();
        self.position = window.end();
        let start = self.header.l1_offset;
        self.schedule(Item::new(
            start,
            start + entries * 8,
            Kind::L1 {
                carry: Carry::default(),
            },
        ))
    }

    /// Handles every queued range whose next byte has arrived.
    pub(super) fn process(&mut self, window: &Window) -> Result<(), Qcow2Error> {
        self.window_start = window.start();
        self.position = window.end();
        while let Some(item) = self.pending.pop_ready(self.position) {
            self.advance(item, window)?;
        }
        Ok(())
    }

    /// Feeds `item` the bytes it waits for that the window holds.
    fn advance(&mut self, mut item: Item, window: &Window) -> Result<(), Qcow2Error> {
        if let Kind::Compressed { guest } = item.kind {
            return self.decompress(item.start, item.end, guest, window);
        }
        if item.done < window.start() {
            self.defer(item, window.start());
            return Ok(());
        }
        let to = item.end.min(window.end());
        let bs = window.block_size() as u64;
        for (at, bytes) in window.pieces(item.done, to) {
            self.feed(&mut item, at, bytes)?;
            if let Some(used) = self.used.as_mut() {
                *used.entry(at / bs).or_default() += bytes.len() as u64;
            }
        }
        if item.done < item.end {
            self.pending.push(item);
        }
        Ok(())
    }

    /// Handles host bytes `bytes` at host offset `at` (== `item.done`) of `item`.
    fn feed(&mut self, item: &mut Item, at: u64, bytes: &[u8]) -> Result<(), Qcow2Error> {
        debug_assert_eq!(at, item.done);
        let index = (at - item.start) / 8;
        let start = item.start;
        let extended = self.header.extended_l2;
        match &mut item.kind {
            Kind::Data { guest } => {
                let offset = *guest + (at - start);
                self.sink
                    .data(offset, bytes)
                    .map_err(|source| Qcow2Error::Sink {
                        op: "data",
                        offset,
                        source,
                    })?;
            }
            Kind::L1 { carry } => {
                carry.entries(index, bytes, |i, raw| self.l1_entry(start, i, raw))?;
            }
            Kind::L2 { guest, carry, half } => {
                let guest = *guest;
                carry.entries(index, bytes, |i, raw| {
                    if !extended {
                        return self.l2_entry(start, guest, i, raw, None);
                    }
                    // Extended entries: the descriptor word, then the bitmap.
                    match half.take() {
                        None => {
                            *half = Some(raw);
                            Ok(())
                        }
                        Some(descriptor) => {
                            self.l2_entry(start, guest, i / 2, descriptor, Some(raw))
                        }
                    }
                })?;
                self.flush_run()?;
            }
            Kind::Compressed { .. } => unreachable!("compressed clusters are not fed"),
        }
        item.done = at + bytes.len() as u64;
        Ok(())
    }

    /// Handles L1 entry `index` of the table at `table`: queues its L2 table.
    fn l1_entry(&mut self, table: u64, index: u64, raw: u64) -> Result<(), Qcow2Error> {
        let guest = index * self.header.l2_coverage();
        let Some(host) = decode_l1(raw, &self.header).map_err(|d| {
            metadata(format!(
                "L1 entry {index} (guest offset {guest}, L1 table at host offset {table}): {d}"
            ))
        })?
        else {
            return Ok(());
        };
        let first_cluster = index * self.header.l2_entries();
        let entries = (self.header.guest_clusters() - first_cluster).min(self.header.l2_entries());
        self.schedule(Item::new(
            host,
            host + entries * self.header.l2_entry_size(),
            Kind::L2 {
                guest,
                carry: Carry::default(),
                half: None,
            },
        ))
    }

    /// Handles entry `index` of the L2 table at host offset `table` that maps
    /// guest offsets from `base`; `bitmap` is the subcluster bitmap of an
    /// extended entry.
    fn l2_entry(
        &mut self,
        table: u64,
        base: u64,
        index: u64,
        raw: u64,
        bitmap: Option<u64>,
    ) -> Result<(), Qcow2Error> {
        let cluster_size = self.header.cluster_size();
        let guest = base + index * cluster_size;
        let decoded = match bitmap {
            None => decode_l2(raw, &self.header),
            Some(bitmap) => decode_l2_extended(raw, bitmap, &self.header),
        };
        let mapping = decoded.map_err(|d| {
            metadata(format!(
                "L2 entry {index} (guest offset {guest}) of the L2 table at host offset {table}: {d}"
            ))
        })?;
        let size = self.header.virtual_size;
        match mapping {
            L2Mapping::Zero => {}
            L2Mapping::Data { host } => {
                self.mark_mapped(guest, cluster_size);
                self.data_clusters += 1;
                self.add_data(host, guest, cluster_size.min(size - guest))?;
            }
            L2Mapping::Subclusters { host, allocated } => {
                let sub = cluster_size / 32;
                self.data_clusters += 1;
                for i in (0..32u64).filter(|i| allocated & (1 << i) != 0) {
                    let at = guest + i * sub;
                    if at >= size {
                        break;
                    }
                    self.mark_mapped(at, sub);
                    self.add_data(host + i * sub, at, sub.min(size - at))?;
                }
            }
            L2Mapping::Compressed { host, end } => {
                self.mark_mapped(guest, cluster_size);
                self.compressed_clusters += 1;
                self.schedule(Item::new(host, end, Kind::Compressed { guest }))?;
            }
        }
        Ok(())
    }

    /// Records guest bytes `[guest, guest + len)` (whole granules) as data.
    fn mark_mapped(&mut self, guest: u64, len: u64) {
        let bits = self.header.granule_bits();
        let first = guest >> bits;
        for granule in first..first + (len >> bits).max(1) {
            self.mapped.insert(granule);
        }
    }

    /// Adds host bytes `[host, host + len)` holding guest bytes from `guest`
    /// to the data run being collected, or starts a new one.
    fn add_data(&mut self, host: u64, guest: u64, len: u64) -> Result<(), Qcow2Error> {
        match &mut self.open_run {
            Some(run) if run.host_end == host && run.guest + (host - run.host) == guest => {
                run.host_end += len;
            }
            _ => {
                self.flush_run()?;
                self.open_run = Some(OpenRun {
                    host,
                    host_end: host + len,
                    guest,
                });
            }
        }
        Ok(())
    }

    /// Queues the data run being collected, if any.
    fn flush_run(&mut self) -> Result<(), Qcow2Error> {
        match self.open_run.take() {
            Some(run) => self.schedule(Item::new(
                run.host,
                run.host_end,
                Kind::Data { guest: run.guest },
            )),
            None => Ok(()),
        }
    }

    /// Fails when one more held range would pass the limit.
    fn check_ranges(&self) -> Result<(), Qcow2Error> {
        let held = self.pending.len() + self.deferred.len() + 1;
        if held > self.max_ranges {
            return Err(Qcow2Error::TooManyRanges {
                held,
                limit: self.max_ranges,
            });
        }
        Ok(())
    }

    /// Queues a newly mapped range; what has left the window is deferred.
    fn schedule(&mut self, item: Item) -> Result<(), Qcow2Error> {
        self.check_ranges()?;
        if item.start < self.window_start {
            self.defer(item, self.window_start);
        } else {
            self.pending.push(item);
        }
        Ok(())
    }

    /// Defers `item`, whose next byte lies before `window_start`, to be read
    /// again. A data run keeps its part that is still ahead in the stream.
    fn defer(&mut self, mut item: Item, window_start: u64) {
        if let Kind::Data { guest } = item.kind {
            if item.end > window_start {
                let ahead = Item::new(
                    window_start,
                    item.end,
                    Kind::Data {
                        guest: guest + (window_start - item.start),
                    },
                );
                self.pending.push(ahead);
                item.end = window_start;
            }
        }
        self.deferred.push(item);
    }

    /// Decompresses the cluster for `guest` from host bytes `[start, end)`
    /// (cut at the end of the input) and hands it to the sink.
    fn decompress(
        &mut self,
        start: u64,
        end: u64,
        guest: u64,
        window: &Window,
    ) -> Result<(), Qcow2Error> {
        let to = end.min(window.end());
        if start < window.start() {
            self.defer(
                Item::new(start, end, Kind::Compressed { guest }),
                window.start(),
            );
            return Ok(());
        }
        if to <= start {
            return Err(Qcow2Error::Truncated {
                eof: window.end(),
                what: "a compressed cluster",
                guest_offset: guest,
                host_offset: start,
            });
        }
        let cluster_size = self.header.cluster_size();
        let need = cluster_size.min(self.header.virtual_size - guest) as usize;
        let decompressor = match &mut self.decompressor {
            Some(d) => d,
            empty => empty.insert(ClusterDecompressor::new(self.header.compression).map_err(
                |detail| Qcow2Error::Decompress {
                    guest_offset: guest,
                    host_offset: start,
                    compressed_len: to - start,
                    detail,
                },
            )?),
        };
        self.cluster.resize(cluster_size as usize, 0);
        let input = match window.contiguous(start, to) {
            Some(bytes) => bytes,
            None => {
                self.scratch.clear();
                for (_, piece) in window.pieces(start, to) {
                    self.scratch.extend_from_slice(piece);
                }
                &self.scratch[..]
            }
        };
        let corrupt = |detail: DecompressError| Qcow2Error::Decompress {
            guest_offset: guest,
            host_offset: start,
            compressed_len: to - start,
            detail,
        };
        let produced = decompressor
            .decompress(input, &mut self.cluster)
            .map_err(corrupt)?;
        let complete =
            produced == self.cluster.len() || (need < self.cluster.len() && produced >= need);
        if !complete {
            if to < end {
                return Err(Qcow2Error::Truncated {
                    eof: window.end(),
                    what: "a compressed cluster",
                    guest_offset: guest,
                    host_offset: start,
                });
            }
            return Err(corrupt(DecompressError::Short {
                produced,
                cluster_size,
            }));
        }
        self.sink
            .data(guest, &self.cluster[..need])
            .map_err(|source| Qcow2Error::Sink {
                op: "data",
                offset: guest,
                source,
            })
    }

    /// At the end of the input: handles compressed clusters whose last sector
    /// was cut off, and fails on anything else still missing.
    fn end_of_stream(&mut self, window: &Window) -> Result<(), Qcow2Error> {
        let eof = window.end();
        self.eof = eof;
        for item in std::mem::take(&mut self.pending).into_items() {
            match item.kind {
                Kind::Compressed { guest } if item.start < eof => {
                    self.decompress(item.start, item.end, guest, window)?;
                }
                _ => return Err(self.truncated(&item, eof)),
            }
        }
        Ok(())
    }

    /// Once everything is mapped and read: emits the zero ranges and the
    /// summary.
    fn finish(mut self) -> Result<Summary, Qcow2Error> {
        let zero_bytes = self.emit_zeros()?;
        Ok(Summary {
            virtual_size: self.header.virtual_size,
            cluster_size: self.header.cluster_size(),
            data_clusters: self.data_clusters,
            compressed_clusters: self.compressed_clusters,
            zero_bytes,
            input_bytes: self.eof,
            snapshots: self.header.snapshots,
            reread_bytes: self.reread_bytes,
            reread_rounds: self.reread_rounds,
        })
    }

    /// Emits every guest range without data as coalesced zero calls; returns
    /// their total length.
    fn emit_zeros(&mut self) -> Result<u64, Qcow2Error> {
        let bits = self.header.granule_bits();
        let size = self.header.virtual_size;
        let mut total = 0;
        let mut cursor = 0;
        let runs = std::mem::take(&mut self.mapped).into_runs();
        let gaps = runs
            .map(|(first, end)| (first << bits, (end << bits).min(size)))
            .chain(std::iter::once((size, size)));
        for (start, end) in gaps {
            if start > cursor {
                let len = start - cursor;
                self.sink
                    .zero(cursor, len)
                    .map_err(|source| Qcow2Error::Sink {
                        op: "zero",
                        offset: cursor,
                        source,
                    })?;
                total += len;
            }
            cursor = end;
        }
        Ok(total)
    }

    /// The error for a mapped range the input ended before.
    pub(super) fn truncated(&self, item: &Item, eof: u64) -> Qcow2Error {
        let host_offset = item.first_missing();
        Qcow2Error::Truncated {
            eof,
            what: item.kind.what(),
            guest_offset: self.guest_at(item, host_offset),
            host_offset,
        }
    }

    /// The guest offset that host offset `host` inside `item` maps (for
    /// tables: the first guest offset its entry maps).
    pub(super) fn guest_at(&self, item: &Item, host: u64) -> u64 {
        let delta = host - item.start;
        match item.kind {
            Kind::L1 { .. } => (delta / 8) * self.header.l2_coverage(),
            Kind::L2 { guest, .. } => {
                guest + (delta / self.header.l2_entry_size()) * self.header.cluster_size()
            }
            Kind::Data { guest } => guest + delta,
            Kind::Compressed { guest } => guest,
        }
    }
}

/// An [`Qcow2Error::InvalidMetadata`] with this detail.
fn metadata(detail: String) -> Qcow2Error {
    Qcow2Error::InvalidMetadata { detail }
}
