//! VLAN interfaces from `ipa-enable-vlan-interfaces` (IPA's syntax: a comma
//! list of `interface.vid`; `all` and bare interface names need LLDP's VLAN
//! list and are not handled yet), created with the 8021q ioctl
//! (SIOCSIFVLAN, ADD_VLAN_CMD) and named `<parent>.<vid>` by the kernel.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;

use anyhow::{bail, Context, Result};
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

/// `struct vlan_ioctl_args` of `<linux/if_vlan.h>`.
#[repr(C)]
struct VlanIoctlArgs {
    cmd: libc::c_int,
    device1: [libc::c_char; 24],
    /// The union `u`; `VID` is its first int.
    u: [libc::c_int; 6],
    vlan_qos: libc::c_short,
}

const ADD_VLAN_CMD: libc::c_int = 0;
const SIOCSIFVLAN: libc::Ioctl = 0x8983;

/// `eth0.100` → (`eth0`, 100); anything else is not an explicit VLAN.
pub fn parse_spec(spec: &str) -> Option<(String, u16)> {
    let (parent, vid) = spec.trim().rsplit_once('.')?;
    let vid: u16 = vid.parse().ok()?;
    (!parent.is_empty() && (1..=4094).contains(&vid)).then(|| (parent.to_string(), vid))
}

/// The explicit VLANs of an `ipa-enable-vlan-interfaces` value.
pub fn parse_list(raw: &str) -> Vec<(String, u16)> {
    raw.split(',').filter_map(parse_spec).collect()
}

/// Creates `<parent>.<vid>` (already existing is fine); returns its name.
pub fn create(parent: &str, vid: u16) -> Result<String> {
    let name = format!("{parent}.{vid}");
    if parent.len() >= 24 || name.len() >= libc::IFNAMSIZ {
        bail!("VLAN interface name {name:?} too long");
    }
    let mut args = VlanIoctlArgs {
        cmd: ADD_VLAN_CMD,
        device1: [0; 24],
        u: [0; 6],
        vlan_qos: 0,
    };
    for (d, s) in args.device1.iter_mut().zip(parent.bytes()) {
        *d = s as libc::c_char;
    }
    args.u[0] = libc::c_int::from(vid);
    let fd = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `args` is a live, fully initialised vlan_ioctl_args, the
    // struct SIOCSIFVLAN expects, borrowed for the call only.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCSIFVLAN, &raw mut args) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(e).with_context(|| format!("creating VLAN {name} (is 8021q loaded?)"));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_spec("eth0.100"), Some(("eth0".into(), 100)));
        assert_eq!(parse_spec("enp1s0f0.4094"), Some(("enp1s0f0".into(), 4094)));
        assert_eq!(parse_spec("eth0.4095"), None, "reserved");
        assert_eq!(parse_spec("eth0"), None);
        assert_eq!(parse_spec("all"), None);
        assert_eq!(parse_spec(".5"), None);
        assert_eq!(
            parse_list("eth0.10, eth1.20,all"),
            vec![("eth0".into(), 10), ("eth1".into(), 20)]
        );
    }
}
