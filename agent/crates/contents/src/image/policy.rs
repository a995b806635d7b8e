//! Which image formats a write accepts: the conductor's deep image
//! inspection (`disable_deep_image_inspection`, `permitted_image_formats`
//! and the image's `disk_format`, Ironic's fix for bug 2071740). The format
//! judged is the disk image's own, after any gzip/zstd/xz transport
//! compression, named as Ironic's format inspector names it (`raw`, `gpt`,
//! `qcow2`, `iso`, `luks`, …), and it is judged from the first bytes,
//! before anything is written.

/// IPA 13's `permitted_image_formats` when the conductor sends none.
pub const IPA_DEFAULT_PERMITTED: [&str; 3] = ["raw", "gpt", "qcow2"];

/// What a write accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatPolicy {
    /// The permitted formats; `None` when deep inspection is disabled
    /// (anything the agent can write goes).
    pub permitted: Option<Vec<String>>,
    /// The conductor's `disk_format`, which the image must be unless it
    /// is raw-like (`raw`, `gpt`) or `unknown`, as IPA checks.
    pub expected: Option<String>,
}

impl Default for FormatPolicy {
    /// IPA's default: deep inspection on, `raw`, `gpt`, `qcow2`.
    fn default() -> Self {
        Self {
            permitted: Some(IPA_DEFAULT_PERMITTED.map(String::from).to_vec()),
            expected: None,
        }
    }
}

impl FormatPolicy {
    /// No check at all (`agent write-image`: the operator's own command).
    pub fn any() -> Self {
        Self {
            permitted: None,
            expected: None,
        }
    }

    /// The conductor's settings: `deep` is not `disable_deep_image_inspection`.
    pub fn from_conductor(deep: bool, permitted: &[String], disk_format: Option<&str>) -> Self {
        if !deep {
            return Self::any();
        }
        Self {
            permitted: Some(permitted.iter().map(|f| f.to_ascii_lowercase()).collect()),
            expected: disk_format.map(str::to_ascii_lowercase),
        }
    }

    /// Checks the image's format (a name from [`content_format`]); the
    /// error says what was found and what is allowed, in IPA's words.
    pub fn check(&self, found: &str) -> Result<(), FormatRefused> {
        let Some(permitted) = &self.permitted else {
            return Ok(());
        };
        if !permitted.iter().any(|p| p == found) {
            return Err(FormatRefused::NotPermitted {
                found: found.to_string(),
                permitted: permitted.clone(),
            });
        }
        match self.expected.as_deref() {
            Some(want) if !matches!(want, "raw" | "gpt" | "unknown") && want != found => {
                Err(FormatRefused::NotExpected {
                    expected: want.to_string(),
                    found: found.to_string(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Why [`FormatPolicy::check`] refused an image, in IPA's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatRefused {
    /// The format is not among the conductor's permitted ones.
    #[error(
        "Security: Detected image format was {found}, but only {} are allowed (the conductor's permitted_image_formats)",
        permitted.join(", ")
    )]
    NotPermitted {
        /// What the image holds.
        found: String,
        /// What the conductor permits.
        permitted: Vec<String>,
    },
    /// The image is not what the conductor's `disk_format` says.
    #[error("Security: Expected format was {expected}, but image was actually {found}")]
    NotExpected {
        /// The conductor's `disk_format`.
        expected: String,
        /// What the image holds.
        found: String,
    },
}

/// Names the format of a disk image from its first bytes as Ironic's
/// format inspector does. Compressed streams are named by what they hold,
/// so this is called on decompressed bytes. Formats the agent cannot write
/// at all are refused earlier ([`super::format::detect`]).
pub fn content_format(head: &[u8]) -> &'static str {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(0, b"QFI\xfb") {
        return "qcow2";
    }
    if at(0, b"LUKS\xba\xbe") {
        return "luks";
    }
    if at(0, b"KDMV") {
        return "vmdk";
    }
    if at(0, b"vhdxfile") {
        return "vhdx";
    }
    if at(0, b"conectix") {
        return "vhd";
    }
    if at(0, b"QED\0") {
        return "qed";
    }
    if at(0x40, &[0x7f, 0x10, 0xda, 0xbe]) {
        return "vdi";
    }
    // A protective MBR (type 0xEE in its first entry, boot signature)
    // before a GPT: Ironic's inspector calls the disk `gpt`.
    if at(510, &[0x55, 0xaa]) && head.get(446 + 4) == Some(&0xee) {
        return "gpt";
    }
    // ISO 9660's first volume descriptor at 32 KiB.
    if [0x8001, 0x8801, 0x9001]
        .iter()
        .any(|&off| at(off, b"CD001"))
    {
        return "iso";
    }
    "raw"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protective_mbr() -> Vec<u8> {
        let mut d = vec![0u8; 4096];
        d[446 + 4] = 0xee;
        d[510] = 0x55;
        d[511] = 0xaa;
        d[512..520].copy_from_slice(b"EFI PART");
        d
    }

    #[test]
    fn formats_are_named_as_ironic_names_them() {
        assert_eq!(content_format(b"QFI\xfb\0\0\0\x03"), "qcow2");
        assert_eq!(content_format(&protective_mbr()), "gpt");
        let mut mbr = vec![0u8; 512];
        mbr[446 + 4] = 0x83;
        mbr[510] = 0x55;
        mbr[511] = 0xaa;
        assert_eq!(content_format(&mbr), "raw");
        assert_eq!(content_format(b"LUKS\xba\xbe\0\x01"), "luks");
        let mut iso = vec![0u8; 0x8006];
        iso[0x8001..0x8006].copy_from_slice(b"CD001");
        assert_eq!(content_format(&iso), "iso");
        assert_eq!(content_format(b""), "raw");
        assert_eq!(content_format(&[0u8; 3]), "raw");
    }

    #[test]
    fn the_default_is_ipas() {
        let p = FormatPolicy::default();
        for ok in ["raw", "gpt", "qcow2"] {
            assert_eq!(p.check(ok), Ok(()));
        }
        let e = p.check("luks").unwrap_err().to_string();
        assert!(
            e.contains("Detected image format was luks, but only raw, gpt, qcow2 are allowed"),
            "{e}"
        );
    }

    #[test]
    fn conductor_settings() {
        let permitted = vec!["raw".to_string(), "QCOW2".to_string()];
        let p = FormatPolicy::from_conductor(true, &permitted, Some("qcow2"));
        assert_eq!(p.check("qcow2"), Ok(()));
        let e = p.check("raw").unwrap_err().to_string();
        assert!(
            e.contains("Expected format was qcow2, but image was actually raw"),
            "{e}"
        );
        assert!(p
            .check("gpt")
            .unwrap_err()
            .to_string()
            .contains("only raw, qcow2"));
        // Raw-like claims and `unknown` are not compared, as in IPA.
        for claim in ["raw", "gpt", "unknown"] {
            let p = FormatPolicy::from_conductor(true, &permitted, Some(claim));
            assert_eq!(p.check("qcow2"), Ok(()), "{claim}");
        }
        // Deep inspection disabled: nothing is checked.
        let off = FormatPolicy::from_conductor(false, &permitted, Some("qcow2"));
        assert_eq!(off.check("luks"), Ok(()));
        assert_eq!(off, FormatPolicy::any());
    }
}
