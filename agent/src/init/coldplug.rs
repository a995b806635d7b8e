//! Coldplug: load the drivers of every device the kernel has found, then of
//! the devices those drivers reveal (virtio_pci → virtio_net …), until no
//! new device appears within the settle time (bounded by a maximum).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::modules::{device_modaliases, Loader};

/// What a coldplug pass did.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Module files loaded.
    pub loaded: usize,
    /// Distinct device modaliases seen.
    pub devices: usize,
}

/// Preloads `always` (modules no device asks for: filesystems, crc32c,
/// nls…), then loads drivers by modalias until quiet for `settle`, at most `max`.
pub(crate) fn run(
    loader: &mut Loader,
    sys: &Path,
    always: &[String],
    settle: Duration,
    max: Duration,
) -> Report {
    let mut report = Report::default();
    for m in always {
        report.loaded += loader.load(m);
    }
    let start = Instant::now();
    let mut quiet_since = Instant::now();
    let mut handled: BTreeSet<String> = BTreeSet::new();
    loop {
        let now = device_modaliases(sys);
        let new: Vec<String> = now.difference(&handled).cloned().collect();
        if !new.is_empty() {
            for alias in &new {
                for m in loader.index().matching(alias) {
                    report.loaded += loader.load(&m);
                }
            }
            handled.extend(new);
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= settle || start.elapsed() >= max {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    report.devices = handled.len();
    report
}
