//! One image over several connections at once, for long or lossy links
//! where a single TCP stream stays far below the link's speed
//! (agent/docs/image-writing.md, "Several connections").
//!
//! The download starts as one stream, as always. Its [`Meter`] watches it
//! tick by tick ([`TICK`]): when the first reply said the server takes
//! ranges for an image of at least [`MIN_TOTAL`] bytes, and over a tick
//! the stages after the download kept most of the pool's buffers free (the
//! network, not the hash or the disk, held the stream back), the stream is
//! cut at the buffer just handed on. The rest comes as segments of
//! [`SEGMENT`] bytes, each a Range request on a worker's kept-alive
//! connection, resumed on its own after a drop or a stall (`retry.rs`),
//! and handed on in order. Segments that arrive before their turn wait in
//! a bounded window: a pool of its own (so the next segment never waits
//! for a buffer that later ones hold), in which a worker whose segment is
//! not the next pauses once [`AHEAD_BLOCKS`] buffers are queued. Two
//! connections start; one more is added while the rate still grows, up to
//! [`HttpOptions::connections`] (at most [`MAX_CONNECTIONS`]). Every
//! reply after the first must honour its range and agree on the image's
//! size, else the download fails naming the URL and the byte.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::emitter::Emitter;
use super::options::HttpOptions;
use super::outcome::FetchEnd;
use super::retry;
use super::state::{HttpState, Probe, Redirected};
use crate::image::buffers::{Block, Pool};
use crate::image::progress::Progress;
use crate::image::ImageError;

/// Bytes per segment: small enough that every connection has one in the
/// window at once ([`AHEAD_BLOCKS`] × 512 KiB = 8 × 2 MiB), large enough
/// that a request per segment on a kept-alive connection costs little.
pub(super) const SEGMENT: u64 = 2 << 20;
/// The smallest image fetched in segments.
pub(super) const MIN_TOTAL: u64 = 64 << 20;
/// Left to fetch, at least, for a cut to be worth it.
const MIN_LEFT: u64 = 32 << 20;
/// The most connections, whatever the configuration says: the window below
/// is sized for them.
pub(super) const MAX_CONNECTIONS: usize = 8;
/// The window's buffers: 48 of 512 KiB (24 MiB; the agent's whole budget is
/// 64 MiB).
const WINDOW: (usize, usize) = (48, 512 << 10);
/// Buffers queued beyond the next segment before their workers pause. The
/// rest of the window (16) is enough for the full buffers the paused
/// workers hold ([`MAX_CONNECTIONS`] - 1), the head's and those the later
/// stages still hold: the head segment always gets a buffer in the end.
const AHEAD_BLOCKS: usize = 32;
/// Connections at the start of the segmented part.
const FIRST_CONNECTIONS: usize = 2;
/// How often the rate is measured to decide on a cut or one more
/// connection.
const TICK: Duration = Duration::from_secs(2);

/// Reads the image at `urls` (http or https) like [`super::fetch`], over
/// up to `opts.connections` connections when the server, the image and
/// the link call for it. Returns the number of bytes read.
pub(super) fn fetch(
    urls: &[String],
    opts: &HttpOptions,
    pool: &Pool,
    progress: &Progress,
    emit: &mut dyn FnMut(Block) -> bool,
) -> Result<u64, FetchEnd> {
    let tls = opts.check()?;
    let splittable = Arc::new(AtomicBool::new(false));
    let mut state = HttpState {
        probe: Some(Probe {
            min_total: MIN_TOTAL,
            splittable: Arc::clone(&splittable),
        }),
        ..HttpState::default()
    };
    let mut meter = Meter::default();
    let (result, start) = {
        let mut watched = |b: Block| {
            if !emit(b) {
                return false;
            }
            // Asked only when a tick is due.
            let may = || {
                let seen = progress.snapshot();
                let left = seen
                    .download_total
                    .map(|t| t.saturating_sub(seen.downloaded));
                splittable.load(Ordering::Relaxed) && left.is_some_and(|l| l >= MIN_LEFT)
            };
            !meter.cut_now(Instant::now(), pool, may)
        };
        let mut first = Emitter {
            pool,
            progress,
            emit: &mut watched,
            cur: None,
            offset: 0,
            limit: u64::MAX,
        };
        let r = retry::fetch_http(urls, opts, &tls, &mut state, &mut first)
            .and_then(|()| first.flush());
        (r, first.offset)
    };
    let rate = match (result, meter.cut) {
        (Ok(()), _) => return Ok(start),
        (Err(FetchEnd::Stopped), Some(rate)) => rate,
        (Err(e), _) => return Err(e),
    };
    // A reply that let the stream be cut gave its length.
    let Some(total) = state.total else {
        return Err(FetchEnd::Failed(ImageError::Download {
            url: urls[0].clone(),
            attempts: 1,
            offset: start,
            reason: "the image's size was lost before its segments".into(),
        }));
    };
    let job = Job {
        urls,
        opts,
        tls: &tls,
        progress,
        window: Pool::new(WINDOW.0, WINDOW.1),
        start,
        total,
        segments: total.saturating_sub(start).div_ceil(SEGMENT),
        etag: state.etag,
        redirected: state.redirected,
        started: state.started,
        shared: Shared::default(),
    };
    tracing::info!(
        url = %urls[0], at = start, total, most = opts.connections,
        rate = format!("{:.1} MB/s", rate / 1e6),
        "the network holds the download back and the server takes ranges: going on in {} MiB segments over several connections",
        SEGMENT >> 20
    );
    job.run(emit, rate)?;
    Ok(total)
}

/// Watches the first stream, tick by tick, for whether to cut it.
#[derive(Debug, Default)]
struct Meter {
    /// When the current tick began (the first block's time).
    since: Option<Instant>,
    /// Blocks handed on in this tick, and the pool's free buffers summed
    /// over them (sampled right after each).
    blocks: u64,
    free: u64,
    /// The stream's rate over the tick that cut it.
    cut: Option<f64>,
}

impl Meter {
    /// After a block was handed on: whether to cut the stream now. `may()`
    /// (asked once a tick is due) says whether the server, the image and
    /// what is left allow it. Cut
    /// after a tick over which, on average, more than half of the pool's
    /// buffers were free: the stages after the download kept up, so the
    /// network held the stream back.
    fn cut_now(&mut self, now: Instant, pool: &Pool, may: impl FnOnce() -> bool) -> bool {
        let since = *self.since.get_or_insert(now);
        self.blocks += 1;
        self.free += pool.available() as u64;
        let dt = now.saturating_duration_since(since);
        if dt < TICK {
            return false;
        }
        let network_bound = 2 * self.free > self.blocks * pool.count() as u64;
        let rate = (self.blocks * pool.buf_size() as u64) as f64 / dt.as_secs_f64();
        *self = Self {
            since: Some(now),
            ..Self::default()
        };
        if network_bound && may() {
            self.cut = Some(rate);
            return true;
        }
        false
    }
}

/// What the workers and the hand-on share.
struct Job<'a> {
    urls: &'a [String],
    opts: &'a HttpOptions,
    tls: &'a Arc<rustls::ClientConfig>,
    progress: &'a Progress,
    window: Pool,
    /// Where the first stream was cut: the segments start here.
    start: u64,
    total: u64,
    /// Segments from `start` to the end.
    segments: u64,
    etag: Option<String>,
    redirected: Option<Redirected>,
    /// When the first request went out (the total time limit's start).
    started: Option<Instant>,
    shared: Shared,
}

/// The window: the segments claimed and not yet handed on.
#[derive(Default)]
struct Window {
    /// The segment handed on now.
    head: u64,
    /// The next segment a worker takes.
    next: u64,
    queues: BTreeMap<u64, Queue>,
    /// Buffers in all queues.
    queued: usize,
    failed: Option<FetchEnd>,
    /// The download ended (done, failed, or the pipeline stopped).
    stop: bool,
}

#[derive(Default)]
struct Queue {
    blocks: VecDeque<Block>,
    done: bool,
}

#[derive(Default)]
struct Shared {
    window: Mutex<Window>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a block of segment `k`, waiting while the window is full and
    /// `k` is not the head; false once the download ended.
    fn push(&self, k: u64, block: Block) -> bool {
        let mut w = self.lock();
        while !w.stop && k != w.head && w.queued >= AHEAD_BLOCKS {
            w = self.changed.wait(w).unwrap_or_else(|e| e.into_inner());
        }
        if w.stop {
            return false;
        }
        w.queues.entry(k).or_default().blocks.push_back(block);
        w.queued += 1;
        self.changed.notify_all();
        true
    }

    fn finish(&self, k: u64, result: Result<(), FetchEnd>) {
        match result {
            Ok(()) => {
                self.lock().queues.entry(k).or_default().done = true;
                self.changed.notify_all();
            }
            Err(FetchEnd::Stopped) => {}
            Err(e) => self.fail(e),
        }
    }

    /// Ends the download with `e` (the first failure wins).
    fn fail(&self, e: FetchEnd) {
        let mut w = self.lock();
        w.failed.get_or_insert(e);
        w.stop = true;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}

impl Job<'_> {
    /// Bytes `[start, end)` of segment `k`.
    fn span(&self, k: u64) -> std::ops::Range<u64> {
        let at = self.start + k * SEGMENT;
        at..(at + SEGMENT).min(self.total)
    }

    /// The workers and the hand-on, until every segment is handed on or
    /// one fails; `rate` is the first stream's, which two connections must
    /// beat for a third.
    fn run(&self, emit: &mut dyn FnMut(Block) -> bool, rate: f64) -> Result<(), FetchEnd> {
        let cap = self.opts.connections.clamp(1, MAX_CONNECTIONS);
        let result = std::thread::scope(|s| {
            // A thread that cannot start is a connection fewer.
            let spawn = |n: usize| {
                std::thread::Builder::new()
                    .name(format!("image-fetch-{n}"))
                    .spawn_scoped(s, || self.worker())
                    .inspect_err(|e| tracing::warn!("starting download connection {n}: {e}"))
                    .is_ok()
            };
            let first = FIRST_CONNECTIONS.min(cap);
            if (0..first).filter(|n| spawn(*n)).count() == 0 {
                return Err(FetchEnd::Failed(ImageError::Download {
                    url: self.urls[0].clone(),
                    attempts: 0,
                    offset: self.start,
                    reason: "no download thread could start".into(),
                }));
            }
            let mut growth = Growth::new(first, cap, Instant::now(), self.downloaded());
            growth.rate = rate;
            let r = self.hand_on(emit, |this: &Self| {
                let more = || this.shared.lock().next < this.segments;
                if growth.tick(Instant::now(), || this.downloaded()) && more() {
                    tracing::debug!(
                        connections = growth.connections,
                        "one more download connection"
                    );
                    spawn(growth.connections - 1);
                }
            });
            self.shared.stop();
            r
        });
        tracing::info!(
            url = %self.urls[0],
            "segmented download ended: {}",
            if result.is_ok() { "every segment handed on" } else { "failed" }
        );
        result
    }

    fn downloaded(&self) -> u64 {
        self.progress.snapshot().downloaded
    }

    /// Hands the head segment's blocks on in order; `tick`, called after
    /// each block and each wait, may add a connection.
    fn hand_on(
        &self,
        emit: &mut dyn FnMut(Block) -> bool,
        mut tick: impl FnMut(&Self),
    ) -> Result<(), FetchEnd> {
        let shared = &self.shared;
        let mut w = shared.lock();
        loop {
            if let Some(e) = w.failed.take() {
                return Err(e);
            }
            if w.head >= self.segments {
                return Ok(());
            }
            let head = w.head;
            let block = match w.queues.get_mut(&head) {
                Some(q) if !q.blocks.is_empty() => q.blocks.pop_front(),
                Some(q) if q.done => {
                    w.queues.remove(&head);
                    w.head += 1;
                    shared.changed.notify_all();
                    continue;
                }
                _ => None,
            };
            if let Some(block) = block {
                w.queued -= 1;
                shared.changed.notify_all();
                drop(w);
                if !emit(block) {
                    return Err(FetchEnd::Stopped);
                }
                tick(self);
            } else {
                let (guard, _) = shared
                    .changed
                    .wait_timeout(w, TICK / 4)
                    .unwrap_or_else(|e| e.into_inner());
                drop(guard);
                tick(self);
            }
            w = shared.lock();
        }
    }

    /// One connection: takes the next segment until none is left.
    fn worker(&self) {
        let _ended = Ended(self);
        let mut state = HttpState {
            segments: true,
            etag: self.etag.clone(),
            redirected: self.redirected.clone(),
            started: self.started,
            ..HttpState::default()
        };
        loop {
            let k = {
                let mut w = self.shared.lock();
                if w.stop || w.next >= self.segments {
                    return;
                }
                w.next += 1;
                w.next - 1
            };
            let result = self.segment(k, &mut state);
            let failed = result.is_err();
            self.shared.finish(k, result);
            if failed {
                return;
            }
        }
    }

    /// Fetches segment `k` into the window.
    fn segment(&self, k: u64, state: &mut HttpState) -> Result<(), FetchEnd> {
        let span = self.span(k);
        let mut push = |b: Block| self.shared.push(k, b);
        let mut out = Emitter {
            pool: &self.window,
            progress: self.progress,
            emit: &mut push,
            cur: None,
            offset: span.start,
            limit: span.end,
        };
        state.total = None;
        retry::fetch_http(self.urls, self.opts, self.tls, state, &mut out)?;
        out.flush()?;
        let url = state
            .redirected
            .as_ref()
            .map_or_else(|| self.urls[0].clone(), |r| r.url.to_string());
        let failed = |reason: String| {
            FetchEnd::Failed(ImageError::Download {
                url: url.clone(),
                attempts: 1,
                offset: out.offset,
                reason,
            })
        };
        if let Some(t) = state.total.filter(|t| *t != self.total) {
            return Err(failed(format!(
                "the server gave the image's size as {t} bytes, its first reply as {}",
                self.total
            )));
        }
        if out.offset != span.end {
            return Err(failed(format!(
                "the reply for bytes {}-{} ended at byte {}: the image is shorter than \
                 the {} bytes the first reply announced",
                span.start,
                span.end - 1,
                out.offset,
                self.total
            )));
        }
        Ok(())
    }
}

/// Ends the download if a worker thread unwinds, so that the hand-on does
/// not wait for its segment for ever (the scope then passes the panic on).
struct Ended<'a, 'b>(&'a Job<'b>);

impl Drop for Ended<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let job = self.0;
            let failure = ImageError::Download {
                url: job.urls[0].clone(),
                attempts: 1,
                offset: job.start,
                reason: "a download thread failed".into(),
            };
            job.shared.fail(FetchEnd::Failed(failure));
        }
    }
}

/// When to add a connection: every [`TICK`], while the rate measured over
/// the last tick is more than 10 % above the one before (before the first
/// tick: the single stream's rate); once it is not, the count stays.
#[derive(Debug)]
struct Growth {
    connections: usize,
    cap: usize,
    at: Instant,
    bytes: u64,
    rate: f64,
    growing: bool,
}

impl Growth {
    fn new(connections: usize, cap: usize, now: Instant, bytes: u64) -> Self {
        Self {
            connections,
            cap,
            at: now,
            bytes,
            rate: 0.0,
            growing: true,
        }
    }

    /// Whether to add a connection now, `bytes()` having arrived in all
    /// (asked only once a tick is due).
    fn tick(&mut self, now: Instant, bytes: impl FnOnce() -> u64) -> bool {
        let dt = now.saturating_duration_since(self.at);
        if !self.growing || dt < TICK {
            return false;
        }
        let bytes = bytes();
        let rate = bytes.saturating_sub(self.bytes) as f64 / dt.as_secs_f64();
        self.growing = rate > self.rate * 1.1 && rate > 0.0;
        self.at = now;
        self.bytes = bytes;
        self.rate = rate;
        if self.growing && self.connections < self.cap {
            self.connections += 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
#[path = "parallel_tests.rs"]
mod tests;
