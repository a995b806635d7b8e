//! The clock before any TLS (`ipa-ntp-server`): one SNTP exchange
//! (RFC 4330) with the configured server, and, when the clock is still
//! obviously wrong (before [`EARLIEST_PLAUSIBLE`]), the `Date` header of the
//! conductor's answer. In the ramdisk the clock is set; in host mode it is
//! only measured and logged: this machine's clock is never changed.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

/// Seconds between the NTP epoch (1900) and the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// No clock that reads earlier than this (2026-01-01T00:00:00Z) is right:
/// this agent did not exist yet.
pub const EARLIEST_PLAUSIBLE: u64 = 1_767_225_600;

/// How long one SNTP request waits for its answer.
const SNTP_TIMEOUT: Duration = Duration::from_secs(3);
/// SNTP requests sent before giving up.
const SNTP_TRIES: u32 = 3;

/// Why an SNTP answer is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SntpError {
    /// Shorter than an NTP header.
    #[error("the answer has {0} bytes, not 48")]
    Short(usize),
    /// Not a server answer (mode 4) of NTP version 3 or 4.
    #[error("not an NTP server answer (mode {mode}, version {version})")]
    NotServer {
        /// Association mode.
        mode: u8,
        /// Protocol version.
        version: u8,
    },
    /// Stratum 0 (kiss-of-death) or an unsynchronised server (leap 3).
    #[error("the server is not synchronised (stratum {stratum}, leap indicator {leap})")]
    Unsynchronised {
        /// Its stratum.
        stratum: u8,
        /// Its leap indicator.
        leap: u8,
    },
    /// The originate timestamp is not the one we sent.
    #[error("the answer is not for our request")]
    NotOurs,
}

/// An NTP timestamp of `t` (seconds and fraction since 1900).
fn ntp_timestamp(t: Duration) -> [u8; 8] {
    let secs = (t.as_secs() + NTP_UNIX_OFFSET) as u32;
    let frac = ((u64::from(t.subsec_nanos()) << 32) / 1_000_000_000) as u32;
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&secs.to_be_bytes());
    b[4..].copy_from_slice(&frac.to_be_bytes());
    b
}

/// Seconds since the Unix epoch of an NTP timestamp (era 0, or era 1 after
/// 2036 for small values).
fn unix_seconds(b: &[u8]) -> f64 {
    let secs = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let frac = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    let mut s = u64::from(secs);
    if s < NTP_UNIX_OFFSET {
        s += 1 << 32; // era 1 (from 2036-02-07)
    }
    (s - NTP_UNIX_OFFSET) as f64 + f64::from(frac) / 4_294_967_296.0
}

/// A client request sent at `now` (since the Unix epoch): version 4,
/// client mode, our time as the transmit timestamp (echoed back as the
/// originate timestamp, which ties the answer to the request).
pub fn request(now: Duration) -> [u8; 48] {
    let mut p = [0u8; 48];
    p[0] = (4 << 3) | 3;
    p[40..48].copy_from_slice(&ntp_timestamp(now));
    p
}

/// The clock's offset in seconds (add it to the local clock) from the
/// answer to `sent`, received at `received` (local time since the epoch).
pub fn offset(sent: &[u8; 48], answer: &[u8], received: Duration) -> Result<f64, SntpError> {
    if answer.len() < 48 {
        return Err(SntpError::Short(answer.len()));
    }
    let (leap, version, mode) = (answer[0] >> 6, (answer[0] >> 3) & 7, answer[0] & 7);
    if mode != 4 || !(3..=4).contains(&version) {
        return Err(SntpError::NotServer { mode, version });
    }
    let stratum = answer[1];
    if stratum == 0 || stratum > 15 || leap == 3 {
        return Err(SntpError::Unsynchronised { stratum, leap });
    }
    if answer[24..32] != sent[40..48] {
        return Err(SntpError::NotOurs);
    }
    let t1 = unix_seconds(&sent[40..48]);
    let t2 = unix_seconds(&answer[32..40]);
    let t3 = unix_seconds(&answer[40..48]);
    let t4 = received.as_secs_f64();
    Ok(((t2 - t1) + (t3 - t4)) / 2.0)
}

fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Asks `server` (a host name or address, port 123 unless given) for the
/// clock's offset in seconds.
pub async fn sntp_offset(server: &str) -> Result<f64> {
    let target = if server.contains(':')
        && !server.starts_with('[')
        && server.parse::<std::net::Ipv6Addr>().is_ok()
    {
        format!("[{server}]:123")
    } else if server
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        server.to_string()
    } else {
        format!("{server}:123")
    };
    let addr: SocketAddr = tokio::net::lookup_host(&target)
        .await
        .with_context(|| format!("resolving NTP server {server}"))?
        .next()
        .with_context(|| format!("NTP server {server} has no address"))?;
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = tokio::net::UdpSocket::bind(bind).await?;
    sock.connect(addr).await?;
    let mut last = anyhow::anyhow!("no answer");
    for _ in 0..SNTP_TRIES {
        let sent = request(now());
        sock.send(&sent).await?;
        let mut buf = [0u8; 96];
        match tokio::time::timeout(SNTP_TIMEOUT, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => match offset(&sent, &buf[..n], now()) {
                Ok(o) => return Ok(o),
                Err(e) => last = e.into(),
            },
            Ok(Err(e)) => last = e.into(),
            Err(_) => last = anyhow::anyhow!("no answer within {} s", SNTP_TIMEOUT.as_secs()),
        }
    }
    Err(last.context(format!("asking NTP server {addr}")))
}

/// Whether the clock reads earlier than [`EARLIEST_PLAUSIBLE`].
pub fn implausible(t: SystemTime) -> bool {
    t.duration_since(UNIX_EPOCH)
        .map_or(true, |d| d.as_secs() < EARLIEST_PLAUSIBLE)
}

/// Moves the clock by `offset` seconds: in the ramdisk (`set`) for real,
/// otherwise only logged.
pub fn apply(offset: f64, set: bool, source: &str) -> Result<()> {
    let target = now().as_secs_f64() + offset;
    if !set {
        tracing::info!(
            offset_s = offset,
            source,
            "clock offset measured (host mode: this machine's clock is not changed)"
        );
        return Ok(());
    }
    if !target.is_finite() || target < EARLIEST_PLAUSIBLE as f64 {
        bail!("{source} gives a time before 2026 ({target:.0} s since 1970); not set");
    }
    let spec = nix::sys::time::TimeSpec::new(target.trunc() as i64, (target.fract() * 1e9) as i64);
    nix::time::clock_settime(nix::time::ClockId::CLOCK_REALTIME, spec)
        .with_context(|| format!("setting the clock from {source}"))?;
    tracing::info!(offset_s = offset, source, "clock set");
    Ok(())
}

/// The `Date` of `url`'s answer as seconds since the epoch. The certificate
/// is not checked (the clock that would check it is wrong), so only the
/// time is taken from this answer, and only to move an implausible clock
/// forward.
pub async fn http_date(url: &str) -> Result<u64> {
    let client = crate::tls::http_client(true, None, Duration::from_secs(10))?;
    let resp = client
        .head(url)
        .send()
        .await
        .with_context(|| format!("asking {url} for the time"))?;
    let date = resp
        .headers()
        .get(reqwest::header::DATE)
        .and_then(|v| v.to_str().ok())
        .with_context(|| format!("{url} sent no Date header"))?;
    let t = httpdate::parse_http_date(date).with_context(|| format!("{url}: Date {date:?}"))?;
    Ok(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

/// The clock before the first TLS connection: SNTP from `ntp_server`
/// when set, then, if the clock still reads before 2026, the conductor's
/// `Date` (moving the clock forward only). `set` is false in host mode.
/// Failures are logged: TLS errors that follow will say the rest. Returns
/// the NTP step's failure (IPA's "Failed to sync with ntp server"), for
/// `fail_if_clock_not_set`; the `Date` fallback is best effort.
pub async fn sync(ntp_server: Option<&str>, conductor: Option<&str>, set: bool) -> Result<()> {
    let mut ntp = Ok(());
    if let Some(server) = ntp_server {
        let step = match sntp_offset(server).await {
            Ok(off) => apply(off, set, &format!("NTP server {server}")),
            Err(e) => Err(e),
        };
        if let Err(e) = step {
            tracing::error!("Failed to sync with ntp server {server}: {e:#}");
            ntp = Err(e.context(format!("Failed to sync with ntp server: {server}")));
        }
    }
    date_fallback(conductor, set).await;
    ntp
}

/// The conductor's `Date` when the clock reads before 2026.
async fn date_fallback(conductor: Option<&str>, set: bool) {
    if !implausible(SystemTime::now()) {
        return;
    }
    let Some(url) = conductor else {
        tracing::warn!("the clock reads before 2026 and no conductor URL is known to ask");
        return;
    };
    match http_date(url).await {
        Ok(t) if t >= EARLIEST_PLAUSIBLE => {
            let off = t as f64 - now().as_secs_f64();
            if off > 0.0 {
                if let Err(e) = apply(off, set, &format!("the Date header of {url}")) {
                    tracing::error!("{e:#}");
                }
            }
        }
        Ok(t) => {
            tracing::error!(%url, date = t, "the conductor's Date is before 2026 too; clock not set")
        }
        Err(e) => tracing::error!("the clock reads before 2026: {e:#}"),
    }
}

/// A server's answer to `sent` saying `server_time`, at `stratum`
/// (0: a kiss-of-death, refused): the server side of SNTP, for tests.
#[cfg(any(test, feature = "test-support"))]
pub fn answer(sent: &[u8; 48], server_time: Duration, stratum: u8) -> [u8; 48] {
    let mut a = [0u8; 48];
    a[0] = (4 << 3) | 4;
    a[1] = stratum;
    a[24..32].copy_from_slice(&sent[40..48]);
    a[32..40].copy_from_slice(&ntp_timestamp(server_time));
    a[40..48].copy_from_slice(&ntp_timestamp(server_time + Duration::from_millis(1)));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_year_slow_clock_gets_a_year_of_offset() {
        let local = Duration::from_secs(1_735_000_000); // late 2024
        let server = local + Duration::from_secs(365 * 86_400);
        let sent = request(local);
        let a = answer(&sent, server, 2);
        let off = offset(&sent, &a, local + Duration::from_millis(4)).unwrap();
        assert!((off - 365.0 * 86_400.0).abs() < 0.01, "{off}");
    }

    #[test]
    fn bad_answers_are_refused_with_the_reason() {
        let local = Duration::from_secs(1_800_000_000);
        let sent = request(local);
        let good = answer(&sent, local, 3);
        assert_eq!(offset(&sent, &good[..20], local), Err(SntpError::Short(20)));
        let mut client_mode = good;
        client_mode[0] = (4 << 3) | 3;
        assert!(matches!(
            offset(&sent, &client_mode, local),
            Err(SntpError::NotServer { mode: 3, .. })
        ));
        let kiss = answer(&sent, local, 0);
        assert!(matches!(
            offset(&sent, &kiss, local),
            Err(SntpError::Unsynchronised { stratum: 0, .. })
        ));
        let other = request(local + Duration::from_secs(1));
        assert_eq!(offset(&other, &good, local), Err(SntpError::NotOurs));
        // Arbitrary bytes never panic.
        for n in 0..60 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = offset(&sent, &junk, local);
        }
    }

    #[test]
    fn timestamps_round_trip_and_2036_rolls_over() {
        let t = Duration::new(1_800_000_000, 250_000_000);
        let back = unix_seconds(&ntp_timestamp(t));
        assert!((back - 1_800_000_000.25).abs() < 1e-6, "{back}");
        // 2040: NTP seconds wrap past 2^32 (era 1).
        let t = Duration::from_secs(2_208_988_800);
        assert!((unix_seconds(&ntp_timestamp(t)) - 2_208_988_800.0).abs() < 1e-6);
    }

    #[test]
    fn plausibility() {
        assert!(implausible(UNIX_EPOCH + Duration::from_secs(1_735_000_000)));
        assert!(!implausible(
            UNIX_EPOCH + Duration::from_secs(1_795_000_000)
        ));
        assert!(implausible(UNIX_EPOCH));
    }

    #[test]
    fn host_mode_never_sets_the_clock() {
        // A huge offset with set = false only logs.
        apply(-1e9, false, "test").unwrap();
    }

    /// A real exchange on loopback with a one-shot SNTP server.
    #[tokio::test]
    async fn an_exchange_on_loopback() {
        let server = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 48];
            let (_, from) = server.recv_from(&mut buf).await.unwrap();
            let t = now() + Duration::from_secs(100);
            server.send_to(&answer(&buf, t, 1), from).await.unwrap();
        });
        let off = sntp_offset(&addr.to_string()).await.unwrap();
        assert!((off - 100.0).abs() < 1.0, "{off}");
    }
}
