//! The segmented download against a keep-alive Range server on loopback
//! written here, which holds each connection to [`PER_CONNECTION`] bytes a
//! second as a long path holds a TCP stream: the first stream is cut and
//! the rest comes over several connections, bytes identical and in order,
//! each byte asked for once even across a reset and a stall; one stream
//! where ranges are not served, the image is small or the stages after the
//! download are the bound; precise errors from a server that lies; a
//! redirect to another host followed by every connection.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::super::direct::tests::read_request;
use super::super::{fetch, FetchEnd};
use super::*;
use std::io::Write;

/// 80 MiB: about 32 MiB in the first stream's two seconds, then segments.
const SIZE: usize = 80 << 20;
/// What the server sends on one connection per second, at most.
const PER_CONNECTION: f64 = 16.0 * (1 << 20) as f64;

/// An image of `n` bytes, every 64 KiB stamped with its index so that
/// blocks out of order cannot compare equal.
fn image(n: usize) -> Arc<Vec<u8>> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut data = Vec::with_capacity(n);
    while data.len() < n {
        let take = chunk.len().min(n - data.len());
        data.extend_from_slice(&chunk[..take]);
    }
    for (i, at) in (0..n).step_by(64 << 10).enumerate() {
        let stamp = (i as u32).to_le_bytes();
        let end = (at + 4).min(n);
        data[at..end].copy_from_slice(&stamp[..end - at]);
    }
    Arc::new(data)
}

/// What the server does wrong, once or always.
#[derive(Clone, Default)]
struct Faults {
    /// No `Accept-Ranges`, and a Range request gets the whole image.
    no_ranges: bool,
    /// Advertises ranges, then answers Range requests with 200.
    whole_on_range: bool,
    /// Gives another total in its 206 replies.
    wrong_total: bool,
    /// Closes the connection once, after sending up to this byte.
    reset_at: Option<u64>,
    /// Stops sending once at this byte, for this long.
    stall_at: Option<(u64, Duration)>,
    /// Redirects every request there.
    redirect_to: Option<String>,
    /// Sends at full speed (no per-connection cap).
    unthrottled: bool,
}

/// One request as the server saw it: the `Range` asked for, if any.
type Seen = Arc<Mutex<Vec<Option<(u64, Option<u64>)>>>>;

/// A keep-alive HTTP/1.1 server of one image on loopback.
struct Server {
    addr: std::net::SocketAddr,
    seen: Seen,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

impl Server {
    fn start(bind: &str, data: Arc<Vec<u8>>, faults: Faults) -> Self {
        let listener = TcpListener::bind(bind).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Seen = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, conns2, stop2) = (seen.clone(), connections.clone(), stop.clone());
        let once = Arc::new((AtomicBool::new(false), AtomicBool::new(false)));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                conns2.fetch_add(1, Ordering::SeqCst);
                let (data, faults, seen, once) =
                    (data.clone(), faults.clone(), seen2.clone(), once.clone());
                std::thread::spawn(move || serve(conn, &data, &faults, &seen, &once));
            }
        });
        Self {
            addr,
            seen,
            connections,
            stop,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/disk.img", self.addr)
    }

    fn ranges(&self) -> Vec<Option<(u64, Option<u64>)>> {
        self.seen.lock().unwrap().clone()
    }
}

fn parse_range(head: &str) -> Option<(u64, Option<u64>)> {
    let r = head.lines().find_map(|l| l.strip_prefix("Range: bytes="))?;
    let (a, b) = r.trim().split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()))
}

/// Answers requests on `conn` until the client closes it or asks to.
fn serve(
    mut conn: TcpStream,
    data: &[u8],
    f: &Faults,
    seen: &Seen,
    once: &(AtomicBool, AtomicBool),
) {
    let total = data.len() as u64;
    while let Some(head) = read_request(&mut conn) {
        let range = parse_range(&head);
        seen.lock().unwrap().push(range);
        if let Some(to) = &f.redirect_to {
            let _ = write!(
                conn,
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
        let close = head.contains("Connection: close");
        let partial = range.filter(|_| !f.no_ranges && !f.whole_on_range);
        let (start, end) = match partial {
            Some((a, b)) => (a, b.map_or(total, |b| (b + 1).min(total))),
            None => (0, total),
        };
        let mut reply = match partial {
            Some(_) => format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{}\r\n",
                end - 1,
                total + u64::from(f.wrong_total)
            ),
            None => "HTTP/1.1 200 OK\r\n".to_string(),
        };
        if !f.no_ranges {
            reply.push_str("Accept-Ranges: bytes\r\n");
        }
        reply.push_str(&format!("Content-Length: {}\r\n\r\n", end - start));
        if conn.write_all(reply.as_bytes()).is_err() {
            return;
        }
        let mut at = start;
        let began = std::time::Instant::now();
        while at < end {
            // Hold the connection to its rate.
            let due = Duration::from_secs_f64((at - start) as f64 / PER_CONNECTION);
            if !f.unthrottled {
                std::thread::sleep(due.saturating_sub(began.elapsed()));
            }
            let mut next = (at + (256 << 10)).min(end);
            // Faults strike the segments, not the first reply.
            let faulty = partial.is_some();
            if let Some(r) = f.reset_at.filter(|r| faulty && (at..end).contains(r)) {
                if !once.0.load(Ordering::SeqCst) && next > r {
                    next = r;
                    if at == r {
                        once.0.store(true, Ordering::SeqCst);
                        let _ = conn.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
            if let Some((s, d)) = f.stall_at.filter(|(s, _)| faulty && (at..end).contains(s)) {
                if !once.1.load(Ordering::SeqCst) && next > s {
                    next = s;
                    if at == s {
                        once.1.store(true, Ordering::SeqCst);
                        std::thread::sleep(d);
                    }
                }
            }
            if next > at && conn.write_all(&data[at as usize..next as usize]).is_err() {
                return;
            }
            at = next;
        }
        if close {
            return;
        }
    }
}

fn opts(connections: usize) -> HttpOptions {
    HttpOptions {
        stall_timeout: Duration::from_secs(2),
        retries: 3,
        retry_interval: Duration::from_millis(10),
        connections,
        ..HttpOptions::default()
    }
}

/// Downloads `url` with production-sized buffers: the bytes, or the error.
fn get(url: &str, opts: &HttpOptions) -> Result<Vec<u8>, ImageError> {
    let pool = Pool::new(8, 2 << 20);
    let progress = Progress::default();
    let mut data = Vec::new();
    let res = fetch(&[url.to_string()], opts, &pool, &progress, &mut |b| {
        data.extend_from_slice(&b);
        true
    });
    match res {
        Ok(n) => {
            assert_eq!(n, data.len() as u64);
            Ok(data)
        }
        Err(FetchEnd::Failed(e)) => Err(e),
        Err(FetchEnd::Stopped) => panic!("nothing stops this fetch"),
    }
}

/// The ranges asked for after the first request, sorted: they must tile
/// the image from where the first stream was cut (the end of one of its
/// 2 MiB buffers), each byte once. Returns the cut.
fn assert_tiled(ranges: &[Option<(u64, Option<u64>)>], total: u64) -> u64 {
    assert_eq!(ranges[0], None, "the first request is a plain GET");
    let mut asked: Vec<(u64, u64)> = ranges[1..]
        .iter()
        .map(|r| {
            let (a, b) = r.expect("every later request has a range");
            (a, b.expect("a closed range") + 1)
        })
        .collect();
    asked.sort();
    let cut = asked.first().expect("segments were asked for").0;
    assert_eq!(cut % (2 << 20), 0, "cut inside a buffer: {ranges:?}");
    let mut at = cut;
    for (a, b) in asked {
        assert_eq!(a, at, "bytes asked twice or skipped: {ranges:?}");
        assert!(b > a && b - a <= SEGMENT, "{ranges:?}");
        at = b;
    }
    assert_eq!(at, total);
    cut
}

#[test]
fn a_large_image_comes_in_order_over_several_connections_each_byte_asked_once() {
    let data = image(SIZE);
    let server = Server::start("127.0.0.1:0", data.clone(), Faults::default());
    let got = get(&server.url(), &opts(4)).unwrap();
    assert!(got == *data, "the bytes differ");
    let ranges = server.ranges();
    let cut = assert_tiled(&ranges, SIZE as u64);
    // At least one of the first stream's buffers; how many depends on the
    // machine's load over the first tick.
    assert!(cut >= 2 << 20, "cut at {cut}");
    assert_eq!(
        ranges.len() as u64,
        1 + (SIZE as u64 - cut).div_ceil(SEGMENT),
        "{ranges:?}"
    );
    // The first stream's connection, then at most four kept alive.
    let conns = server.connections.load(Ordering::SeqCst);
    assert!((3..=5).contains(&conns), "{conns} connections");
}

#[test]
fn one_connection_a_server_without_ranges_and_a_small_image_are_one_plain_get() {
    let data = image(SIZE);
    let server = Server::start("127.0.0.1:0", data.clone(), Faults::default());
    assert!(get(&server.url(), &opts(1)).unwrap() == *data);
    assert_eq!(server.ranges(), [None]);

    let plain = Faults {
        no_ranges: true,
        ..Faults::default()
    };
    let server = Server::start("127.0.0.1:0", data.clone(), plain);
    assert!(get(&server.url(), &opts(8)).unwrap() == *data);
    assert_eq!(server.ranges(), [None]);

    let small = image((MIN_TOTAL - 1) as usize);
    let server = Server::start("127.0.0.1:0", small.clone(), Faults::default());
    assert!(get(&server.url(), &opts(8)).unwrap() == *small);
    assert_eq!(server.ranges(), [None]);
}

#[test]
fn a_stream_the_later_stages_hold_back_is_not_cut() {
    // The pipeline takes 16 MiB/s, a tenth of what the server sends: the
    // pool's buffers stay taken, and more connections could not help.
    let data = image(SIZE);
    let fast = Faults {
        unthrottled: true,
        ..Faults::default()
    };
    let server = Server::start("127.0.0.1:0", data.clone(), fast);
    let pool = Pool::new(8, 2 << 20);
    let progress = Progress::default();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Block>(8);
    let slow = std::thread::spawn(move || {
        let began = Instant::now();
        let mut got = Vec::new();
        for b in rx {
            got.extend_from_slice(&b);
            let due = Duration::from_secs_f64(got.len() as f64 / PER_CONNECTION);
            std::thread::sleep(due.saturating_sub(began.elapsed()));
        }
        got
    });
    let res = fetch(&[server.url()], &opts(8), &pool, &progress, &mut |b| {
        tx.send(b).is_ok()
    });
    drop(tx);
    assert_eq!(res.unwrap(), SIZE as u64);
    assert!(slow.join().unwrap() == *data);
    assert_eq!(server.ranges(), [None], "one stream");
}

#[test]
fn a_reset_and_a_stall_resume_where_they_stopped() {
    let data = image(SIZE);
    // Past the cut (the first stream has at most 2 s × 16 MiB/s).
    let reset = (50 << 20) + 123_457;
    let stall = (64 << 20) + 77_777;
    let faults = Faults {
        reset_at: Some(reset),
        stall_at: Some((stall, Duration::from_secs(4))),
        ..Faults::default()
    };
    let server = Server::start("127.0.0.1:0", data.clone(), faults);
    let got = get(&server.url(), &opts(3)).unwrap();
    assert!(got == *data, "the bytes differ");
    let ranges = server.ranges();
    // Segments start on 2 MiB boundaries, the resumptions not.
    let cut = ranges
        .iter()
        .flatten()
        .map(|r| r.0)
        .filter(|a| a % SEGMENT == 0)
        .min()
        .expect("segments were asked for");
    let end_of = |at: u64| (cut + (at - cut) / SEGMENT * SEGMENT + SEGMENT).min(SIZE as u64) - 1;
    assert!(
        ranges.contains(&Some((reset, Some(end_of(reset))))),
        "{ranges:?}"
    );
    assert!(
        ranges.contains(&Some((stall, Some(end_of(stall))))),
        "{ranges:?}"
    );
    // Only the two resumptions were asked for beyond the segments, each
    // from the byte reached: nothing received is fetched again.
    assert_eq!(
        ranges.len() as u64,
        1 + (SIZE as u64 - cut).div_ceil(SEGMENT) + 2,
        "{ranges:?}"
    );
    let mut resumed: Vec<_> = ranges[1..].iter().map(|r| r.unwrap().0).collect();
    resumed.sort();
    resumed.dedup();
    assert_eq!(
        resumed.len(),
        ranges.len() - 1,
        "a range asked twice: {ranges:?}"
    );
}

#[test]
fn servers_that_lie_get_a_precise_error() {
    let data = image(SIZE);
    let whole = Faults {
        whole_on_range: true,
        ..Faults::default()
    };
    let server = Server::start("127.0.0.1:0", data.clone(), whole);
    let e = get(&server.url(), &opts(4)).unwrap_err().to_string();
    assert!(e.contains("with the whole image"), "{e}");
    assert!(e.contains(&server.url()), "{e}");

    let size = Faults {
        wrong_total: true,
        ..Faults::default()
    };
    let server = Server::start("127.0.0.1:0", data.clone(), size);
    let e = get(&server.url(), &opts(4)).unwrap_err().to_string();
    assert!(e.contains(&format!("its first reply as {SIZE}")), "{e}");
}

#[test]
fn a_redirect_to_another_host_is_followed_once_by_every_connection() {
    let data = image(SIZE);
    let target = Server::start("127.0.0.2:0", data.clone(), Faults::default());
    let redirect = Faults {
        redirect_to: Some(target.url()),
        ..Faults::default()
    };
    let front = Server::start("127.0.0.1:0", data.clone(), redirect);
    assert!(get(&front.url(), &opts(4)).unwrap() == *data);
    assert_eq!(
        front.ranges(),
        [None],
        "the segments go where the redirect led"
    );
    assert_tiled(&target.ranges(), SIZE as u64);
}

#[test]
fn a_stopped_pipeline_ends_the_download() {
    let data = image(SIZE);
    let server = Server::start("127.0.0.1:0", data, Faults::default());
    let pool = Pool::new(8, 2 << 20);
    let progress = Progress::default();
    let mut taken = 0u64;
    let res = fetch(&[server.url()], &opts(4), &pool, &progress, &mut |b| {
        taken += b.len() as u64;
        taken < 60 << 20
    });
    assert!(matches!(res, Err(FetchEnd::Stopped)), "{res:?}");
    assert!(server.ranges().len() > 1, "stopped in the segments");
}

#[test]
fn connections_are_added_while_the_rate_grows() {
    let t0 = Instant::now();
    let mut g = Growth::new(2, 4, t0, 0);
    assert!(!g.tick(t0 + TICK / 2, || 1 << 20), "not before a tick");
    assert!(
        g.tick(t0 + TICK, || 100 << 20),
        "the first rate counts as growth"
    );
    assert_eq!(g.connections, 3);
    assert!(
        g.tick(t0 + 2 * TICK, || 250 << 20),
        "150 MiB in a tick > 1.1 × 100"
    );
    assert_eq!(g.connections, 4);
    assert!(!g.tick(t0 + 3 * TICK, || 500 << 20), "at the cap");
    let mut flat = Growth::new(2, 8, t0, 0);
    assert!(flat.tick(t0 + TICK, || 100 << 20));
    assert!(
        !flat.tick(t0 + 2 * TICK, || 205 << 20),
        "105 MiB: not 10 % more"
    );
    assert!(
        !flat.tick(t0 + 3 * TICK, || 500 << 20),
        "growth stopped for good"
    );
    assert_eq!(flat.connections, 3);
}

#[test]
fn the_first_stream_is_cut_only_after_a_tick_with_most_buffers_free() {
    let pool = Pool::new(4, 4096);
    let t0 = Instant::now();
    let mut m = Meter::default();
    assert!(!m.cut_now(t0, &pool, || true), "not before a tick");
    assert!(!m.cut_now(t0 + TICK / 2, &pool, || true));
    assert!(m.cut_now(t0 + TICK, &pool, || true), "every buffer free");
    assert!(m.cut.is_some_and(|r| r > 0.0));

    let mut m = Meter::default();
    assert!(!m.cut_now(t0, &pool, || false));
    assert!(
        !m.cut_now(t0 + TICK, &pool, || false),
        "not when the server or the image forbids"
    );

    // Three of four buffers held by the later stages: they are the bound.
    let held: Vec<_> = (0..3).map(|_| pool.take()).collect();
    let mut m = Meter::default();
    assert!(!m.cut_now(t0, &pool, || true));
    assert!(
        !m.cut_now(t0 + TICK, &pool, || true),
        "the later stages are the bound"
    );
    drop(held);
    assert!(
        !m.cut_now(t0 + TICK + TICK / 2, &pool, || true),
        "a new tick began"
    );
    assert!(m.cut_now(t0 + 2 * TICK, &pool, || true), "now they keep up");
}
