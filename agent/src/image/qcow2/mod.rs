//! qcow2 → raw conversion while streaming. Placeholder until the streaming
//! converter lands: every qcow2 image is refused with a clear error.
use std::io::Read;

/// Where guest bytes go.
pub trait Sink {
    /// The image's virtual size, before any data.
    fn begin(&mut self, virtual_size: u64) -> std::io::Result<()>;
    /// Guest bytes at `offset`.
    fn data(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()>;
    /// A guest range reading as zeros.
    fn zero(&mut self, offset: u64, len: u64) -> std::io::Result<()>;
}

/// Memory limits.
#[derive(Debug, Default)]
pub struct Limits {
    /// Bytes kept for data whose mapping comes later.
    pub lookahead_bytes: usize,
    /// Largest virtual size accepted.
    pub max_virtual_size: u64,
}

/// What a conversion found.
#[derive(Debug)]
pub struct Summary {
    /// Virtual disk size.
    pub virtual_size: u64,
    /// Cluster size.
    pub cluster_size: u64,
    /// Data clusters.
    pub data_clusters: u64,
    /// Compressed clusters.
    pub compressed_clusters: u64,
}

/// Conversion errors.
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    /// Reading the input failed.
    #[error("reading the image: {0}")]
    Read(std::io::Error),
    /// The sink failed.
    #[error("writing: {0}")]
    Sink(std::io::Error),
    /// Not implemented.
    #[error("qcow2 conversion is not available in this build")]
    Unsupported,
}

/// Converts (not available yet).
pub fn convert<R: Read, S: Sink>(
    _input: R,
    _sink: &mut S,
    _limits: &Limits,
) -> Result<Summary, Qcow2Error> {
    Err(Qcow2Error::Unsupported)
}

/// qcow2 magic.
pub fn is_qcow2(first: &[u8]) -> bool {
    first.starts_with(b"QFI\xfb")
}
