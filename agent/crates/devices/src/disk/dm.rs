//! The device-mapper ioctls the agent needs (`linux/dm-ioctl.h`, interface
//! version 4): create a device, load its table, resume it, remove it. No
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

/// `/dev/<kernel name>` of a device number, from sysfs.
fn node_of((major, minor): (u64, u64)) -> Option<PathBuf> {
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(Path::new("/dev").join(link.file_name()?))
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
    fn device_numbers_decode_as_huge_encode_dev() {
        assert_eq!(decode_dev((254 << 8) | 3), (254, 3));
        assert_eq!(decode_dev((254 << 8) | 0x12 | (0x3 << 20)), (254, 0x312));
    }
}
