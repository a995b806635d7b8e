//! The live system's journal for the log bundle (OpenShift's manager adds
//! `journalctl --root /mnt/coreos` as the file `journal` in
//! `collect_system_logs`). The container has no `journalctl`, so the
//! host's runs chrooted into its root, which reads the same journal files
//! (`/var/log/journal`, `/run/log/journal`). Output under 50 bytes is
//! abnormal (a journal always has its header lines): the caller logs the
//! error and leaves the part out, as upstream does.

use std::path::Path;

use agent_base::tool::ToolError;

/// Output shorter than this is not a journal.
pub(crate) const MIN_BYTES: usize = 50;
/// The most of the journal the bundle keeps (its end).
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// Why the journal is not in the bundle.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalError {
    /// `journalctl` could not run or failed.
    #[error("Could not get journal for the host: {0}")]
    Tool(#[from] ToolError),
    /// It printed (almost) nothing.
    #[error("Abnormally small journalctl output: {0}")]
    TooSmall(String),
}

/// The host's journal at `host_root`.
pub(crate) fn read(host_root: &Path) -> Result<Vec<u8>, JournalError> {
    let out = agent_base::tool::run(super::command(host_root, "journalctl").arg("--no-pager"))?;
    checked(out.stdout)
}

/// The size rules on `journalctl`'s output: too small is an error, too
/// large keeps the end.
pub(crate) fn checked(mut out: Vec<u8>) -> Result<Vec<u8>, JournalError> {
    if out.len() < MIN_BYTES {
        return Err(JournalError::TooSmall(
            String::from_utf8_lossy(&out).into_owned(),
        ));
    }
    if out.len() > MAX_BYTES {
        let cut = out.len() - MAX_BYTES;
        out.drain(..cut);
        let mut note = format!("[journal cut: its first {cut} bytes left out]\n").into_bytes();
        note.extend_from_slice(&out);
        out = note;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_an_error_and_large_keeps_the_end() {
        let e = checked(b"-- No entries --\n".to_vec()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Abnormally small journalctl output: -- No entries --\n"
        );
        let ok = vec![b'x'; MIN_BYTES];
        assert_eq!(checked(ok.clone()).unwrap(), ok);
        let mut big = vec![b'a'; 10];
        big.extend(vec![b'b'; MAX_BYTES]);
        let got = checked(big).unwrap();
        let note = b"[journal cut: its first 10 bytes left out]\n";
        assert!(got.starts_with(note));
        assert_eq!(got.len(), note.len() + MAX_BYTES);
        assert!(got[note.len()..].iter().all(|b| *b == b'b'));
    }

    #[test]
    fn a_missing_root_is_a_tool_error() {
        let e = read(Path::new("/nonexistent/host/root")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("Could not get journal for the host: running `journalctl"),
            "{e}"
        );
    }
}
