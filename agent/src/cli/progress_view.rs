//! Showing a long operation's progress on the console: on a terminal a bar
//! redrawn in place four times a second, otherwise (serial console, log
//! file) one line every five seconds. The caller supplies the text; the
//! counters live in [`agent_contents::image::progress`] or the erase code.

use std::io::IsTerminal;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

/// A running progress display; [`ProgressView::finish`] prints the last state.
#[derive(Debug)]
pub(crate) struct ProgressView {
    /// Dropping it wakes the display thread at once (no polling interval
    /// to wait out when the operation ends).
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What to print: `render(true)` for the in-place bar, `render(false)` for
/// a log line.
pub(crate) type Render = Arc<dyn Fn(bool) -> String + Send + Sync>;

impl ProgressView {
    /// Starts showing `render` on standard error.
    pub(crate) fn start(render: Render) -> Self {
        let tty = std::io::stderr().is_terminal();
        let every = if tty {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(5)
        };
        Self::every(render, tty, every)
    }

    fn every(render: Render, tty: bool, every: Duration) -> Self {
        let (stop, stopped) = channel::<()>();
        let thread = std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if tty {
                    eprint!("\r{}\x1b[K", render(true));
                } else {
                    eprintln!("{}", render(false));
                }
            }
            if tty {
                eprintln!("\r{}\x1b[K", render(true));
            }
        });
        Self {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Stops the display (on a terminal the bar is drawn one last time).
    pub(crate) fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.stop_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A view logging every `every`, and how many lines it printed.
    fn counting(every: Duration) -> (ProgressView, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let render: Render = Arc::new(move |_| {
            c.fetch_add(1, Ordering::Relaxed);
            String::new()
        });
        (ProgressView::every(render, false, every), calls)
    }

    #[test]
    fn finishing_wakes_the_display_at_once_instead_of_waiting_out_its_interval() {
        let (view, calls) = counting(Duration::from_secs(600));
        let t = Instant::now();
        view.finish();
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "a log line before the interval"
        );
    }

    #[test]
    fn a_log_line_is_printed_each_interval() {
        let (view, calls) = counting(Duration::from_millis(10));
        let t = Instant::now();
        while calls.load(Ordering::Relaxed) < 3 && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        view.finish();
        assert!(calls.load(Ordering::Relaxed) >= 3);
    }
}
