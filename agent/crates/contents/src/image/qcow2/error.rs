//! The error type of a qcow2 → raw conversion: every way it can fail, each
//! message naming the offsets and header fields involved.

use std::io;

/// Why a qcow2 → raw conversion failed.
///
/// The variants fall into three families, told apart by
/// [`Qcow2Error::class`]: the input failed ([`Qcow2Error::Read`],
/// [`Qcow2Error::Reread`], [`Qcow2Error::RereadMismatch`]),
/// the sink failed ([`Qcow2Error::Sink`]), or the image itself is bad,
/// unsupported or not convertible in one sequential pass (everything else).
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    /// Reading the qcow2 stream failed (for a download: the transfer broke).
    #[error("reading the qcow2 image failed at host offset {offset}: {source}")]
    Read {
        /// Host (file) offset at which the failed read started.
        offset: u64,
        /// The reader's error.
        source: io::Error,
    },
    /// The sink failed to take guest data (for a deploy: the disk write failed).
    #[error("writing the converted image failed ({op} at guest offset {offset}): {source}")]
    Sink {
        /// Which sink call failed: `begin`, `data` or `zero`.
        op: &'static str,
        /// Guest offset of the failed call (0 for `begin`).
        offset: u64,
        /// The sink's error.
        source: io::Error,
    },
    /// The input does not start with the qcow2 magic.
    #[error("not a qcow2 image: it starts with bytes {found:02x?}, expected the magic [51, 46, 49, fb] (\"QFI\\xfb\")")]
    BadMagic {
        /// The first (up to four) bytes of the input.
        found: Vec<u8>,
    },
    /// The input ended inside the header or its extensions.
    #[error("qcow2 header is truncated: the image ended after {len} bytes, but the header needs {needed}")]
    TruncatedHeader {
        /// Bytes the input had.
        len: u64,
        /// Bytes the header needs.
        needed: u64,
    },
    /// The header's version field is neither 2 nor 3.
    #[error("unsupported qcow2 version {version} (only versions 2 and 3 are supported)")]
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// The image is an overlay on a backing file; only standalone images convert.
    #[error("qcow2 image has a backing file (backing_file_offset {offset}, name length {len}); only standalone images can be converted, flatten it with `qemu-img convert` first")]
    BackingFile {
        /// The backing_file_offset header field.
        offset: u64,
        /// The backing_file_size header field.
        len: u32,
    },
    /// The image is encrypted.
    #[error("qcow2 image is encrypted (crypt_method {method}, {}); encrypted images are not supported", crypt_name(*method))]
    Encrypted {
        /// The crypt_method header field.
        method: u32,
    },
    /// The image is marked corrupt by QEMU (incompatible feature bit 1).
    #[error("qcow2 image is marked corrupt (incompatible feature bit 1); repair it with `qemu-img check -r all` first")]
    MarkedCorrupt,
    /// The image uses a feature this converter does not implement.
    #[error("qcow2 image uses an unsupported feature: {feature}")]
    Unsupported {
        /// What the feature is, with the header field or bit that announces it.
        feature: String,
    },
    /// A header field is out of range or inconsistent.
    #[error("invalid qcow2 header: {detail}")]
    InvalidHeader {
        /// Which field, its value, and what was expected.
        detail: String,
    },
    /// The virtual disk is larger than [`super::Limits::max_virtual_size`].
    #[error("qcow2 virtual size {virtual_size} bytes exceeds the limit of {limit} bytes")]
    VirtualSizeTooLarge {
        /// The size header field.
        virtual_size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// An L1 or L2 table entry is invalid (misaligned, reserved bits, points into the header).
    #[error("invalid qcow2 metadata: {detail}")]
    InvalidMetadata {
        /// Which table entry, its guest and host offsets, and what is wrong.
        detail: String,
    },
    /// A compressed cluster does not decompress to exactly one cluster.
    #[error("compressed cluster for guest offset {guest_offset} (host offset {host_offset}, {compressed_len} bytes) is corrupt: {detail}")]
    Decompress {
        /// Guest offset of the cluster.
        guest_offset: u64,
        /// Host offset of its compressed data.
        host_offset: u64,
        /// Compressed bytes available to the decompressor.
        compressed_len: u64,
        /// What the decompressor reported.
        detail: super::DecompressError,
    },
    /// The input ended before everything the tables map was seen.
    #[error("qcow2 image is truncated: it ended at host offset {eof}, but {what} for guest offset {guest_offset} maps to host offset {host_offset}")]
    Truncated {
        /// Where the input ended (its length).
        eof: u64,
        /// What was still missing: `the L1 table`, `an L2 table`, `data`, `a compressed cluster`.
        what: &'static str,
        /// Guest offset of the first missing guest byte.
        guest_offset: u64,
        /// Host offset of the first missing host byte.
        host_offset: u64,
    },
    /// More mapped host ranges wait at once than [`super::Limits::max_ranges`]
    /// allows: tables that map many clusters far from where they lie.
    #[error("qcow2 image is not streamable within the memory bound: {held} mapped host ranges would wait at once (limit {limit}; the tables map many clusters far ahead of or behind where the tables lie); convert it with qemu-img convert -O qcow2 to get an ordinary layout")]
    TooManyRanges {
        /// Ranges that would be held.
        held: usize,
        /// The limit.
        limit: usize,
    },
    /// Reading host bytes of the image again failed (for a download: the
    /// Range requests, or the fallback download, failed).
    #[error("reading host bytes {start}..{end} of the qcow2 image again failed (they hold {what} that streamed past before the table mapping them): {source}")]
    Reread {
        /// First host byte asked for.
        start: u64,
        /// End of the host bytes asked for.
        end: u64,
        /// What needed them.
        what: &'static str,
        /// The source's error.
        source: io::Error,
    },
    /// Bytes read again are not the bytes that streamed through the first time.
    #[error("the qcow2 image changed while it was read: host bytes {offset}..{} read again differ from the ones first downloaded and checksummed ({detail})", offset + len)]
    RereadMismatch {
        /// Host offset of the block that differs.
        offset: u64,
        /// Its length.
        len: u64,
        /// What differs.
        detail: String,
    },
}

/// Which party a [`Qcow2Error`] blames (the tests check each error's).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The input stream failed (download error).
    Input,
    /// The sink failed (disk write error).
    Output,
    /// The image is corrupt or unsupported.
    Image,
}

#[cfg(test)]
impl Qcow2Error {
    /// Which party this error blames: the reader, the sink, or the image.
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            Qcow2Error::Read { .. }
            | Qcow2Error::Reread { .. }
            | Qcow2Error::RereadMismatch { .. } => ErrorClass::Input,
            Qcow2Error::Sink { .. } => ErrorClass::Output,
            _ => ErrorClass::Image,
        }
    }
}

/// Human name of a crypt_method value.
fn crypt_name(method: u32) -> &'static str {
    match method {
        1 => "AES",
        2 => "LUKS",
        _ => "unknown method",
    }
}
