//! Showing a long operation's progress on the console: on a terminal a bar
//! redrawn in place four times a second, otherwise (serial console, log
//! file) one line every five seconds. The caller supplies the text; the
//! counters live in [`crate::image::progress`] or the erase code.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running progress display; [`ProgressView::finish`] prints the last state.
#[derive(Debug)]
pub struct ProgressView {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    tty: bool,
}

/// What to print: `render(true)` for the in-place bar, `render(false)` for
/// a log line.
pub type Render = Arc<dyn Fn(bool) -> String + Send + Sync>;

impl ProgressView {
    /// Starts showing `render` on standard error.
    pub fn start(render: Render) -> Self {
        let tty = std::io::stderr().is_terminal();
        let every = if tty {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(5)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut waited = Duration::ZERO;
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                waited += Duration::from_millis(50);
                if waited >= every {
                    waited = Duration::ZERO;
                    if tty {
                        eprint!("\r{}\x1b[K", render(true));
                    } else {
                        eprintln!("{}", render(false));
                    }
                }
            }
            if tty {
                eprintln!("\r{}\x1b[K", render(true));
            }
        });
        Self {
            stop,
            thread: Some(thread),
            tty,
        }
    }

    /// Whether standard error is a terminal.
    pub fn is_tty(&self) -> bool {
        self.tty
    }

    /// Stops the display (on a terminal the bar is drawn one last time).
    pub fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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
