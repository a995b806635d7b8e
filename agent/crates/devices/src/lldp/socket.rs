//! A non-blocking `AF_PACKET` socket bound to one interface and one
//! ethertype: the only place the LLDP code needs `unsafe` (socket, bind,
//! setsockopt, recvfrom, send through libc).
//!
//! Instead of promiscuous mode (IPA), the socket joins the LLDP multicast
//! groups (`PACKET_ADD_MEMBERSHIP`): virtio-net and most NICs filter group
//! addresses they were not asked for (ramdisk-notes §6).
#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// linux/if_packet.h
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_MULTICAST: libc::c_ushort = 0;
const PACKET_OUTGOING: u8 = 4;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

/// A raw packet socket on one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens a socket receiving (and sending) frames of `ethertype` on the
    /// interface with index `ifindex`. Needs CAP_NET_RAW.
    pub fn open(ifindex: u32, ethertype: u16) -> io::Result<Self> {
        let proto = ethertype.to_be();
        // SAFETY: plain syscall with constant arguments; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh, valid descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let addr = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as libc::c_ushort,
            sll_protocol: proto,
            sll_ifindex: libc::c_int::try_from(ifindex)
                .map_err(|_| io::Error::other("interface index out of range"))?,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        // SAFETY: `addr` is a valid sockaddr_ll that outlives the call, and
        // the length passed is its size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Asks the interface to deliver frames sent to the group `mac`.
    pub fn join_multicast(&self, ifindex: u32, mac: [u8; 6]) -> io::Result<()> {
        let mut address = [0u8; 8];
        address[..6].copy_from_slice(&mac);
        let mreq = PacketMreq {
            mr_ifindex: libc::c_int::try_from(ifindex)
                .map_err(|_| io::Error::other("interface index out of range"))?,
            mr_type: PACKET_MR_MULTICAST,
            mr_alen: 6,
            mr_address: address,
        };
        // SAFETY: `mreq` matches the kernel's struct packet_mreq layout
        // (repr(C)), lives across the call, and its size is passed.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_ADD_MEMBERSHIP,
                (&mreq as *const PacketMreq).cast::<libc::c_void>(),
                size_of::<PacketMreq>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one frame into `buf`; `Ok(None)` for a frame this host sent
    /// itself. `WouldBlock` when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `buf` and `from` are valid for writes of the lengths given
        // and outlive the call.
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                0,
                (&mut from as *mut libc::sockaddr_ll).cast::<libc::sockaddr>(),
                &mut len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if from.sll_pkttype == PACKET_OUTGOING {
            return Ok(None);
        }
        Ok(Some(n as usize))
    }

    /// Sends one complete Ethernet frame out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of its length during the call.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast::<libc::c_void>(),
                frame.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl PacketSocket {
    /// Registers the socket with the tokio reactor for reading.
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<Self>> {
        // SAFETY: the socket owns its descriptor (an OwnedFd that is never
        // replaced or closed before drop), so `as_raw_fd` returns the same
        // open descriptor for the whole life of the AsyncFd.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}
