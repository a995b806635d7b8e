//! The conversion engine: walks the host file once, front to back, and hands
//! every host range that something maps (the L1 table, L2 tables, runs of
//! data clusters, compressed clusters) to its handler as soon as its bytes
//! have arrived, and emits the zero ranges at the end.

use std::io::Read;

use super::decompress::ClusterDecompressor;
use super::error::Qcow2Error;
use super::header::Header;
use super::pending::{Carry, Item, Kind, Pending};
use super::runs::ClusterRuns;
use super::table::{decode_l1, decode_l2, L2Mapping};
use super::window::Window;
use super::{Limits, Sink, Summary};

/// Size of one read from the input.
pub(crate) const BLOCK_SIZE: usize = 1 << 20;
/// Bytes read before the header is parsed: the largest cluster, which holds
/// the header and its extensions.
const HEADER_READ: u64 = 2 << 20;

/// Converts like [`super::convert`], reading the input in `block_size` blocks.
pub(crate) fn run<R: Read, S: Sink + ?Sized>(
    mut input: R,
    sink: &mut S,
    limits: &Limits,
    block_size: usize,
) -> Result<Summary, Qcow2Error> {
    let mut window = Window::new(block_size, u64::MAX);
    while window.end() < HEADER_READ && !window.at_eof() {
        read(&mut window, &mut input)?;
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

    let mut engine = Engine::new(header, sink, window.keep());
    engine.schedule_l1(&window)?;
    loop {
        engine.process(&window)?;
        if window.at_eof() {
            break;
        }
        window.evict();
        read(&mut window, &mut input)?;
    }
    engine.finish(&window)
}

/// Reads the next block, blaming the reader for errors.
fn read<R: Read>(window: &mut Window, input: &mut R) -> Result<usize, Qcow2Error> {
    window.read_block(input).map_err(|source| Qcow2Error::Read {
        offset: window.end(),
        source,
    })
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
struct Engine<'a, S: ?Sized> {
    /// The validated header.
    header: Header,
    /// Where guest bytes go.
    sink: &'a mut S,
    /// Mapped host ranges waiting for their bytes: the host → guest map.
    pending: Pending,
    /// Guest clusters that hold data; the rest reads as zeros.
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
    /// Bytes the window keeps behind the position.
    keep: u64,
    /// Uncompressed data clusters mapped.
    data_clusters: u64,
    /// Compressed clusters mapped.
    compressed_clusters: u64,
}

impl<'a, S: Sink + ?Sized> Engine<'a, S> {
    /// A fresh engine for `header`.
    fn new(header: Header, sink: &'a mut S, keep: u64) -> Self {
        Engine {
            header,
            sink,
            pending: Pending::default(),
            mapped: ClusterRuns::default(),
            open_run: None,
            decompressor: None,
            cluster: Vec::new(),
            scratch: Vec::new(),
            window_start: 0,
            position: 0,
            keep,
            data_clusters: 0,
            compressed_clusters: 0,
        }
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
    fn process(&mut self, window: &Window) -> Result<(), Qcow2Error> {
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
            return Err(self.not_streamable(&item));
        }
        let to = item.end.min(window.end());
        for (at, bytes) in window.pieces(item.done, to) {
            self.feed(&mut item, at, bytes)?;
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
            Kind::L2 { guest, carry } => {
                let guest = *guest;
                carry.entries(index, bytes, |i, raw| self.l2_entry(start, guest, i, raw))?;
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
            host + entries * 8,
            Kind::L2 {
                guest,
                carry: Carry::default(),
            },
        ))
    }

    /// Handles entry `index` of the L2 table at host offset `table` that maps
    /// guest offsets from `base`.
    fn l2_entry(&mut self, table: u64, base: u64, index: u64, raw: u64) -> Result<(), Qcow2Error> {
        let cluster_size = self.header.cluster_size();
        let guest = base + index * cluster_size;
        let mapping = decode_l2(raw, &self.header).map_err(|d| {
            metadata(format!(
                "L2 entry {index} (guest offset {guest}) of the L2 table at host offset {table}: {d}"
            ))
        })?;
        match mapping {
            L2Mapping::Zero => {}
            L2Mapping::Data { host } => {
                self.mapped.insert(guest >> self.header.cluster_bits);
                self.data_clusters += 1;
                let len = cluster_size.min(self.header.virtual_size - guest);
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
            }
            L2Mapping::Compressed { host, end } => {
                self.mapped.insert(guest >> self.header.cluster_bits);
                self.compressed_clusters += 1;
                self.schedule(Item::new(host, end, Kind::Compressed { guest }))?;
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

    /// Queues a newly mapped range, unless its start has left the window.
    fn schedule(&mut self, item: Item) -> Result<(), Qcow2Error> {
        if item.start < self.window_start {
            return Err(self.not_streamable(&item));
        }
        self.pending.push(item);
        Ok(())
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
            return Err(self.not_streamable(&Item::new(start, end, Kind::Compressed { guest })));
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
        let corrupt = |detail: String| Qcow2Error::Decompress {
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
            return Err(corrupt(format!(
                "it decompressed to {produced} bytes, expected the cluster size {cluster_size}"
            )));
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
    /// was cut off, fails on anything else still missing, then emits the
    /// zero ranges and the summary.
    fn finish(mut self, window: &Window) -> Result<Summary, Qcow2Error> {
        let eof = window.end();
        for item in std::mem::take(&mut self.pending).into_items() {
            match item.kind {
                Kind::Compressed { guest } if item.start < eof => {
                    self.decompress(item.start, item.end, guest, window)?;
                }
                _ => return Err(self.truncated(&item, eof)),
            }
        }
        let zero_bytes = self.emit_zeros()?;
        Ok(Summary {
            virtual_size: self.header.virtual_size,
            cluster_size: self.header.cluster_size(),
            data_clusters: self.data_clusters,
            compressed_clusters: self.compressed_clusters,
            zero_bytes,
            input_bytes: eof,
        })
    }

    /// Emits every guest range without data as coalesced zero calls; returns
    /// their total length.
    fn emit_zeros(&mut self) -> Result<u64, Qcow2Error> {
        let bits = self.header.cluster_bits;
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

    /// The error for a mapped range that begins before the window.
    fn not_streamable(&self, item: &Item) -> Qcow2Error {
        Qcow2Error::NotStreamable {
            what: item.kind.what(),
            guest_offset: self.guest_at(item, item.start),
            host_offset: item.start,
            position: self.position,
            window_start: self.window_start,
            lookahead: self.keep,
        }
    }

    /// The error for a mapped range the input ended before.
    fn truncated(&self, item: &Item, eof: u64) -> Qcow2Error {
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
    fn guest_at(&self, item: &Item, host: u64) -> u64 {
        let delta = host - item.start;
        match item.kind {
            Kind::L1 { .. } => (delta / 8) * self.header.l2_coverage(),
            Kind::L2 { guest, .. } => guest + (delta / 8) * self.header.cluster_size(),
            Kind::Data { guest } => guest + delta,
            Kind::Compressed { guest } => guest,
        }
    }
}

/// An [`Qcow2Error::InvalidMetadata`] with this detail.
fn metadata(detail: String) -> Qcow2Error {
    Qcow2Error::InvalidMetadata { detail }
}
