//! The Linux IPMI device interface (`ipmi_devintf`, `/dev/ipmi0`): requests
//! to the BMC through the system interface address with
//! `IPMICTL_SEND_COMMAND`, answers read with `IPMICTL_RECEIVE_MSG_TRUNC`
//! after `poll`. Layouts and numbers from `include/uapi/linux/ipmi.h`.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{IpmiError, Transport};

/// `IPMI_SYSTEM_INTERFACE_ADDR_TYPE`.
const SYSTEM_INTERFACE_ADDR_TYPE: i32 = 0x0c;
/// `IPMI_BMC_CHANNEL`.
const BMC_CHANNEL: i16 = 0xf;
/// `IPMI_RESPONSE_RECV_TYPE`.
const RESPONSE_RECV_TYPE: i32 = 1;
/// How long one request may take. The kernel retries KCS/BT/SSIF requests
/// itself and answers with completion code 0xC3 after about 5 s; this is
/// the backstop for a wedged driver.
const TIMEOUT: Duration = Duration::from_secs(10);

/// `struct ipmi_system_interface_addr`.
#[repr(C)]
struct SystemInterfaceAddr {
    addr_type: i32,
    channel: i16,
    lun: u8,
}

/// `struct ipmi_msg`.
#[repr(C)]
struct IpmiMsg {
    netfn: u8,
    cmd: u8,
    data_len: u16,
    data: *mut u8,
}

/// `struct ipmi_req`.
#[repr(C)]
struct IpmiReq {
    addr: *mut u8,
    addr_len: u32,
    msgid: libc::c_long,
    msg: IpmiMsg,
}

/// `struct ipmi_recv`.
#[repr(C)]
struct IpmiRecv {
    recv_type: i32,
    addr: *mut u8,
    addr_len: u32,
    msgid: libc::c_long,
    msg: IpmiMsg,
}

nix::ioctl_read_bad!(
    send_command,
    nix::request_code_read!(b'i', 13, std::mem::size_of::<IpmiReq>()),
    IpmiReq
);
nix::ioctl_readwrite_bad!(
    receive_msg_trunc,
    nix::request_code_readwrite!(b'i', 11, std::mem::size_of::<IpmiRecv>()),
    IpmiRecv
);

/// An open IPMI device.
#[derive(Debug)]
pub(crate) struct Device {
    file: File,
    msgid: libc::c_long,
}

impl Device {
    /// Opens the device read-write (what the ioctls need).
    pub(crate) fn open(path: &Path) -> Result<Self, IpmiError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| {
                let e = crate::lockdown::annotate(e);
                IpmiError::Transport(format!("opening {}: {e}", path.display()))
            })?;
        Ok(Self { file, msgid: 0 })
    }

    fn send(&mut self, netfn: u8, cmd: u8, data: &[u8]) -> Result<libc::c_long, IpmiError> {
        self.msgid += 1;
        let mut addr = SystemInterfaceAddr {
            addr_type: SYSTEM_INTERFACE_ADDR_TYPE,
            channel: BMC_CHANNEL,
            lun: 0,
        };
        let mut body = data.to_vec();
        let mut req = IpmiReq {
            addr: (&mut addr as *mut SystemInterfaceAddr).cast(),
            addr_len: std::mem::size_of::<SystemInterfaceAddr>() as u32,
            msgid: self.msgid,
            msg: IpmiMsg {
                netfn,
                cmd,
                data_len: body.len() as u16,
                data: body.as_mut_ptr(),
            },
        };
        // SAFETY: the fd is an open IPMI device; `req` and the address and
        // data it points to live until the ioctl returns (the kernel copies
        // them during the call).
        unsafe { send_command(self.file.as_raw_fd(), &mut req) }.map_err(|e| {
            let e = crate::lockdown::annotate_errno(e);
            IpmiError::Transport(format!("IPMICTL_SEND_COMMAND: {e}"))
        })?;
        Ok(self.msgid)
    }

    /// Waits for the response to `msgid`, dropping anything else queued
    /// (events, answers to earlier requests that timed out on our side).
    fn receive(&mut self, msgid: libc::c_long) -> Result<Vec<u8>, IpmiError> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IpmiError::Transport(format!(
                    "no answer within {} s",
                    TIMEOUT.as_secs()
                )));
            }
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for an fd we own, count 1.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n == 0 {
                continue;
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(IpmiError::Transport(format!("poll: {e}")));
            }
            let mut addr = [0u8; 64];
            let mut data = [0u8; 256];
            let mut recv = IpmiRecv {
                recv_type: 0,
                addr: addr.as_mut_ptr(),
                addr_len: addr.len() as u32,
                msgid: 0,
                msg: IpmiMsg {
                    netfn: 0,
                    cmd: 0,
                    data_len: data.len() as u16,
                    data: data.as_mut_ptr(),
                },
            };
            // SAFETY: `recv` points at `addr` and `data`, whose lengths it
            // states; both outlive the call. TRUNC cuts oversized answers
            // to those lengths instead of failing.
            match unsafe { receive_msg_trunc(self.file.as_raw_fd(), &mut recv) } {
                Ok(_) => {}
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(IpmiError::Transport(format!(
                        "IPMICTL_RECEIVE_MSG_TRUNC: {}",
                        crate::lockdown::annotate_errno(e)
                    )))
                }
            }
            if recv.recv_type != RESPONSE_RECV_TYPE || recv.msgid != msgid {
                continue;
            }
            let len = usize::from(recv.msg.data_len).min(data.len());
            return Ok(data[..len].to_vec());
        }
    }
}

impl Transport for Device {
    fn request(&mut self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
        let id = self.send(netfn, cmd, data)?;
        self.receive(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // x86_64 values of IPMICTL_SEND_COMMAND / IPMICTL_RECEIVE_MSG_TRUNC
        // as compiled from <linux/ipmi.h>; aarch64 has the same (LP64
        // struct layout, asm-generic ioctl numbering). Other architectures
        // encode ioctl directions differently.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        {
            assert_eq!(std::mem::size_of::<IpmiReq>(), 40);
            assert_eq!(std::mem::size_of::<IpmiRecv>(), 48);
            assert_eq!(
                nix::request_code_read!(b'i', 13, std::mem::size_of::<IpmiReq>()) as u64,
                0x8028_690d
            );
            assert_eq!(
                nix::request_code_readwrite!(b'i', 11, std::mem::size_of::<IpmiRecv>()) as u64,
                0xc030_690b
            );
        }
        assert!(Device::open(Path::new("/nonexistent/ipmi0")).is_err());
    }
}
