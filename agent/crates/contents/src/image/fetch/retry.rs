//! The HTTP download's retry loop: attempts (`direct.rs`) resumed from the
//! byte reached after a dropped connection, a stall or a 5xx, with
//! back-off, bounded and counted per failure without progress, moving to
//! the next URL when an attempt got nothing; a final error (4xx, a refused
//! certificate, the total timeout) ends it at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::direct::{self, Clock};
use super::emitter::Emitter;
use super::options::HttpOptions;
use super::outcome::{AttemptError, FetchEnd};
use super::state::HttpState;
use crate::image::ImageError;

/// Downloads into `out` until its limit or the end of the file, with the
/// client configuration `tls` (one for every attempt, and so one session
/// cache) and the download's `state` (what earlier replies said).
pub(super) fn fetch_http(
    urls: &[String],
    opts: &HttpOptions,
    tls: &Arc<rustls::ClientConfig>,
    state: &mut HttpState,
    out: &mut Emitter<'_>,
) -> Result<(), FetchEnd> {
    let started = *state.started.get_or_insert_with(Instant::now);
    let clock = Clock {
        opts,
        deadline: opts.total_timeout.map(|t| started + t),
    };
    let mut url_idx = 0;
    let mut failures = 0u32;
    loop {
        let Some(url) = urls.get(url_idx) else {
            return Err(ImageError::InvalidParams("no image URL given".into()).into());
        };
        let before = out.offset;
        let reason = match direct::attempt(url, tls, state, out, &clock) {
            Ok(()) => return Ok(()),
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Retry(reason)) => reason,
        };
        if out.offset > before {
            failures = 0;
        } else if urls.len() > 1 {
            url_idx = (url_idx + 1) % urls.len();
            // The next URL starts from itself, not from where the last
            // one's redirects led.
            state.redirected = None;
        }
        failures += 1;
        if failures > opts.retries {
            return Err(ImageError::Download {
                url: url.clone(),
                attempts: failures,
                offset: out.offset,
                reason,
            }
            .into());
        }
        out.progress.add_resume();
        let wait = Duration::from_secs(1 << (failures - 1).min(4)).min(opts.retry_interval);
        tracing::warn!(
            url = %url, offset = out.offset, attempt = failures, retries = opts.retries,
            "image download interrupted ({reason}); resuming in {wait:?}"
        );
        std::thread::sleep(wait);
    }
}
