//! The bounds on what a registry may send and what an image may unpack
//! to ([`Limits`]), the per-image unpacking budget the layers share
//! ([`Budget`]), and the byte-counting writer that holds a blob to its
//! descriptor's size ([`Bounded`]). Every bound, when hit, fails the pull
//! with an error naming the bound and its value.
//!
//! The unpacked tree and the layer being unpacked both live on tmpfs, in
//! RAM: the unpacked bound is the smaller of a fixed cap and half of
//! `MemAvailable` when the pull starts, so that tree and blob together
//! stay within what the machine has free.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;

use agent_devices::burnin::memory::parse_mem_available;

const MIB: u64 = 1 << 20;

/// The bounds of one pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one manifest (an image manifest or an index). The
    /// distribution spec asks registries to accept at least 4 MiB.
    pub manifest_bytes: u64,
    /// Bytes of the image config.
    pub config_bytes: u64,
    /// Bytes of one layer blob (compressed, as fetched).
    pub blob_bytes: u64,
    /// Bytes of tar stream (file data and headers, decompressed) over all
    /// layers.
    pub unpacked_bytes: u64,
    /// Tar entries over all layers.
    pub entries: u64,
    /// The whole pull, from the first request to the last layer unpacked.
    pub pull_time: Duration,
    /// Bytes of one line of the container's output kept (log and error).
    pub line_bytes: usize,
}

/// The fixed cap on unpacked bytes (hundreds of MiB is usual for a vendor
/// tool image).
pub const UNPACKED_CAP: u64 = 4096 * MIB;
/// The fixed cap on one layer blob.
pub const BLOB_CAP: u64 = 2048 * MIB;

impl Default for Limits {
    /// The bounds with the fixed caps only (no memory reading).
    fn default() -> Self {
        Limits {
            manifest_bytes: 4 * MIB,
            config_bytes: 4 * MIB,
            blob_bytes: BLOB_CAP,
            unpacked_bytes: UNPACKED_CAP,
            entries: 500_000,
            pull_time: Duration::from_secs(20 * 60),
            line_bytes: 4096,
        }
    }
}

impl Limits {
    /// The bounds for this machine now: [`Limits::default`] with the
    /// unpacked and blob bounds lowered to half of `MemAvailable`.
    pub fn for_this_machine() -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self::with_mem_available(parse_mem_available(&meminfo))
    }

    /// [`Limits::default`] lowered to half of `available` bytes, if known.
    pub fn with_mem_available(available: Option<u64>) -> Self {
        let mut l = Limits::default();
        if let Some(a) = available {
            l.unpacked_bytes = l.unpacked_bytes.min(a / 2);
            l.blob_bytes = l.blob_bytes.min(l.unpacked_bytes);
        }
        l
    }
}

/// Which bound an unpacking hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breach {
    /// [`Limits::unpacked_bytes`].
    Bytes(u64),
    /// [`Limits::entries`].
    Entries(u64),
    /// The pull was stopped (aborted, or out of time).
    Stopped,
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::Bytes(max) => write!(
                f,
                "the image's layers unpack to more than {max} bytes (the unpacked-size limit)"
            ),
            Breach::Entries(max) => write!(
                f,
                "the image's layers hold more than {max} tar entries (the entry limit)"
            ),
            Breach::Stopped => write!(f, "the pull was stopped"),
        }
    }
}

/// What the layers of one image may still unpack to; shared by the layers
/// in turn (one unpacking at a time, on a blocking thread).
#[derive(Debug)]
pub struct Budget {
    max_bytes: u64,
    max_entries: u64,
    bytes: Cell<u64>,
    entries: Cell<u64>,
    stop: Arc<AtomicBool>,
    breach: Cell<Option<Breach>>,
}

impl Budget {
    /// A budget of `limits`, which stops as soon as `stop` is set.
    pub fn new(limits: &Limits, stop: Arc<AtomicBool>) -> Self {
        Budget {
            max_bytes: limits.unpacked_bytes,
            max_entries: limits.entries,
            bytes: Cell::new(0),
            entries: Cell::new(0),
            stop,
            breach: Cell::new(None),
        }
    }

    /// Bytes and entries used so far.
    pub fn used(&self) -> (u64, u64) {
        (self.bytes.get(), self.entries.get())
    }

    /// The bound hit, if any (the unpacking's own error is then a
    /// consequence).
    pub fn breach(&self) -> Option<Breach> {
        self.breach.get()
    }

    fn fail(&self, b: Breach) -> io::Error {
        self.breach.set(Some(b));
        io::Error::other(b.to_string())
    }

    /// Counts `n` more bytes of tar stream.
    pub fn take_bytes(&self, n: usize) -> io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(self.fail(Breach::Stopped));
        }
        let used = self.bytes.get().saturating_add(n as u64);
        self.bytes.set(used);
        if used > self.max_bytes {
            return Err(self.fail(Breach::Bytes(self.max_bytes)));
        }
        Ok(())
    }

    /// Counts one more tar entry.
    pub fn take_entry(&self) -> io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(self.fail(Breach::Stopped));
        }
        let used = self.entries.get() + 1;
        self.entries.set(used);
        if used > self.max_entries {
            return Err(self.fail(Breach::Entries(self.max_entries)));
        }
        Ok(())
    }
}

/// A reader whose bytes count against a [`Budget`].
#[derive(Debug)]
pub struct Counted<'a, R> {
    /// The reader counted.
    pub inner: R,
    /// The budget.
    pub budget: &'a Budget,
}

impl<R: io::Read> io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Checked before reading too, so a stop ends a stalled unpack.
        self.budget.take_bytes(0)?;
        let n = self.inner.read(buf)?;
        self.budget.take_bytes(n)?;
        Ok(n)
    }
}

/// A writer that takes at most `max` bytes (a blob's declared size) and
/// fails once `stop` is set; [`Bounded::exceeded`] then says so.
#[derive(Debug)]
pub struct Bounded<W> {
    inner: W,
    max: u64,
    written: u64,
    stop: Arc<AtomicBool>,
    exceeded: bool,
}

impl<W> Bounded<W> {
    /// `inner` limited to `max` bytes.
    pub fn new(inner: W, max: u64, stop: Arc<AtomicBool>) -> Self {
        Bounded {
            inner,
            max,
            written: 0,
            stop,
            exceeded: false,
        }
    }

    /// Bytes written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Whether more than `max` bytes came.
    pub fn exceeded(&self) -> bool {
        self.exceeded
    }

    /// The writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Bounded<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stop.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::Error::other("the pull was stopped")));
        }
        if self.written.saturating_add(buf.len() as u64) > self.max {
            self.exceeded = true;
            return Poll::Ready(Err(io::Error::other(format!(
                "more than the {} bytes expected",
                self.max
            ))));
        }
        let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.written += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn the_unpacked_bound_follows_available_memory() {
        let meminfo = "MemTotal:        2000000 kB\nMemAvailable:    1000000 kB\n";
        assert_eq!(parse_mem_available(meminfo), Some(1_024_000_000));
        let l = Limits::with_mem_available(parse_mem_available(meminfo));
        assert_eq!(l.unpacked_bytes, 512_000_000);
        assert_eq!(l.blob_bytes, 512_000_000);
        let big = Limits::with_mem_available(Some(64 << 30));
        assert_eq!(
            (big.unpacked_bytes, big.blob_bytes),
            (UNPACKED_CAP, BLOB_CAP)
        );
        assert_eq!(Limits::with_mem_available(None), Limits::default());
        assert_eq!(parse_mem_available("MemAvailable: x kB"), None);
        assert_eq!(parse_mem_available(""), None);
    }

    #[test]
    fn a_counted_reader_stops_at_the_byte_bound_and_on_stop() {
        let limits = Limits {
            unpacked_bytes: 10,
            ..Limits::default()
        };
        let stop = Arc::new(AtomicBool::new(false));
        let budget = Budget::new(&limits, stop.clone());
        let mut r = Counted {
            inner: &[7u8; 11][..],
            budget: &budget,
        };
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the image's layers unpack to more than 10 bytes (the unpacked-size limit)"
        );
        assert_eq!(budget.breach(), Some(Breach::Bytes(10)));

        let budget = Budget::new(&Limits::default(), stop.clone());
        stop.store(true, Ordering::SeqCst);
        let mut r = Counted {
            inner: &[7u8; 1][..],
            budget: &budget,
        };
        assert!(r.read(&mut [0; 4]).is_err());
        assert_eq!(budget.breach(), Some(Breach::Stopped));
    }

    #[test]
    fn entries_are_counted_to_their_bound() {
        let limits = Limits {
            entries: 2,
            ..Limits::default()
        };
        let budget = Budget::new(&limits, Arc::new(AtomicBool::new(false)));
        budget.take_entry().unwrap();
        budget.take_entry().unwrap();
        assert!(budget.take_entry().is_err());
        assert_eq!(budget.breach(), Some(Breach::Entries(2)));
    }

    #[tokio::test]
    async fn a_bounded_writer_takes_its_size_and_no_more() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = Bounded::new(Vec::new(), 4, stop.clone());
        w.write_all(b"1234").await.unwrap();
        assert!(!w.exceeded());
        assert!(w.write_all(b"5").await.is_err());
        assert!(w.exceeded());
        assert_eq!(w.written(), 4);
        assert_eq!(w.into_inner(), b"1234");

        let mut w = Bounded::new(Vec::new(), 100, stop.clone());
        stop.store(true, Ordering::SeqCst);
        let e = w.write_all(b"x").await.unwrap_err();
        assert_eq!(e.to_string(), "the pull was stopped");
        assert!(!w.exceeded());
    }
}
