//! A minimal ustar writer for regular files in memory, enough for the log
//! bundle Ironic stores (`tar.gz`, base64).

/// Appends one regular file (mode 0644) to `out`.
pub(crate) fn append_file(out: &mut Vec<u8>, name: &str, data: &[u8], mtime: u64) {
    let mut h = [0u8; 512];
    let name = name.as_bytes();
    let n = name.len().min(100);
    h[..n].copy_from_slice(&name[..n]);
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], mtime);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    octal(&mut h[148..155], sum);
    h[155] = b' ';
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

/// Ends the archive (two zero blocks).
pub(crate) fn finish(out: &mut Vec<u8>) {
    out.resize(out.len() + 1024, 0);
}

/// Zero-padded octal, NUL-terminated, filling `field`.
fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(&s.as_bytes()[s.len() - digits..]);
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnu_tar_lists_and_extracts_the_files() {
        let mut out = Vec::new();
        append_file(&mut out, "a.txt", b"hello\n", 1_700_000_000);
        append_file(&mut out, "dir-b/b.log", &[7u8; 1000], 1_700_000_000);
        finish(&mut out);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tar");
        std::fs::write(&path, &out).unwrap();
        agent_base::tool::run(
            std::process::Command::new("tar")
                .arg("-xvf")
                .arg(&path)
                .arg("-C")
                .arg(dir.path()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read(dir.path().join("a.txt")).unwrap(), b"hello\n");
        assert_eq!(
            std::fs::read(dir.path().join("dir-b/b.log")).unwrap().len(),
            1000
        );
    }
}
