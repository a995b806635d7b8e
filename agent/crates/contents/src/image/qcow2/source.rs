//! The converter's seam to its input for a second look: a source that can
//! deliver host byte ranges of the image again ([`Reread`]), or one that
//! cannot ([`NoReread`]). The rounds that use it are in [`super::reread`].

use std::io;
use std::ops::Range;

/// A source that can deliver host byte ranges of the image again.
pub trait Reread {
    /// Delivers the host bytes of each of `runs` (ascending, disjoint) in
    /// order, in pieces of any size, to `deliver(host offset, bytes)`, which
    /// returns false to stop early (the caller then has its own error).
    fn reread(
        &mut self,
        runs: &[Range<u64>],
        deliver: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()>;
}

/// For sources that cannot be read again: every re-read fails with `why`.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct NoReread(pub &'static str);

#[cfg(test)]
impl Reread for NoReread {
    fn reread(
        &mut self,
        _: &[Range<u64>],
        _: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, self.0))
    }
}
