//! Memory for the image pipeline: page-aligned buffers (O_DIRECT needs the
//! buffer address, the file offset and the length aligned) drawn from fixed
//! pools. A pool hands out a fixed number of buffers and blocks until one
//! comes back, so the pipeline's memory is bounded by construction whatever
//! the image size: a stage that runs ahead simply waits for a free buffer.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex};

/// Alignment of every buffer: enough for 4 KiB logical sectors.
pub const ALIGN: usize = 4096;

/// A heap buffer whose usable part starts on an [`ALIGN`] boundary.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    cap: usize,
    len: usize,
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} of {} bytes)", self.len, self.cap)
    }
}

impl AlignedBuf {
    /// A zero-filled buffer of capacity `cap` (a multiple of [`ALIGN`]).
    pub fn new(cap: usize) -> Self {
        assert!(
            cap % ALIGN == 0,
            "buffer capacity must be a multiple of {ALIGN}"
        );
        let raw = vec![0u8; cap + ALIGN];
        let misalign = raw.as_ptr() as usize % ALIGN;
        let start = if misalign == 0 { 0 } else { ALIGN - misalign };
        Self {
            raw,
            start,
            cap,
            len: 0,
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no byte is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the bytes in use (≤ capacity).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap);
        self.len = len;
    }

    /// The whole capacity, for filling.
    pub fn spare(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.cap]
    }

    /// Appends as much of `data` as fits; returns how much was taken.
    pub fn fill_from(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - self.len);
        let at = self.start + self.len;
        self.raw[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    /// True when the buffer is full.
    pub fn is_full(&self) -> bool {
        self.len == self.cap
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

#[derive(Debug)]
struct PoolInner {
    free: Mutex<Vec<AlignedBuf>>,
    returned: Condvar,
}

/// A fixed set of equally sized buffers.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
    buf_size: usize,
    count: usize,
}

impl Pool {
    /// `count` buffers of `buf_size` bytes, allocated up front.
    pub fn new(count: usize, buf_size: usize) -> Self {
        let free = (0..count).map(|_| AlignedBuf::new(buf_size)).collect();
        Self {
            inner: Arc::new(PoolInner {
                free: Mutex::new(free),
                returned: Condvar::new(),
            }),
            buf_size,
            count,
        }
    }

    /// How many buffers the pool has in all.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Size of each buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// How many buffers are free now (a sample: the stages holding the
    /// others may give them back at once).
    pub fn available(&self) -> usize {
        self.inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Waits for a free buffer; it comes back empty (`len() == 0`).
    pub fn take(&self) -> PooledBuf {
        let mut free = self.inner.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(mut buf) = free.pop() {
                buf.set_len(0);
                return PooledBuf {
                    buf: Some(buf),
                    pool: self.inner.clone(),
                };
            }
            free = self
                .inner
                .returned
                .wait(free)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A buffer on loan from a [`Pool`]; dropping it gives it back.
pub struct PooledBuf {
    buf: Option<AlignedBuf>,
    pool: Arc<PoolInner>,
}

impl fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.buf.fmt(f)
    }
}

impl Deref for PooledBuf {
    type Target = AlignedBuf;
    fn deref(&self) -> &AlignedBuf {
        self.buf.as_ref().expect("buffer present until drop")
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut AlignedBuf {
        self.buf.as_mut().expect("buffer present until drop")
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
            free.push(buf);
            self.pool.returned.notify_one();
        }
    }
}

/// A filled pool buffer shared between pipeline stages (hasher, decoder,
/// writer); the buffer returns to its pool when the last stage drops it.
pub type Block = Arc<PooledBuf>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_fill_up_to_capacity() {
        let mut b = AlignedBuf::new(2 * ALIGN);
        assert_eq!(b.spare().as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.fill_from(&[1u8; 5000]), 5000);
        assert_eq!(b.fill_from(&[2u8; 5000]), 2 * ALIGN - 5000);
        assert!(b.is_full());
        assert_eq!(b[4999], 1);
        assert_eq!(b[5000], 2);
    }

    #[test]
    fn pool_blocks_until_a_buffer_is_returned() {
        let pool = Pool::new(1, ALIGN);
        let first = pool.take();
        let p2 = pool.clone();
        let waiter = std::thread::spawn(move || p2.take().capacity());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !waiter.is_finished(),
            "second take must wait while the only buffer is out"
        );
        drop(first);
        assert_eq!(waiter.join().unwrap(), ALIGN);
    }
}
