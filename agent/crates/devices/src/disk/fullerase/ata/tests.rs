//! The security erase against a simulated drive (QEMU's emulated drives
//! have no security feature set): command encoding, IDENTIFY parsing on
//! constructed blocks, and the decisions (frozen, bridges, failures).

use std::cell::RefCell;

use super::cdb::*;
use super::*;

/// A constructed IDENTIFY DEVICE block: model string byte-swapped in words
/// 27–46, word 82 bit 1, the given word 128 and erase times, and a valid
/// word-255 checksum.
fn identify_block(word128: u16, w89: u16, w90: u16) -> [u8; 512] {
    let mut b = [0u8; 512];
    let mut set = |w: usize, v: u16| b[2 * w..2 * w + 2].copy_from_slice(&v.to_le_bytes());
    set(0, 0x0040);
    let model = format!("{:<40}", "FAKE SSD 1TB");
    for (i, pair) in model.as_bytes().chunks(2).enumerate() {
        set(27 + i, u16::from_le_bytes([pair[1], pair[0]]));
    }
    set(82, 0x746b);
    set(89, w89);
    set(90, w90);
    set(128, word128);
    b[510] = 0xa5;
    let sum = b[..511].iter().fold(0u8, |a, x| a.wrapping_add(*x));
    b[511] = 0u8.wrapping_sub(sum);
    b
}

#[derive(Debug, Default)]
struct Drive {
    no_passthrough: bool,
    supported: bool,
    enabled: bool,
    locked: bool,
    frozen: bool,
    enhanced: bool,
    password: Option<Vec<u8>>,
    /// ERASE UNIT fails; with `lock_on_failure` the drive is left locked.
    fail_erase: bool,
    lock_on_failure: bool,
    erased: Option<bool>,
}

#[derive(Debug)]
struct Fake {
    drive: RefCell<Drive>,
    log: RefCell<Vec<u8>>,
}

impl Fake {
    fn new(drive: Drive) -> Self {
        Self {
            drive: RefCell::new(drive),
            log: RefCell::new(Vec::new()),
        }
    }
}

fn pw(cmd: &AtaCommand) -> Vec<u8> {
    let d = cmd.data_out.expect("a password block");
    let p = &d[2..34];
    p[..p.iter().position(|b| *b == 0).unwrap_or(32)].to_vec()
}

impl AtaTransport for Fake {
    fn execute(&self, cmd: &AtaCommand, _timeout: Duration) -> Result<[u8; 512], AtaError> {
        let mut d = self.drive.borrow_mut();
        if d.no_passthrough {
            return Err(AtaError::NoPassThrough("ENOTTY".into()));
        }
        self.log.borrow_mut().push(cmd.command);
        let abort = || Err(AtaError::Failed("ABRT".into()));
        match cmd.command {
            IDENTIFY_DEVICE => {
                let w128 = u16::from(d.supported)
                    | u16::from(d.enabled) << 1
                    | u16::from(d.locked) << 2
                    | u16::from(d.frozen) << 3
                    | u16::from(d.enhanced) << 5;
                return Ok(identify_block(w128, 0x8005, 0x0003));
            }
            _ if d.frozen => return abort(),
            SECURITY_SET_PASSWORD => {
                d.password = Some(pw(cmd));
                d.enabled = true;
            }
            SECURITY_ERASE_PREPARE => {}
            SECURITY_ERASE_UNIT => {
                if d.fail_erase {
                    d.locked |= d.lock_on_failure;
                    return abort();
                }
                if d.password.as_deref() != Some(&pw(cmd)) {
                    return abort();
                }
                d.erased = Some(cmd.data_out.unwrap()[0] & 0x2 != 0);
                d.enabled = false;
                d.locked = false;
                d.password = None;
            }
            SECURITY_UNLOCK => {
                if d.password.as_deref() != Some(&pw(cmd)) {
                    return abort();
                }
                d.locked = false;
            }
            SECURITY_DISABLE_PASSWORD => {
                if d.locked || d.password.as_deref() != Some(&pw(cmd)) {
                    return abort();
                }
                d.enabled = false;
                d.password = None;
            }
            _ => return abort(),
        }
        Ok([0u8; 512])
    }
}

#[test]
fn cdbs_are_ata_pass_through_16() {
    assert_eq!(
        AtaCommand::identify().cdb16(),
        [0x85, 0x08, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x40, 0xec, 0]
    );
    assert_eq!(
        AtaCommand::erase_prepare().cdb16(),
        [0x85, 0x06, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0xf3, 0]
    );
    let erase = AtaCommand::with_password(SECURITY_ERASE_UNIT, 0x2, b"NULL");
    assert_eq!(
        erase.cdb16(),
        [0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x40, 0xf4, 0]
    );
    let data = erase.data_out.unwrap();
    assert_eq!(&data[..6], &[0x02, 0x00, b'N', b'U', b'L', b'L']);
    assert!(data[6..].iter().all(|b| *b == 0));
    // 48-bit fields go to the EXTEND layout: LBA bytes 3,0,4,1,5,2.
    let mut c = AtaCommand::identify();
    c.lba = 0x0605_0403_0201;
    let cdb = c.cdb16();
    assert_eq!(cdb[1] & 1, 1);
    assert_eq!(&cdb[7..13], &[0x04, 0x01, 0x05, 0x02, 0x06, 0x03]);
}

#[test]
fn identify_security_word_and_erase_times() {
    let id = identify::parse(&identify_block(0x0039, 0x8005, 0x00ff)).unwrap();
    assert_eq!(id.model, "FAKE SSD 1TB");
    let s = id.security;
    assert!(s.supported && !s.enabled && !s.locked && s.frozen && s.count_expired);
    assert!(s.enhanced_supported && !s.level_maximum);
    assert_eq!(s.erase_minutes, Some(10), "extended format: 5 × 2 min");
    assert_eq!(s.enhanced_erase_minutes, Some(510), "255 × 2 min");
    let s = identify::parse(&identify_block(0x0106, 0, 0))
        .unwrap()
        .security;
    assert!(!s.supported && s.enabled && s.locked && s.level_maximum);
    assert_eq!(s.erase_minutes, None);
    let mut bad = identify_block(0x0001, 0, 0);
    bad[100] ^= 1;
    assert!(identify::parse(&bad)
        .unwrap_err()
        .to_string()
        .contains("checksum"));
}

#[test]
fn erase_sets_password_prepares_erases_enhanced_and_checks() {
    let t = Fake::new(Drive {
        supported: true,
        enhanced: true,
        ..Drive::default()
    });
    let out = secure_erase(&t, Attachment::Other).unwrap();
    assert_eq!(out, Outcome::Erased { enhanced: true });
    assert_eq!(
        *t.log.borrow(),
        [
            IDENTIFY_DEVICE,
            SECURITY_SET_PASSWORD,
            SECURITY_ERASE_PREPARE,
            SECURITY_ERASE_UNIT,
            IDENTIFY_DEVICE
        ]
    );
    let d = t.drive.borrow();
    assert_eq!(d.erased, Some(true));
    assert!(!d.enabled && !d.locked);

    let t = Fake::new(Drive {
        supported: true,
        ..Drive::default()
    });
    assert_eq!(
        secure_erase(&t, Attachment::Other).unwrap(),
        Outcome::Erased { enhanced: false }
    );
    assert_eq!(t.drive.borrow().erased, Some(false));
}

#[test]
fn refusals_send_no_security_command() {
    let frozen = Fake::new(Drive {
        supported: true,
        frozen: true,
        ..Drive::default()
    });
    let e = secure_erase(&frozen, Attachment::Other).unwrap_err();
    assert!(format!("{e:#}").contains("frozen"), "{e:#}");
    assert_eq!(*frozen.log.borrow(), [IDENTIFY_DEVICE]);

    for (a, word) in [(Attachment::Usb, "USB"), (Attachment::Sas, "SAS")] {
        let t = Fake::new(Drive {
            supported: true,
            ..Drive::default()
        });
        match secure_erase(&t, a).unwrap() {
            Outcome::NotApplicable(why) => assert!(why.contains(word), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(t.log.borrow().is_empty(), "nothing sent through a bridge");
    }

    let unsupported = Fake::new(Drive::default());
    assert!(matches!(
        secure_erase(&unsupported, Attachment::Other).unwrap(),
        Outcome::NotApplicable(_)
    ));
    let no_sgio = Fake::new(Drive {
        no_passthrough: true,
        ..Drive::default()
    });
    assert!(matches!(
        secure_erase(&no_sgio, Attachment::Other).unwrap(),
        Outcome::NotApplicable(_)
    ));
}

#[test]
fn a_failed_erase_never_leaves_the_drive_locked() {
    for lock_on_failure in [false, true] {
        let t = Fake::new(Drive {
            supported: true,
            fail_erase: true,
            lock_on_failure,
            ..Drive::default()
        });
        let e = secure_erase(&t, Attachment::Other).unwrap_err();
        assert!(
            format!("{e:#}").contains("the password was removed again"),
            "{e:#}"
        );
        let d = t.drive.borrow();
        assert!(!d.enabled && !d.locked && d.password.is_none());
        let log = t.log.borrow();
        assert_eq!(log.last(), Some(&SECURITY_DISABLE_PASSWORD));
        assert_eq!(log.contains(&SECURITY_UNLOCK), lock_on_failure);
    }
}

#[test]
fn a_drive_left_enabled_by_us_is_cleared_first_and_a_foreign_password_refused() {
    let ours = Fake::new(Drive {
        supported: true,
        enabled: true,
        locked: true,
        password: Some(PASSWORD.to_vec()),
        ..Drive::default()
    });
    assert_eq!(
        secure_erase(&ours, Attachment::Other).unwrap(),
        Outcome::Erased { enhanced: false }
    );
    let foreign = Fake::new(Drive {
        supported: true,
        enabled: true,
        password: Some(b"secret".to_vec()),
        ..Drive::default()
    });
    let e = secure_erase(&foreign, Attachment::Other).unwrap_err();
    assert!(format!("{e:#}").contains("not ours"), "{e:#}");
    assert!(!foreign.log.borrow().contains(&SECURITY_ERASE_UNIT));
}

#[test]
fn sys_paths_tell_usb_and_sas_bridges() {
    assert_eq!(
        Attachment::from_sys_path(
            "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0"
        ),
        Attachment::Usb
    );
    assert_eq!(
        Attachment::from_sys_path("/sys/devices/pci0000:00/0000:02:00.0/host0/port-0:0/end_device-0:0/target0:0:0/0:0:0:0"),
        Attachment::Sas
    );
    assert_eq!(
        Attachment::from_sys_path(
            "/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0"
        ),
        Attachment::Other
    );
}
