//! The `Transfer-Encoding: chunked` body decoder of the image download
//! (`direct.rs`): a byte-at-a-time state machine that takes the bytes as
//! they were read from the connection, straight into a pool buffer, and
//! decodes them in place (the chunk data moved down over the framing), so
//! a chunked image costs no copy more than one with a `Content-Length`.
//!
//! Bounds: a chunk-size line (size and extensions) of at most
//! [`LINE_LIMIT`] bytes, a size of at most 16 hex digits, trailers of at
//! most [`TRAILER_LIMIT`] bytes in all. Anything else is an error, never a
//! panic: a garbled body ends the attempt and the download resumes with a
//! Range request.

/// Longest chunk-size line (size, extensions, CRLF) accepted.
pub(super) const LINE_LIMIT: usize = 4096;
/// Most trailer bytes accepted after the last chunk.
pub(super) const TRAILER_LIMIT: usize = 16 << 10;

/// Why a chunked body is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// A byte that has no place in a chunk-size line.
    #[error("chunked body: unexpected byte {0:#04x} in a chunk-size line")]
    BadSize(u8),
    /// A size with more than 16 hex digits.
    #[error("chunked body: chunk size too large")]
    SizeTooLarge,
    /// A chunk-size line longer than [`LINE_LIMIT`].
    #[error("chunked body: chunk-size line longer than {LINE_LIMIT} bytes")]
    LineTooLong,
    /// The chunk data is not followed by CRLF.
    #[error("chunked body: no CRLF after a chunk's data")]
    NoCrlf,
    /// More trailer bytes than [`TRAILER_LIMIT`].
    #[error("chunked body: trailers longer than {TRAILER_LIMIT} bytes")]
    TrailersTooLong,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size (`digits` read so far).
    Size {
        size: u64,
        digits: u8,
    },
    /// After the size: extensions (or whitespace) up to CR.
    Ext {
        size: u64,
    },
    /// The LF ending the size line.
    SizeLf {
        size: u64,
    },
    /// `left` bytes of chunk data to go.
    Data {
        left: u64,
    },
    /// The CR, then the LF, after a chunk's data.
    DataCr,
    DataLf,
    /// A trailer line (`at_start`: nothing of it read yet).
    Trailer {
        at_start: bool,
    },
    /// The LF of a trailer line, or of the final empty line.
    TrailerLf {
        last: bool,
    },
    /// The body ended; nothing more is read.
    Done,
}

/// A chunked body being decoded.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// Bytes of the current size line so far.
    line: usize,
    /// Trailer bytes so far.
    trailers: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            state: State::Size { size: 0, digits: 0 },
            line: 0,
            trailers: 0,
        }
    }
}

impl Decoder {
    /// Whether the last chunk and the trailers have been read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `buf` (bytes as received) in place: returns how many chunk
    /// data bytes are now at its start. Bytes after the end of the body are
    /// dropped.
    pub fn decode_in_place(&mut self, buf: &mut [u8]) -> Result<usize, ChunkError> {
        let mut read = 0;
        let mut written = 0;
        while read < buf.len() {
            if let State::Data { left } = self.state {
                let n = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(buf.len() - read);
                buf.copy_within(read..read + n, written);
                read += n;
                written += n;
                let left = left - n as u64;
                self.state = if left == 0 {
                    State::DataCr
                } else {
                    State::Data { left }
                };
                continue;
            }
            if self.state == State::Done {
                break;
            }
            let b = buf[read];
            read += 1;
            self.step(b)?;
        }
        Ok(written)
    }

    /// One framing byte.
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        if matches!(
            self.state,
            State::Size { .. } | State::Ext { .. } | State::SizeLf { .. }
        ) {
            self.line += 1;
            if self.line > LINE_LIMIT {
                return Err(ChunkError::LineTooLong);
            }
        }
        if matches!(self.state, State::Trailer { .. } | State::TrailerLf { .. }) {
            self.trailers += 1;
            if self.trailers > TRAILER_LIMIT {
                return Err(ChunkError::TrailersTooLong);
            }
        }
        self.state = match (self.state, b) {
            (State::Size { size, digits }, _) if b.is_ascii_hexdigit() => {
                if digits >= 16 {
                    return Err(ChunkError::SizeTooLarge);
                }
                let d = (b as char).to_digit(16).unwrap_or(0);
                State::Size {
                    size: size << 4 | u64::from(d),
                    digits: digits + 1,
                }
            }
            (State::Size { size, digits }, b';' | b' ' | b'\t') if digits > 0 => {
                State::Ext { size }
            }
            (State::Size { size, digits }, b'\r') if digits > 0 => State::SizeLf { size },
            (State::Size { .. }, _) => return Err(ChunkError::BadSize(b)),
            (State::Ext { size }, b'\r') => State::SizeLf { size },
            (State::Ext { size }, b'\n') => return self.size_line_end(size, b),
            (State::Ext { size }, _) => State::Ext { size },
            (State::SizeLf { size }, b'\n') => return self.size_line_end(size, b),
            (State::SizeLf { .. }, _) => return Err(ChunkError::BadSize(b)),
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => State::Size { size: 0, digits: 0 },
            (State::DataCr | State::DataLf, _) => return Err(ChunkError::NoCrlf),
            (State::Trailer { at_start: true }, b'\r') => State::TrailerLf { last: true },
            (State::Trailer { .. }, b'\r') => State::TrailerLf { last: false },
            (State::Trailer { .. }, _) => State::Trailer { at_start: false },
            (State::TrailerLf { last: true }, b'\n') => State::Done,
            (State::TrailerLf { last: false }, b'\n') => State::Trailer { at_start: true },
            (State::TrailerLf { .. }, _) => State::Trailer { at_start: false },
            (State::Data { .. } | State::Done, _) => self.state,
        };
        Ok(())
    }

    /// The LF of a size line: a chunk's data, or the trailers after the last.
    fn size_line_end(&mut self, size: u64, b: u8) -> Result<(), ChunkError> {
        if b != b'\n' {
            return Err(ChunkError::BadSize(b));
        }
        self.line = 0;
        self.state = if size == 0 {
            State::Trailer { at_start: true }
        } else {
            State::Data { left: size }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes.
    fn decode(input: &[u8], step: usize) -> Result<(Vec<u8>, bool), ChunkError> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            let mut buf = piece.to_vec();
            let n = d.decode_in_place(&mut buf)?;
            out.extend_from_slice(&buf[..n]);
        }
        Ok((out, d.done()))
    }

    #[test]
    fn chunks_are_joined_whatever_the_read_sizes() {
        let body = b"5\r\nhello\r\n7;name=val\r\n, world\r\n0\r\nX-Sum: 1\r\n\r\nleftover";
        for step in [1, 2, 3, 7, 64] {
            assert_eq!(
                decode(body, step).unwrap(),
                (b"hello, world".to_vec(), true),
                "{step}"
            );
        }
        let (data, done) = decode(b"A\r\n0123456789\r\n", 4).unwrap();
        assert_eq!((data.as_slice(), done), (&b"0123456789"[..], false));
    }

    #[test]
    fn garbage_and_oversized_framing_are_refused() {
        assert_eq!(decode(b"zz\r\n", 1), Err(ChunkError::BadSize(b'z')));
        assert_eq!(decode(b"\r\n", 1), Err(ChunkError::BadSize(b'\r')));
        assert_eq!(
            decode(b"11111111111111111\r\n", 5),
            Err(ChunkError::SizeTooLarge)
        );
        assert_eq!(decode(b"3\r\nabcX", 2), Err(ChunkError::NoCrlf));
        let long_ext = [b"1;".as_slice(), &[b'x'; LINE_LIMIT]].concat();
        assert_eq!(decode(&long_ext, 100), Err(ChunkError::LineTooLong));
        let long_trailer = [b"0\r\n".as_slice(), &[b'x'; TRAILER_LIMIT + 1]].concat();
        assert_eq!(decode(&long_trailer, 999), Err(ChunkError::TrailersTooLong));
        // The largest 16-digit size is taken (the body then just ends early).
        assert!(decode(b"ffffffffffffffff\r\nab", 3).is_ok());
    }
}
