//! What the agent waits for before it reads the hardware or opens a TLS
//! connection, as IPA does at start: the clock (`ipa-ntp-server`, else the
//! conductor's `Date` when the clock is obviously wrong), a pause for slow
//! controllers (`ipa-hardware-initialization-delay`), and, in the ramdisk,
//! a disk to appear (`ipa-disk-wait-attempts` × `ipa-disk-wait-delay`).
//! Every wait is logged with its reason, so a slow start is visible.

use std::path::Path;
use std::time::Duration;

use agent_base::config::{ApiUrls, Config, RunMode};

/// How long the start waits between tries to set the clock when
/// `fail_if_clock_not_set` holds it (IPA's service restarts after its
/// failure).
pub const CLOCK_RETRY: Duration = Duration::from_secs(10);

/// Runs the waits `config` asks for. Nothing here is fatal: the agent
/// goes on and later errors (TLS, no root device) say what is missing;
/// only `fail_if_clock_not_set` holds the start until the clock is set
/// from `ntp_server`.
pub async fn prepare(config: &Config) {
    let conductor = match &config.api_urls {
        ApiUrls::Urls(u) => u.first().map(String::as_str),
        _ => None,
    };
    let ramdisk = config.mode == RunMode::Ramdisk;
    while let Err(e) =
        agent_base::timesync::sync(config.ntp_server.as_deref(), conductor, ramdisk).await
    {
        if !config.fail_if_clock_not_set {
            break;
        }
        tracing::error!(
            "{e:#}; fail_if_clock_not_set: not going on, trying again in {} s",
            CLOCK_RETRY.as_secs()
        );
        tokio::time::sleep(CLOCK_RETRY).await;
    }
    if !config.hardware_initialization_delay.is_zero() {
        tracing::info!(
            seconds = config.hardware_initialization_delay.as_secs_f64(),
            "waiting before reading the hardware (ipa-hardware-initialization-delay)"
        );
        tokio::time::sleep(config.hardware_initialization_delay).await;
    }
    if ramdisk {
        wait_for_disks(
            Path::new("/"),
            config.disk_wait_attempts,
            config.disk_wait_delay,
        )
        .await;
    }
}

/// Looks for a disk up to `attempts` times, `delay` apart (IPA's wait for
/// slow storage controllers). Returns how many disks were found last.
pub async fn wait_for_disks(root: &Path, attempts: u32, delay: Duration) -> usize {
    let mut found = 0;
    for attempt in 1..=attempts.max(1) {
        found = agent_devices::inventory::disks::read(root, &[]).map_or(0, |d| d.len());
        if found > 0 {
            if attempt > 1 {
                tracing::info!(disks = found, attempt, "disks appeared");
            }
            return found;
        }
        if attempt < attempts {
            tracing::warn!(
                attempt,
                attempts,
                delay_s = delay.as_secs_f64(),
                "no disk yet; waiting for the storage controllers (ipa-disk-wait-attempts/-delay)"
            );
            tokio::time::sleep(delay).await;
        }
    }
    tracing::error!(
        attempts,
        "no disk found; deploys and cleans will fail until one appears"
    );
    found
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    /// An SNTP server on loopback refusing (stratum 0) its first `bad`
    /// requests, answering the rest; counts them.
    async fn sntp_server(bad: u32) -> (String, Arc<AtomicU32>) {
        let server = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap().to_string();
        let seen = Arc::new(AtomicU32::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 48];
            while let Ok((_, from)) = server.recv_from(&mut buf).await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                let stratum = if n < bad { 0 } else { 2 };
                let a = agent_base::timesync::answer(&buf, now, stratum);
                server.send_to(&a, from).await.unwrap();
            }
        });
        (addr, seen)
    }

    fn host_config(ntp: &str, fail_if_clock_not_set: bool) -> Config {
        Config {
            ntp_server: Some(ntp.to_string()),
            fail_if_clock_not_set,
            mode: RunMode::Host,
            ..Config::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fail_if_clock_not_set_holds_the_start_until_ntp_answers() {
        // One sync asks up to three times: the first sync is refused three
        // times, the second is answered at once. Host mode: the clock is
        // only logged, never set.
        let (addr, seen) = sntp_server(3).await;
        let t = tokio::time::Instant::now();
        prepare(&host_config(&addr, true)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 4);
        assert!(t.elapsed() >= CLOCK_RETRY, "{:?}", t.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn without_fail_if_clock_not_set_a_refusing_server_is_only_logged() {
        let (addr, seen) = sntp_server(u32::MAX).await;
        let t = tokio::time::Instant::now();
        prepare(&host_config(&addr, false)).await;
        assert_eq!(seen.load(Ordering::SeqCst), 3, "one sync, three tries");
        assert!(t.elapsed() < CLOCK_RETRY, "{:?}", t.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn the_disk_wait_tries_each_attempt_and_stops_at_a_disk() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys/block")).unwrap();
        let t = tokio::time::Instant::now();
        assert_eq!(
            wait_for_disks(root.path(), 4, Duration::from_secs(3)).await,
            0
        );
        // Four looks, three pauses.
        assert_eq!(t.elapsed(), Duration::from_secs(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixture_disk_ends_the_wait_at_once() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let root = std::fs::read_dir(&fixtures)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| agent_devices::inventory::disks::read(p, &[]).is_ok_and(|d| !d.is_empty()))
            .expect("a captured machine with a disk under tests/fixtures");
        let t = tokio::time::Instant::now();
        assert!(wait_for_disks(&root, 10, Duration::from_secs(3)).await > 0);
        assert_eq!(t.elapsed(), Duration::ZERO);
    }
}
