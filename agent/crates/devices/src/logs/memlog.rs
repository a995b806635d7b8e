//! The agent's own log kept in memory (the ramdisk has no disk to log to),
//! for `log.collect_system_logs`: a bounded buffer that drops the oldest
//! bytes, and a tracing writer that sends every line to stderr and here.

use std::io::Write;
use std::sync::Mutex;

/// Bytes of log kept.
pub const CAPACITY: usize = 4 << 20;

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// Appends `bytes`, dropping the oldest whole lines beyond [`CAPACITY`].
pub fn append(bytes: &[u8]) {
    let mut log = LOG.lock().unwrap_or_else(|p| p.into_inner());
    append_bounded(&mut log, bytes, CAPACITY);
}

fn append_bounded(log: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    log.extend_from_slice(bytes);
    if log.len() > cap {
        let excess = log.len() - cap;
        let cut = log[excess..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(excess, |i| excess + i + 1);
        log.drain(..cut);
    }
}

/// A copy of what is kept.
pub fn snapshot() -> Vec<u8> {
    LOG.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Tracing writer: stderr plus the in-memory log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        append(buf);
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Tee {
    type Writer = Tee;
    fn make_writer(&'a self) -> Tee {
        Tee
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_whole_lines() {
        let mut log = Vec::new();
        let line = [b'x'; 1023];
        for _ in 0..20 {
            append_bounded(&mut log, &line, 8192);
            append_bounded(&mut log, b"\n", 8192);
        }
        append_bounded(&mut log, b"last line\n", 8192);
        assert!(log.len() <= 8192);
        assert!(log.starts_with(&line), "starts at a line boundary");
        assert!(log.ends_with(b"last line\n"));
    }
}
