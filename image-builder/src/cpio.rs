//! A newc (`070701`) cpio writer for initramfs images, with fixed owners,
//! mtimes and inode numbers so the same entries give the same bytes.

use std::io::{self, Write};

/// One archive member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Contents.
        data: Vec<u8>,
    },
    /// A symbolic link.
    Symlink {
        /// Link target.
        target: String,
    },
    /// A character device node (e.g. `/dev/console` 5:1).
    CharDev {
        /// Permission bits.
        mode: u32,
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
}

/// Writes newc archives; entries must be given parents first.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    ino: u32,
    written: u64,
    mtime: u32,
}

impl<W: Write> Writer<W> {
    /// A writer stamping every entry with `mtime`.
    pub fn new(out: W, mtime: u32) -> Self {
        Self {
            out,
            ino: 0,
            written: 0,
            mtime,
        }
    }

    /// Appends `path` (relative, no leading `/`).
    pub fn add(&mut self, path: &str, entry: &Entry) -> io::Result<()> {
        self.ino += 1;
        let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match entry {
            Entry::Dir { mode } => (0o040000 | mode, &[], (0, 0)),
            Entry::File { mode, data } => (0o100000 | mode, data, (0, 0)),
            Entry::Symlink { target } => (0o120777, target.as_bytes(), (0, 0)),
            Entry::CharDev { mode, major, minor } => (0o020000 | mode, &[], (*major, *minor)),
        };
        let nlink = if matches!(entry, Entry::Dir { .. }) {
            2
        } else {
            1
        };
        self.header(self.ino, mode, nlink, data.len(), rdev, path)?;
        self.emit(data)?;
        self.pad()
    }

    /// Writes the trailer and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.header(0, 0, 1, 0, (0, 0), "TRAILER!!!")?;
        // The kernel does not need it, but cpio(1) likes 512-byte blocks.
        while self.written % 512 != 0 {
            self.emit(&[0])?;
        }
        Ok(self.out)
    }

    fn header(
        &mut self,
        ino: u32,
        mode: u32,
        nlink: u32,
        size: usize,
        rdev: (u32, u32),
        name: &str,
    ) -> io::Result<()> {
        let size = u32::try_from(size).map_err(|_| io::Error::other("file over 4 GiB"))?;
        let fields = [
            ino,
            mode,
            0,
            0,
            nlink,
            self.mtime,
            size,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        let mut h = String::from("070701");
        for f in fields {
            h.push_str(&format!("{f:08X}"));
        }
        self.emit(h.as_bytes())?;
        self.emit(name.as_bytes())?;
        self.emit(&[0])?;
        self.pad()
    }

    fn emit(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.written += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        while self.written % 4 != 0 {
            self.emit(&[0])?;
        }
        Ok(())
    }
}

/// `data` as an .xz stream with a CRC32 check (the kernel's own xz decoder,
/// used for firmware and modules in the initramfs, knows no other), preset
/// 6: the same bytes every time.
pub fn xz(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    let stream = liblzma::stream::Stream::new_easy_encoder(6, liblzma::stream::Check::Crc32)
        .context("xz encoder")?;
    let mut enc = liblzma::write::XzEncoder::new_stream(Vec::new(), stream);
    enc.write_all(data)?;
    Ok(enc.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_newc() {
        let mut w = Writer::new(Vec::new(), 0);
        w.add(
            "init",
            &Entry::File {
                mode: 0o755,
                data: b"abc".to_vec(),
            },
        )
        .unwrap();
        let out = w.finish().unwrap();
        assert_eq!(&out[..6], b"070701");
        // Header 110 bytes + "init\0" = 115 → padded to 116, then data.
        assert_eq!(&out[116..119], b"abc");
        assert_eq!(&out[14..22], b"000081ED", "mode 0100755");
        assert_eq!(out.len() % 512, 0);
        let trailer = out.windows(10).position(|w| w == b"TRAILER!!!");
        assert!(trailer.is_some());
    }

    #[test]
    fn cpio_tool_reads_it() {
        let mut w = Writer::new(Vec::new(), 0);
        w.add("etc", &Entry::Dir { mode: 0o755 }).unwrap();
        w.add(
            "etc/x",
            &Entry::File {
                mode: 0o644,
                data: b"hello\n".to_vec(),
            },
        )
        .unwrap();
        w.add("etc/l", &Entry::Symlink { target: "x".into() })
            .unwrap();
        let out = w.finish().unwrap();
        let Ok(mut child) = std::process::Command::new("cpio")
            .args(["-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            eprintln!("cpio(1) not installed; skipped");
            return;
        };
        child.stdin.take().unwrap().write_all(&out).unwrap();
        let listing = child.wait_with_output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&listing.stdout),
            "etc\netc/x\netc/l\n"
        );
    }
}
