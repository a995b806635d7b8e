//! The parts of the 512-byte IDENTIFY DEVICE block that decide an ATA
//! security erase (ACS-3 §7.12.7): word 128 (security status), words 89/90
//! (normal/enhanced erase time), word 82 bit 1 (security feature set),
//! the model string (words 27–46, byte pairs swapped) and the word-255
//! integrity checksum. Pure parsing; tested on constructed blocks.

/// The security state of a drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Security {
    /// The security feature set is supported.
    pub supported: bool,
    /// A user password is set.
    pub enabled: bool,
    /// The drive is locked (needs SECURITY UNLOCK).
    pub locked: bool,
    /// Security commands are refused until the next power cycle.
    pub frozen: bool,
    /// Too many wrong passwords; needs a power cycle.
    pub count_expired: bool,
    /// SECURITY ERASE UNIT supports the enhanced mode.
    pub enhanced_supported: bool,
    /// Master password capability is "maximum".
    pub level_maximum: bool,
    /// Normal erase time in minutes (None: not reported).
    pub erase_minutes: Option<u32>,
    /// Enhanced erase time in minutes (None: not reported).
    pub enhanced_erase_minutes: Option<u32>,
}

/// A parsed IDENTIFY DEVICE block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identify {
    /// Model number (trimmed).
    pub model: String,
    /// Security state.
    pub security: Security,
}

fn word(b: &[u8; 512], w: usize) -> u16 {
    u16::from_le_bytes([b[2 * w], b[2 * w + 1]])
}

/// Erase time of word 89/90: bit 15 set = extended format (bits 14:0),
/// else bits 7:0; in units of 2 minutes; 0 = not reported.
fn erase_time(w: u16) -> Option<u32> {
    let v = if w & 0x8000 != 0 {
        w & 0x7fff
    } else {
        w & 0xff
    };
    (v != 0).then(|| u32::from(v) * 2)
}

/// Why an IDENTIFY DEVICE block is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// The integrity word says the block is corrupt (the byte sum).
    #[error("IDENTIFY DEVICE checksum is wrong (sum 0x{0:02x})")]
    Checksum(u8),
    /// Word 0 bit 15: an ATAPI device.
    #[error("the device answered IDENTIFY as an ATAPI device")]
    Atapi,
}

/// Parses a block; `Err` when the integrity word says it is corrupt or the
/// block is not from an ATA device (word 0 bit 15 set: ATAPI).
pub(crate) fn parse(b: &[u8; 512]) -> Result<Identify, IdentifyError> {
    if b[510] == 0xa5 {
        let sum = b.iter().fold(0u8, |a, x| a.wrapping_add(*x));
        if sum != 0 {
            return Err(IdentifyError::Checksum(sum));
        }
    }
    if word(b, 0) & 0x8000 != 0 {
        return Err(IdentifyError::Atapi);
    }
    let mut model = Vec::with_capacity(40);
    for w in 27..=46 {
        let [lo, hi] = word(b, w).to_le_bytes();
        model.extend([hi, lo]);
    }
    let model = String::from_utf8_lossy(&model).trim().to_string();
    let s = word(b, 128);
    let cmdset = word(b, 82);
    let cmdset_valid = cmdset != 0 && cmdset != 0xffff;
    Ok(Identify {
        model,
        security: Security {
            supported: s & 0x1 != 0 && (!cmdset_valid || cmdset & 0x2 != 0),
            enabled: s & 0x2 != 0,
            locked: s & 0x4 != 0,
            frozen: s & 0x8 != 0,
            count_expired: s & 0x10 != 0,
            enhanced_supported: s & 0x20 != 0,
            level_maximum: s & 0x100 != 0,
            erase_minutes: erase_time(word(b, 89)),
            enhanced_erase_minutes: erase_time(word(b, 90)),
        },
    })
}
