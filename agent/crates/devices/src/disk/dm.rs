//! The device-mapper ioctls the agent needs (`linux/dm-ioctl.h`, interface
//! version 4): create a device, load its table, resume it, remove it;
//! replace a live table without failing queued I/O ([`reload`]), read a
//! target's status ([`status`]) and send it a message ([`message`]). No
//! libdevmapper and no udev: the kernel's devtmpfs makes `/dev/dm-N`, and
//! [`create`] makes the `/dev/mapper/NAME` link udev's rules would.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The control device (devtmpfs creates it when dm-mod loads).
pub(crate) const CONTROL: &str = "/dev/mapper/control";

/// `sizeof(struct dm_ioctl)`.
const HEADER: usize = 312;
/// `sizeof(struct dm_target_spec)`.
const SPEC: usize = 40;
const NAME_LEN: usize = 128;
const UUID_LEN: usize = 129;
const TYPE_LEN: usize = 16;
/// The buffer every call uses (tables here are a few hundred bytes).
const BUFFER: usize = 16 * 1024;

const DM_DEV_CREATE: u8 = 3;
const DM_DEV_REMOVE: u8 = 4;
const DM_DEV_SUSPEND: u8 = 6;
const DM_TABLE_LOAD: u8 = 9;
const DM_TABLE_STATUS: u8 = 12;
const DM_TARGET_MSG: u8 = 14;

/// `dm_ioctl.flags`: suspend (else resume) on DEV_SUSPEND.
const DM_SUSPEND_FLAG: u32 = 1 << 1;
/// `dm_ioctl.flags`: the kernel's answer did not fit the buffer.
const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;
/// `dm_ioctl.flags`: suspend without flushing queued I/O (a multipath
/// device keeps what it queues while no path is up).
const DM_NOFLUSH_FLAG: u32 = 1 << 11;

/// One line of a table: `start length type params`, in 512-byte sectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// First sector.
    pub start: u64,
    /// Length in sectors.
    pub length: u64,
    /// Target type (`multipath`, `linear`).
    pub kind: String,
    /// The target's parameters.
    pub params: String,
}

/// Why a device-mapper call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DmError {
    /// The control device cannot be opened (dm-mod not loaded?).
    #[error("opening {CONTROL} (is dm-mod loaded?): {0}")]
    Control(io::Error),
    /// A name, uuid, type or table that does not fit the interface.
    #[error("{0}")]
    Invalid(String),
    /// The kernel refused a call.
    #[error("device-mapper {call} of {name}: {err}")]
    Ioctl {
        /// DEV_CREATE, TABLE_LOAD…
        call: &'static str,
        /// The device's name.
        name: String,
        /// The kernel's error.
        err: io::Error,
    },
}

/// The request buffer of one call: header, then the targets.
fn request(name: &str, uuid: &str, targets: &[Target]) -> Result<Vec<u8>, DmError> {
    if name.is_empty() || name.len() >= NAME_LEN || name.contains('/') {
        return Err(DmError::Invalid(format!(
            "device-mapper name {name:?}: 1 to {} bytes, no '/'",
            NAME_LEN - 1
        )));
    }
    if uuid.len() >= UUID_LEN {
        return Err(DmError::Invalid(format!(
            "device-mapper uuid {uuid:?}: at most {} bytes",
            UUID_LEN - 1
        )));
    }
    let mut b = vec![0u8; HEADER];
    for (i, v) in [4u32, 0, 0].iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    b[16..20].copy_from_slice(&(HEADER as u32).to_ne_bytes()); // data_start
    let count =
        u32::try_from(targets.len()).map_err(|_| DmError::Invalid("too many targets".into()))?;
    b[20..24].copy_from_slice(&count.to_ne_bytes());
    b[48..48 + name.len()].copy_from_slice(name.as_bytes());
    b[176..176 + uuid.len()].copy_from_slice(uuid.as_bytes());
    for t in targets {
        if t.kind.is_empty() || t.kind.len() >= TYPE_LEN || t.params.contains('\0') {
            return Err(DmError::Invalid(format!("device-mapper target {t:?}")));
        }
        // Parameters nul-terminated, the next spec 8-byte aligned.
        let len = (SPEC + t.params.len() + 1).div_ceil(8) * 8;
        let mut spec = vec![0u8; len];
        spec[0..8].copy_from_slice(&t.start.to_ne_bytes());
        spec[8..16].copy_from_slice(&t.length.to_ne_bytes());
        spec[20..24].copy_from_slice(&(len as u32).to_ne_bytes()); // next
        spec[24..24 + t.kind.len()].copy_from_slice(t.kind.as_bytes());
        spec[SPEC..SPEC + t.params.len()].copy_from_slice(t.params.as_bytes());
        b.extend_from_slice(&spec);
    }
    if b.len() > BUFFER {
        return Err(DmError::Invalid(format!(
            "device-mapper table of {name} is {} bytes, more than {BUFFER}",
            b.len()
        )));
    }
    b.resize(BUFFER, 0);
    b[12..16].copy_from_slice(&(BUFFER as u32).to_ne_bytes()); // data_size
    Ok(b)
}

/// The `dev` field the kernel returns (huge_encode_dev) as (major, minor).
fn decode_dev(dev: u64) -> (u64, u64) {
    let major = (dev >> 8) & 0xfff;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    (major, minor)
}

fn control() -> Result<File, DmError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(CONTROL)
        .map_err(DmError::Control)
}

fn call(
    ctl: &File,
    cmd: u8,
    what: &'static str,
    name: &str,
    buf: &mut [u8],
) -> Result<(), DmError> {
    debug_assert_eq!(buf.len(), BUFFER);
    let req = nix::request_code_readwrite!(0xfd, cmd, HEADER);
    // SAFETY: valid fd; the kernel copies the header in, then data_size
    // bytes (the header says BUFFER, `buf`'s length), and writes back at
    // most as many; `buf` outlives the call.
    let r = unsafe { libc::ioctl(ctl.as_raw_fd(), req, buf.as_mut_ptr()) };
    if r < 0 {
        return Err(DmError::Ioctl {
            call: what,
            name: name.to_string(),
            err: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// A device created by [`create`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Created {
    /// `major:minor`.
    pub devno: (u64, u64),
    /// `/dev/dm-N`.
    pub node: PathBuf,
    /// `/dev/mapper/NAME` (a link to `node`).
    pub link: PathBuf,
}

/// Creates device `name` with `uuid` and `targets`, active (loaded and
/// resumed), and its `/dev/mapper/NAME` link. Removed again when a later
/// call fails.
pub(crate) fn create(name: &str, uuid: &str, targets: &[Target]) -> Result<Created, DmError> {
    let ctl = control()?;
    let mut buf = request(name, uuid, &[])?;
    call(&ctl, DM_DEV_CREATE, "DEV_CREATE", name, &mut buf)?;
    let dev = u64::from_ne_bytes(buf[40..48].try_into().expect("8 bytes"));
    let devno = decode_dev(dev);
    let activate = || -> Result<(), DmError> {
        let mut buf = request(name, "", targets)?;
        call(&ctl, DM_TABLE_LOAD, "TABLE_LOAD", name, &mut buf)?;
        // DEV_SUSPEND without DM_SUSPEND_FLAG resumes: the loaded table
        // becomes live.
        let mut buf = request(name, "", &[])?;
        call(&ctl, DM_DEV_SUSPEND, "DEV_SUSPEND (resume)", name, &mut buf)
    };
    if let Err(e) = activate() {
        if let Err(r) = remove(name) {
            tracing::warn!("removing {name} after a failed activation: {r}");
        }
        return Err(e);
    }
    let node = node_of(devno).unwrap_or_else(|| PathBuf::from(format!("/dev/dm-{}", devno.1)));
    let link = Path::new("/dev/mapper").join(name);
    let _ = std::fs::remove_file(&link);
    let target = Path::new("..").join(node.file_name().unwrap_or_default());
    if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
        tracing::warn!(link = %link.display(), "creating the /dev/mapper link: {e}");
    }
    Ok(Created { devno, node, link })
}

/// Removes device `name` and its `/dev/mapper` link.
pub(crate) fn remove(name: &str) -> Result<(), DmError> {
    let ctl = control()?;
    let mut buf = request(name, "", &[])?;
    call(&ctl, DM_DEV_REMOVE, "DEV_REMOVE", name, &mut buf)?;
    let _ = std::fs::remove_file(Path::new("/dev/mapper").join(name));
    Ok(())
}

fn set_flags(buf: &mut [u8], flags: u32) {
    buf[28..32].copy_from_slice(&flags.to_ne_bytes());
}

fn flags(buf: &[u8]) -> u32 {
    u32::from_ne_bytes(buf[28..32].try_into().expect("4 bytes"))
}

/// Replaces the live table of device `name` with `targets` as multipathd
/// does when paths come and go: the new table loaded, the device suspended
/// without flushing (I/O a multipath target queues stays queued), then
/// resumed on the new table, which takes the queued I/O.
pub(crate) fn reload(name: &str, targets: &[Target]) -> Result<(), DmError> {
    let ctl = control()?;
    let mut buf = request(name, "", targets)?;
    call(&ctl, DM_TABLE_LOAD, "TABLE_LOAD", name, &mut buf)?;
    let mut buf = request(name, "", &[])?;
    set_flags(&mut buf, DM_SUSPEND_FLAG | DM_NOFLUSH_FLAG);
    call(
        &ctl,
        DM_DEV_SUSPEND,
        "DEV_SUSPEND (noflush)",
        name,
        &mut buf,
    )?;
    let mut buf = request(name, "", &[])?;
    call(&ctl, DM_DEV_SUSPEND, "DEV_SUSPEND (resume)", name, &mut buf)
}

/// The live table's targets of device `name` with each one's status line
/// (`dmsetup status`) in `params`.
pub(crate) fn status(name: &str) -> Result<Vec<Target>, DmError> {
    let ctl = control()?;
    let mut buf = request(name, "", &[])?;
    call(&ctl, DM_TABLE_STATUS, "TABLE_STATUS", name, &mut buf)?;
    if flags(&buf) & DM_BUFFER_FULL_FLAG != 0 {
        return Err(DmError::Invalid(format!(
            "the status of {name} is longer than {BUFFER} bytes"
        )));
    }
    Ok(decode_status(&buf))
}

/// The targets of a TABLE_STATUS answer: `target_count` specs from
/// `data_start`, each followed by its nul-terminated line, `next` counted
/// from `data_start` (unlike a request's). What does not parse ends the list.
fn decode_status(buf: &[u8]) -> Vec<Target> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(buf.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(buf.get(at..at + 8)?.try_into().ok()?))
    };
    let cstr = |from: usize, max: usize| -> Option<String> {
        let b = buf.get(from..(from + max).min(buf.len()))?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Some(String::from_utf8_lossy(&b[..end]).into_owned())
    };
    let (Some(start), Some(count)) = (u32_at(16), u32_at(20)) else {
        return Vec::new();
    };
    let start = start as usize;
    let mut at = start;
    let mut out = Vec::new();
    for _ in 0..count {
        let (Some(first), Some(length), Some(next), Some(kind), Some(params)) = (
            u64_at(at),
            u64_at(at + 8),
            u32_at(at + 20),
            cstr(at + 24, TYPE_LEN),
            cstr(at + SPEC, BUFFER),
        ) else {
            break;
        };
        out.push(Target {
            start: first,
            length,
            kind,
            params: params.trim().to_string(),
        });
        let next = start + next as usize;
        if next <= at {
            break;
        }
        at = next;
    }
    out
}

/// Sends `message` to the target at sector 0 of device `name` (`dmsetup
/// message NAME 0 MESSAGE`): a multipath target's `fail_if_no_path`,
/// `queue_if_no_path`, `reinstate_path MAJ:MIN`…
pub(crate) fn message(name: &str, message: &str) -> Result<(), DmError> {
    if message.contains('\0') || message.len() + 9 > BUFFER - HEADER {
        return Err(DmError::Invalid(format!(
            "device-mapper message {message:?}"
        )));
    }
    let ctl = control()?;
    let mut buf = request(name, "", &[])?;
    // struct dm_target_msg: the sector, then the nul-terminated text.
    buf[HEADER..HEADER + 8].copy_from_slice(&0u64.to_ne_bytes());
    buf[HEADER + 8..HEADER + 8 + message.len()].copy_from_slice(message.as_bytes());
    call(&ctl, DM_TARGET_MSG, "TARGET_MSG", name, &mut buf)
}

/// `/dev/<kernel name>` of a device number, from sysfs.
fn node_of(devno: (u64, u64)) -> Option<PathBuf> {
    super::kernel_name_of(Path::new("/"), devno).map(|n| Path::new("/dev").join(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn requests_are_laid_out_as_the_kernel_reads_them() {
        let t = [
            Target {
                start: 0,
                length: 2048,
                kind: "multipath".into(),
                params: "0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1".into(),
            },
            Target {
                start: 2048,
                length: 8,
                kind: "linear".into(),
                params: "8:0 0".into(),
            },
        ];
        let b = request("mpatha", "mpath-naa.5000", &t).unwrap();
        assert_eq!(b.len(), BUFFER);
        assert_eq!((u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8)), (4, 0, 0));
        assert_eq!(u32_at(&b, 12), BUFFER as u32);
        assert_eq!(u32_at(&b, 16), HEADER as u32);
        assert_eq!(u32_at(&b, 20), 2);
        assert_eq!(&b[48..55], b"mpatha\0");
        assert_eq!(&b[176..191], b"mpath-naa.5000\0");
        let first = HEADER;
        assert_eq!(
            u64::from_ne_bytes(b[first + 8..first + 16].try_into().unwrap()),
            2048
        );
        let next = u32_at(&b, first + 20) as usize;
        assert_eq!(next % 8, 0);
        assert_eq!(&b[first + 24..first + 34], b"multipath\0");
        let params = &b[first + SPEC..first + next];
        assert!(params.starts_with(b"0 0 1 1 round-robin 0 2 1 8:0 1 8:16 1\0"));
        let second = first + next;
        assert_eq!(
            u64::from_ne_bytes(b[second..second + 8].try_into().unwrap()),
            2048
        );
        assert_eq!(&b[second + 24..second + 31], b"linear\0");
        assert_eq!(&b[second + SPEC..second + SPEC + 6], b"8:0 0\0");
    }

    #[test]
    fn bad_names_and_tables_are_refused() {
        assert!(request("", "", &[]).is_err());
        assert!(request("a/b", "", &[]).is_err());
        assert!(request(&"x".repeat(128), "", &[]).is_err());
        assert!(request("x", &"u".repeat(129), &[]).is_err());
        let bad = Target {
            start: 0,
            length: 1,
            kind: "a-very-long-target-type".into(),
            params: String::new(),
        };
        assert!(request("x", "", &[bad]).is_err());
        let huge = Target {
            start: 0,
            length: 1,
            kind: "linear".into(),
            params: "8:0 0 ".repeat(4000),
        };
        assert!(request("x", "", &[huge]).is_err());
    }

    #[test]
    fn status_answers_decode_with_next_from_the_data_start() {
        // As the kernel's retrieve_status writes it: two targets.
        let mut b = vec![0u8; BUFFER];
        b[16..20].copy_from_slice(&(HEADER as u32).to_ne_bytes());
        b[20..24].copy_from_slice(&2u32.to_ne_bytes());
        let lines = [
            ("multipath", "2 0 0 0 1 1 A 0 2 0 8:0 A 0 8:16 F 1 "),
            ("linear", ""),
        ];
        let mut at = HEADER;
        for (i, (kind, line)) in lines.iter().enumerate() {
            b[at..at + 8].copy_from_slice(&(i as u64 * 100).to_ne_bytes());
            b[at + 8..at + 16].copy_from_slice(&100u64.to_ne_bytes());
            b[at + 24..at + 24 + kind.len()].copy_from_slice(kind.as_bytes());
            b[at + SPEC..at + SPEC + line.len()].copy_from_slice(line.as_bytes());
            let next = (at + SPEC + line.len() + 1).div_ceil(8) * 8;
            b[at + 20..at + 24].copy_from_slice(&((next - HEADER) as u32).to_ne_bytes());
            at = next;
        }
        let t = decode_status(&b);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].kind, "multipath");
        assert_eq!(t[0].params, "2 0 0 0 1 1 A 0 2 0 8:0 A 0 8:16 F 1");
        assert_eq!(
            (t[1].start, t[1].length, t[1].kind.as_str()),
            (100, 100, "linear")
        );
        // A count past what the buffer holds, or garbage: no panic.
        b[20..24].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(decode_status(&b).len() >= 2);
        assert!(decode_status(&[0u8; 10]).is_empty());
    }

    #[test]
    fn device_numbers_decode_as_huge_encode_dev() {
        assert_eq!(decode_dev((254 << 8) | 3), (254, 3));
        assert_eq!(decode_dev((254 << 8) | 0x12 | (0x3 << 20)), (254, 0x312));
    }
}
