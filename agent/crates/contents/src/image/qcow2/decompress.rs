//! Decompression of single compressed clusters (raw deflate or zstd), with a
//! context that is created once and reset per cluster.

use flate2::{Decompress, FlushDecompress, Status};
use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

use super::header::Compression;

/// Why a compressed cluster could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    /// The zstd context could not be made.
    #[error("cannot create a zstd decoder: {0}")]
    ZstdCreate(std::io::Error),
    /// The zstd context could not be reset.
    #[error("cannot reset the zstd decoder: {0}")]
    ZstdReset(std::io::Error),
    /// The deflate stream is corrupt.
    #[error("invalid deflate data: {0}")]
    Deflate(flate2::DecompressError),
    /// The zstd stream is corrupt.
    #[error("invalid zstd data: {0}")]
    Zstd(std::io::Error),
    /// The stream ended before the cluster was full.
    #[error("it decompressed to {produced} bytes, expected the cluster size {cluster_size}")]
    Short {
        /// Bytes produced.
        produced: usize,
        /// The cluster size.
        cluster_size: u64,
    },
}

/// A reusable decompressor for one image's compression type.
pub(crate) enum ClusterDecompressor {
    /// Raw deflate, as QEMU's "zlib" compression type writes it.
    Deflate(Decompress),
    /// zstd; the stream API tolerates the garbage after the frame that the
    /// sector-rounded compressed range usually contains.
    Zstd(Box<Decoder<'static>>),
}

impl ClusterDecompressor {
    /// A decompressor for `compression`.
    pub(super) fn new(compression: Compression) -> Result<ClusterDecompressor, DecompressError> {
        Ok(match compression {
            Compression::Deflate => ClusterDecompressor::Deflate(Decompress::new(false)),
            Compression::Zstd => ClusterDecompressor::Zstd(Box::new(
                Decoder::new().map_err(DecompressError::ZstdCreate)?,
            )),
        })
    }

    /// Decompresses `input` into `out` until `out` is full or the compressed
    /// stream ends, and returns the number of bytes produced. Input after the
    /// end of the compressed stream is ignored.
    pub(super) fn decompress(
        &mut self,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<usize, DecompressError> {
        match self {
            ClusterDecompressor::Deflate(d) => inflate(d, input, out),
            ClusterDecompressor::Zstd(d) => unzstd(d, input, out),
        }
    }
}

/// Raw-deflate `input` into `out`.
fn inflate(d: &mut Decompress, input: &[u8], out: &mut [u8]) -> Result<usize, DecompressError> {
    d.reset(false);
    loop {
        let (in_pos, out_pos) = (d.total_in() as usize, d.total_out() as usize);
        let status = d
            .decompress(
                &input[in_pos..],
                &mut out[out_pos..],
                FlushDecompress::Finish,
            )
            .map_err(DecompressError::Deflate)?;
        let produced = d.total_out() as usize;
        if produced == out.len() || status == Status::StreamEnd {
            return Ok(produced);
        }
        if d.total_in() as usize == in_pos && produced == out_pos {
            // No progress: the input ran out before the stream ended.
            return Ok(produced);
        }
    }
}

/// zstd-decompress `input` into `out`.
fn unzstd(
    d: &mut Decoder<'static>,
    input: &[u8],
    out: &mut [u8],
) -> Result<usize, DecompressError> {
    d.reinit().map_err(DecompressError::ZstdReset)?;
    let capacity = out.len();
    let mut src = InBuffer::around(input);
    let mut dst = OutBuffer::around(out);
    loop {
        let before = (src.pos(), dst.pos());
        let hint = d.run(&mut src, &mut dst).map_err(DecompressError::Zstd)?;
        if dst.pos() == capacity || hint == 0 || (src.pos(), dst.pos()) == before {
            return Ok(dst.pos());
        }
    }
}

#[cfg(test)]
mod tests {
    //! Both decompressors against trailing garbage and cut input.

    use super::*;

    #[test]
    fn deflate_ignores_trailing_garbage_and_reports_short_output() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let mut packed = vec![0; 8192];
        c.compress(&data, &mut packed, flate2::FlushCompress::Finish)
            .unwrap();
        packed.truncate(c.total_out() as usize);
        packed.extend_from_slice(&[0xff; 300]);

        let mut d = ClusterDecompressor::new(Compression::Deflate).unwrap();
        let mut out = vec![0; 4096];
        assert_eq!(d.decompress(&packed, &mut out).unwrap(), 4096);
        assert_eq!(out, data);
        // Reused context, larger output buffer: the stream ends short.
        let mut big = vec![0; 8192];
        assert_eq!(d.decompress(&packed, &mut big).unwrap(), 4096);
        // Cut input: fewer bytes, no error.
        let n = d.decompress(&packed[..packed.len() / 4], &mut out).unwrap();
        assert!(n < 4096, "cut input produced {n} bytes");
    }

    #[test]
    fn zstd_ignores_trailing_garbage() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 13) as u8).collect();
        let mut packed = zstd::bulk::compress(&data, 3).unwrap();
        packed.extend_from_slice(&[0xab; 300]);
        let mut d = ClusterDecompressor::new(Compression::Zstd).unwrap();
        for _ in 0..2 {
            let mut out = vec![0; 4096];
            assert_eq!(d.decompress(&packed, &mut out).unwrap(), 4096);
            assert_eq!(out, data);
        }
        let mut out = vec![0; 4096];
        assert!(d.decompress(&[0xff; 64], &mut out).is_err());
    }
}
