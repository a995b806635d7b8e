//! A NIC driver's private flags through the ethtool ioctls
//! (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GPFLAGS`,
//! `ETHTOOL_SPFLAGS`), as `ethtool --set-priv-flags` sets them: used to stop
//! an Intel NIC's firmware LLDP agent ([`super::intel`]).
#![allow(unsafe_code)]

use anyhow::{bail, Context, Result};

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GPFLAGS: u32 = 0x27;
const ETHTOOL_SPFLAGS: u32 = 0x28;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_PRIV_FLAGS: u32 = 2;
const ETH_GSTRING_LEN: usize = 32;
/// The kernel allows at most 32 private flags (one u32).
const MAX_FLAGS: usize = 32;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn ioctl(name: &str, data: *mut libc::c_void) -> Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ {
        bail!("interface name {name:?} does not fit an ifreq");
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data,
        _pad: [0; 16],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: a datagram socket only to carry the ioctl; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("socket for SIOCETHTOOL");
    }
    // SAFETY: `req` is a valid ifreq whose data points at a buffer the
    // caller sized for the command; the kernel writes within it.
    let r = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut req as *mut IfReq) };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(err).context("SIOCETHTOOL");
    }
    Ok(())
}

/// The driver's private flag names, in bit order.
fn flag_names(name: &str) -> Result<Vec<String>> {
    // ethtool_sset_info: cmd, reserved, sset_mask (a native u64: the low
    // word first on the little-endian machines this agent runs on), then
    // one u32.
    let mut info = [0u32; 5];
    info[0] = ETHTOOL_GSSET_INFO;
    let mask = 1u64 << ETH_SS_PRIV_FLAGS;
    info[2] = mask as u32;
    info[3] = (mask >> 32) as u32;
    ioctl(name, info.as_mut_ptr().cast())?;
    let returned = u64::from(info[2]) | (u64::from(info[3]) << 32);
    if returned & mask == 0 {
        bail!("the driver has no private flags");
    }
    let count = flag_count(info[4])?;
    // ethtool_gstrings: cmd, string_set, len, then len * 32 bytes.
    let mut buf = vec![0u8; 12 + count * ETH_GSTRING_LEN];
    buf[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    buf[4..8].copy_from_slice(&ETH_SS_PRIV_FLAGS.to_ne_bytes());
    buf[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ioctl(name, buf.as_mut_ptr().cast())?;
    Ok(strings(&buf[12..], count))
}

/// The number of private flags the driver reports, refused above the
/// kernel's 32 (one u32 of flag bits): a driver that says more is not
/// talking about the flags `ETHTOOL_GPFLAGS` returns.
fn flag_count(reported: u32) -> Result<usize> {
    let n = usize::try_from(reported).unwrap_or(usize::MAX);
    if n > MAX_FLAGS {
        bail!("the driver reports {reported} private flags, more than the kernel's {MAX_FLAGS}");
    }
    Ok(n)
}

/// Sets private flag `flag` of interface `name` to `value`.
pub(crate) fn set_private_flag(name: &str, flag: &str, value: bool) -> Result<()> {
    let names = flag_names(name)?;
    let Some(bit) = names.iter().position(|n| n == flag) else {
        bail!("no private flag {flag} (the driver has {names:?})");
    };
    let mut v = [ETHTOOL_GPFLAGS, 0u32];
    ioctl(name, v.as_mut_ptr().cast())?;
    let flags = if value {
        v[1] | (1 << bit)
    } else {
        v[1] & !(1 << bit)
    };
    let mut v = [ETHTOOL_SPFLAGS, flags];
    ioctl(name, v.as_mut_ptr().cast())
}

/// `count` NUL-padded 32-byte names from an `ETHTOOL_GSTRINGS` answer.
fn strings(data: &[u8], count: usize) -> Vec<String> {
    data.chunks(32)
        .take(count)
        .map(|c| {
            let end = c.iter().position(|b| *b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_flag_names_are_read_from_gstrings() {
        let mut data = vec![0u8; 64];
        data[..15].copy_from_slice(b"disable-fw-lldp");
        data[32..45].copy_from_slice(b"link-down-on-");
        assert_eq!(strings(&data, 2), ["disable-fw-lldp", "link-down-on-"]);
        assert_eq!(strings(&data, 5).len(), 2, "never past the buffer");
    }

    #[test]
    fn more_than_32_private_flags_are_refused_not_clamped() {
        assert_eq!(flag_count(0).unwrap(), 0);
        assert_eq!(flag_count(32).unwrap(), 32);
        for n in [33, 1000, u32::MAX] {
            let e = flag_count(n).unwrap_err().to_string();
            assert!(e.contains(&n.to_string()) && e.contains("32"), "{e}");
        }
    }
}
