//! Image formats, recognised by their magic bytes (never by the name or
//! the conductor's `disk_format` alone).

use std::fmt;

/// A format the agent writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Bytes as they go on disk (also `gpt` and `iso` images).
    Raw,
    /// gzip (possibly several members).
    Gzip,
    /// Zstandard (possibly several frames).
    Zstd,
    /// xz (possibly several streams).
    Xz,
    /// QEMU copy-on-write v2/v3.
    Qcow2,
}

impl Format {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
            Self::Xz => "xz",
            Self::Qcow2 => "qcow2",
        }
    }

    /// Parses a `--format` value or a conductor `disk_format`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "raw" | "gpt" | "iso" | "img" => Some(Self::Raw),
            "gzip" | "gz" => Some(Self::Gzip),
            "zstd" | "zst" => Some(Self::Zstd),
            "xz" => Some(Self::Xz),
            "qcow2" => Some(Self::Qcow2),
            _ => None,
        }
    }

    /// True for the stream compressors.
    pub fn is_compressed(self) -> bool {
        matches!(self, Self::Gzip | Self::Zstd | Self::Xz)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes needed to recognise every format.
pub const DETECT_BYTES: usize = 72;

/// A recognised format the agent refuses to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefusedFormat {
    /// A VM disk or compression format with no converter here.
    #[error("{0}; convert it to raw, qcow2 or a zstd/gzip/xz-compressed raw image")]
    Foreign(&'static str),
    /// VirtualBox's VDI.
    #[error("VDI; convert it to raw or qcow2")]
    Vdi,
}

/// Recognises the format from the first bytes. `Err` names a recognised
/// format the agent refuses to write (a VM disk format it cannot convert).
pub fn detect(head: &[u8]) -> Result<Format, RefusedFormat> {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if starts(b"QFI\xfb") {
        return Ok(Format::Qcow2);
    }
    if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Ok(Format::Zstd);
    }
    if starts(&[0x1f, 0x8b, 0x08]) {
        return Ok(Format::Gzip);
    }
    if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        return Ok(Format::Xz);
    }
    let refused = [
        (&b"KDMV"[..], "VMDK"),
        (b"vhdxfile", "VHDX"),
        (b"conectix", "VHD (dynamic)"),
        (b"QED\0", "QED"),
        (b"BZh", "bzip2"),
    ];
    for (magic, name) in refused {
        if starts(magic) {
            return Err(RefusedFormat::Foreign(name));
        }
    }
    if head.len() >= 0x44 && head[0x40..0x44] == [0x7f, 0x10, 0xda, 0xbe] {
        return Err(RefusedFormat::Vdi);
    }
    Ok(Format::Raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_decide() {
        assert_eq!(detect(b"QFI\xfb\0\0\0\x03"), Ok(Format::Qcow2));
        assert_eq!(detect(&[0x28, 0xb5, 0x2f, 0xfd, 4]), Ok(Format::Zstd));
        assert_eq!(detect(&[0x1f, 0x8b, 8, 0]), Ok(Format::Gzip));
        assert_eq!(detect(b"\xfd7zXZ\0\0"), Ok(Format::Xz));
        assert_eq!(detect(&[0u8; 512]), Ok(Format::Raw));
        assert_eq!(detect(b"EFI PART"), Ok(Format::Raw));
        assert!(detect(b"KDMV\x01")
            .unwrap_err()
            .to_string()
            .starts_with("VMDK"));
        let mut vdi = vec![0u8; 80];
        vdi[0x40..0x44].copy_from_slice(&[0x7f, 0x10, 0xda, 0xbe]);
        assert!(detect(&vdi).unwrap_err().to_string().starts_with("VDI"));
        assert_eq!(Format::parse("GPT"), Some(Format::Raw));
        assert_eq!(Format::parse("vmdk"), None);
    }
}
