//! ATA commands and their SCSI/ATA Translation (SAT) wrapper, ATA
//! PASS-THROUGH(16) (opcode 0x85): the 16-byte CDB for a 28/48-bit ATA
//! command, and the 512-byte data blocks of the security commands (word 0
//! control bits, words 1–16 the password, copied as bytes as hdparm does).

/// IDENTIFY DEVICE.
pub(crate) const IDENTIFY_DEVICE: u8 = 0xec;
/// SECURITY SET PASSWORD.
pub(crate) const SECURITY_SET_PASSWORD: u8 = 0xf1;
/// SECURITY UNLOCK.
pub(crate) const SECURITY_UNLOCK: u8 = 0xf2;
/// SECURITY ERASE PREPARE.
pub(crate) const SECURITY_ERASE_PREPARE: u8 = 0xf3;
/// SECURITY ERASE UNIT.
pub(crate) const SECURITY_ERASE_UNIT: u8 = 0xf4;
/// SECURITY DISABLE PASSWORD.
pub(crate) const SECURITY_DISABLE_PASSWORD: u8 = 0xf6;
/// SMART (the feature register selects the subcommand).
pub(crate) const SMART: u8 = 0xb0;
/// SMART READ DATA.
pub(crate) const SMART_READ_DATA: u16 = 0xd0;
/// SMART EXECUTE OFF-LINE IMMEDIATE.
pub(crate) const SMART_EXECUTE_OFFLINE: u16 = 0xd4;
/// The SMART signature in LBA mid/high (0x4f, 0xc2).
const SMART_LBA: u64 = 0xc2_4f00;

/// How data moves (SAT protocol field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// No data (protocol 3).
    NonData,
    /// PIO data-in, device to host (protocol 4).
    PioIn,
    /// PIO data-out, host to device (protocol 5).
    PioOut,
}

/// One ATA command as the pass-through carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtaCommand {
    /// Command register.
    pub command: u8,
    /// Features register.
    pub features: u16,
    /// Sector count.
    pub count: u16,
    /// LBA.
    pub lba: u64,
    /// Data direction.
    pub protocol: Protocol,
    /// The 512-byte block sent with a PIO data-out command.
    pub data_out: Option<[u8; 512]>,
}

impl AtaCommand {
    /// IDENTIFY DEVICE: one 512-byte block in.
    pub fn identify() -> Self {
        Self::new(IDENTIFY_DEVICE, Protocol::PioIn, None)
    }

    /// SECURITY ERASE PREPARE (no data).
    pub fn erase_prepare() -> Self {
        Self::new(SECURITY_ERASE_PREPARE, Protocol::NonData, None)
    }

    /// A security command carrying the user password (`control` is word 0:
    /// bit 0 = 0 for the user password; for ERASE UNIT bit 1 = enhanced).
    pub fn with_password(command: u8, control: u16, password: &[u8]) -> Self {
        Self::new(
            command,
            Protocol::PioOut,
            Some(password_block(control, password)),
        )
    }

    /// SMART READ DATA: the 512-byte SMART data in.
    pub fn smart_read_data() -> Self {
        Self {
            features: SMART_READ_DATA,
            lba: SMART_LBA,
            ..Self::new(SMART, Protocol::PioIn, None)
        }
    }

    /// SMART EXECUTE OFF-LINE IMMEDIATE with `subcommand` in LBA low (2:
    /// the extended self-test in off-line mode, `smartctl -t long`).
    pub fn smart_execute_offline(subcommand: u8) -> Self {
        Self {
            features: SMART_EXECUTE_OFFLINE,
            lba: SMART_LBA | u64::from(subcommand),
            ..Self::new(SMART, Protocol::NonData, None)
        }
    }

    fn new(command: u8, protocol: Protocol, data_out: Option<[u8; 512]>) -> Self {
        Self {
            command,
            features: 0,
            count: u16::from(protocol != Protocol::NonData),
            lba: 0,
            protocol,
            data_out,
        }
    }

    /// The ATA PASS-THROUGH(16) CDB. T_LENGTH = 2 (the transfer length is
    /// in the count field), BYTE_BLOCK = 1 (in 512-byte blocks), T_DIR from
    /// the protocol, CK_COND = 0.
    pub fn cdb16(&self) -> [u8; 16] {
        let (proto, t_dir, t_len) = match self.protocol {
            Protocol::NonData => (3u8, 0u8, 0u8),
            Protocol::PioIn => (4, 1, 2),
            Protocol::PioOut => (5, 0, 2),
        };
        let byte_block = u8::from(t_len != 0);
        let l = self.lba.to_le_bytes();
        let extend = u8::from(self.lba > 0x0fff_ffff || self.count > 0xff || self.features > 0xff);
        [
            0x85,
            (proto << 1) | extend,
            (t_dir << 3) | (byte_block << 2) | t_len,
            (self.features >> 8) as u8,
            self.features as u8,
            (self.count >> 8) as u8,
            self.count as u8,
            l[3],
            l[0],
            l[4],
            l[1],
            l[5],
            l[2],
            0x40, // DEVICE: LBA mode
            self.command,
            0,
        ]
    }
}

/// Word 0 = `control`, words 1–16 = `password` (at most 32 bytes, zero
/// padded), the rest zero.
pub(crate) fn password_block(control: u16, password: &[u8]) -> [u8; 512] {
    let mut b = [0u8; 512];
    b[..2].copy_from_slice(&control.to_le_bytes());
    let n = password.len().min(32);
    b[2..2 + n].copy_from_slice(&password[..n]);
    b
}
