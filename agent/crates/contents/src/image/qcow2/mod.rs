//! Streaming qcow2 → raw conversion: reads a qcow2 image sequentially (as
//! it arrives over HTTP) and hands the guest (raw disk) contents to a
//! [`Sink`], in bounded memory, for any valid layout.
//!
//! Supported: qcow2 versions 2 and 3, cluster sizes 512 B to 2 MiB,
//! uncompressed, deflate- and zstd-compressed clusters, zero-flag and
//! unallocated clusters, extended L2 entries (subclusters). Internal
//! snapshots are ignored (the active L1 table is what `qemu-img convert`
//! converts too) and refcounts are not needed. Refused with a clear
//! [`Qcow2Error`]: backing files, encryption, external data files (all three
//! would read outside the image), images marked corrupt, unknown
//! incompatible features, and metadata that points outside the sane part of
//! the file.
//!
//! The image is read once, front to back, and each host range that a table
//! maps is handled as soon as both its mapping and its bytes are known.
//! `qemu-img convert` mostly places tables before the data they map, but not
//! always: compressed images in particular hold clusters before the L2 table
//! that maps them, and any valid image may put its tables last. Bytes that
//! arrive before their mapping are kept for a while in a window of recently
//! read bytes ([`Limits::lookahead_bytes`]); ranges whose mapping turns up
//! only after they left the window are deferred and, once the stream has
//! ended, read again through [`Reread`] (HTTP Range requests, or a second
//! download where the source cannot do that). Every block read again must
//! match the BLAKE3 digest taken of it as it first streamed through
//! ([`digests`]), so the checksum of the first stream vouches for every byte
//! written. Blocks used up entirely before they left the window keep no
//! digest: only a second mapping of the same bytes (an invalid image) could
//! ask for them again, and that fails. Besides the window, memory grows
//! with the number of mapped host ranges still to come, the runs of
//! allocated guest clusters and one digest per 1 MiB block, never with the
//! image's data.

mod decompress;
mod digests;
mod error;
mod header;
mod pending;
mod reread;
mod runs;
mod source;
mod stream;
mod table;
mod window;

#[cfg(test)]
mod test_image;
#[cfg(test)]
mod test_layout;
#[cfg(test)]
mod tests;

use std::io;

pub(crate) use decompress::DecompressError;
#[cfg(test)]
pub(crate) use error::ErrorClass;
pub use error::Qcow2Error;
#[cfg(test)]
pub(crate) use source::NoReread;
pub use source::Reread;

/// Where guest bytes go. Offsets are guest (virtual disk) byte offsets.
pub trait Sink {
    /// Called once, after the header was validated, before any data.
    fn begin(&mut self, virtual_size: u64) -> io::Result<()>;
    /// Guest bytes at `offset`. Calls may come in any guest order (host-file
    /// order), never overlapping a previous data call.
    fn data(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Guest range that reads as zeros (unallocated clusters, zero-flag
    /// clusters). Emitted so that data+zero calls together cover
    /// `[0, virtual_size)` exactly once.
    ///
    /// Zero ranges are maximal (adjacent ones are coalesced) and are emitted
    /// after all data, once the whole image has been read.
    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()>;
}

impl<T: Sink + ?Sized> Sink for &mut T {
    fn begin(&mut self, virtual_size: u64) -> io::Result<()> {
        (**self).begin(virtual_size)
    }

    fn data(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        (**self).data(offset, bytes)
    }

    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()> {
        (**self).zero(offset, len)
    }
}

/// Bounds on what a conversion may use or accept.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How many already-read bytes are kept for table entries that point
    /// backwards (data stored shortly before the L2 table that maps it);
    /// what lies further back is read again. At least two clusters plus one
    /// 1 MiB read block are always kept.
    pub lookahead_bytes: usize,
    /// Largest accepted virtual disk size, in bytes.
    pub max_virtual_size: u64,
    /// Most mapped host ranges held at once (waiting for their bytes, or to
    /// be read again): what bounds the converter's bookkeeping before the
    /// checksum can vouch for the image. About 130 bytes each.
    pub max_ranges: usize,
}

impl Default for Limits {
    /// 16 MiB of lookahead, virtual disks up to 64 TiB, 256 Ki ranges
    /// (about 32 MiB of bookkeeping).
    fn default() -> Self {
        Limits {
            lookahead_bytes: 16 << 20,
            max_virtual_size: 64 << 40,
            max_ranges: 256 << 10,
        }
    }
}

/// What a successful conversion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Guest disk size in bytes.
    pub virtual_size: u64,
    /// Cluster size in bytes.
    pub cluster_size: u64,
    /// Uncompressed data clusters copied to the sink.
    pub data_clusters: u64,
    /// Compressed clusters decompressed to the sink.
    pub compressed_clusters: u64,
    /// Guest bytes reported to the sink as zeros.
    pub zero_bytes: u64,
    /// Bytes read from the input: all of it, up to its end.
    pub input_bytes: u64,
    /// Internal snapshots in the image, ignored.
    pub snapshots: u32,
    /// Host bytes read again (see [`Reread`]).
    pub reread_bytes: u64,
    /// Rounds of reading again.
    pub reread_rounds: u32,
}

/// Converts the qcow2 image read from `input` to raw guest contents in `sink`.
///
/// `input` is read sequentially in 1 MiB blocks to its very end (so a
/// checksum over the stream covers every byte), never seeking. Ranges that
/// streamed past before their mapping was known are then read through
/// `again`, checked against the digests of the first stream. Errors keep
/// their origin apart: [`Qcow2Error::Read`] and the re-read errors for the
/// source, [`Qcow2Error::Sink`] for the sink, the other variants for the image.
pub fn convert<R: io::Read, S: Sink>(
    input: R,
    again: &mut dyn Reread,
    sink: &mut S,
    limits: &Limits,
) -> Result<Summary, Qcow2Error> {
    stream::run(input, again, sink, limits, stream::BLOCK_SIZE)
}

/// Whether `first_bytes` starts with the qcow2 magic `"QFI\xfb"`.
pub(crate) fn is_qcow2(first_bytes: &[u8]) -> bool {
    header::has_magic(first_bytes)
}
