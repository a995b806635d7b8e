//! The SG_IO transport: an ATA command in an ATA PASS-THROUGH(16) CDB sent
//! with the SG_IO ioctl on the block device (libata's SAT layer, or a
//! SAT-capable HBA). Devices without SG_IO (loop, virtio-blk without SCSI,
//! NVMe) fail the ioctl with ENOTTY/EINVAL, and a SCSI disk refuses the
//! pass-through CDB: both are [`AtaError::NoPassThrough`].
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::cdb::{AtaCommand, Protocol};
use super::{AtaError, AtaTransport};

/// `struct sg_io_hdr` (scsi/sg.h).
#[repr(C)]
#[derive(Debug)]
struct SgIoHdr {
    interface_id: libc::c_int,
    dxfer_direction: libc::c_int,
    cmd_len: libc::c_uchar,
    mx_sb_len: libc::c_uchar,
    iovec_count: libc::c_ushort,
    dxfer_len: libc::c_uint,
    dxferp: *mut libc::c_void,
    cmdp: *const libc::c_uchar,
    sbp: *mut libc::c_uchar,
    timeout: libc::c_uint,
    flags: libc::c_uint,
    pack_id: libc::c_int,
    usr_ptr: *mut libc::c_void,
    status: libc::c_uchar,
    masked_status: libc::c_uchar,
    msg_status: libc::c_uchar,
    sb_len_wr: libc::c_uchar,
    host_status: libc::c_ushort,
    driver_status: libc::c_ushort,
    resid: libc::c_int,
    duration: libc::c_uint,
    info: libc::c_uint,
}

const SG_IO: libc::c_ulong = 0x2285;
const SG_DXFER_NONE: libc::c_int = -1;
const SG_DXFER_TO_DEV: libc::c_int = -2;
const SG_DXFER_FROM_DEV: libc::c_int = -3;

/// SG_IO on an open block device.
#[derive(Debug)]
pub(crate) struct SgIo<'a> {
    /// The device.
    pub file: &'a File,
}

impl AtaTransport for SgIo<'_> {
    fn execute(&self, cmd: &AtaCommand, timeout: Duration) -> Result<[u8; 512], AtaError> {
        let cdb = cmd.cdb16();
        let mut data = cmd.data_out.unwrap_or([0u8; 512]);
        let mut sense = [0u8; 32];
        let direction = match cmd.protocol {
            Protocol::NonData => SG_DXFER_NONE,
            Protocol::PioIn => SG_DXFER_FROM_DEV,
            Protocol::PioOut => SG_DXFER_TO_DEV,
        };
        let mut hdr = SgIoHdr {
            interface_id: i32::from(b'S'),
            dxfer_direction: direction,
            cmd_len: cdb.len() as u8,
            mx_sb_len: sense.len() as u8,
            iovec_count: 0,
            dxfer_len: if direction == SG_DXFER_NONE { 0 } else { 512 },
            dxferp: data.as_mut_ptr().cast(),
            cmdp: cdb.as_ptr(),
            sbp: sense.as_mut_ptr(),
            timeout: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            flags: 0,
            pack_id: 0,
            usr_ptr: std::ptr::null_mut(),
            status: 0,
            masked_status: 0,
            msg_status: 0,
            sb_len_wr: 0,
            host_status: 0,
            driver_status: 0,
            resid: 0,
            duration: 0,
            info: 0,
        };
        // SAFETY: valid fd; `hdr` is a correctly laid out sg_io_hdr whose
        // pointers (CDB, 512-byte data buffer, sense buffer) point to live
        // locals of the stated lengths that outlive the call.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), SG_IO as _, &mut hdr) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTTY | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
                    AtaError::NoPassThrough(format!("the device has no SG_IO ({e})"))
                }
                _ => AtaError::Failed(format!("SG_IO: {}", crate::lockdown::annotate(e))),
            });
        }
        if hdr.status != 0 || hdr.host_status != 0 || hdr.driver_status & 0x0f != 0 {
            let n = usize::from(hdr.sb_len_wr).min(sense.len());
            let key = sense_key(&sense[..n]);
            // ILLEGAL REQUEST: the device does not know ATA PASS-THROUGH
            // (a SCSI disk) or the command.
            if key == Some(0x05) && cmd.command == super::cdb::IDENTIFY_DEVICE {
                return Err(AtaError::NoPassThrough(format!(
                    "ATA PASS-THROUGH refused (sense {})",
                    hex(&sense[..n])
                )));
            }
            return Err(AtaError::Failed(format!(
                "ATA command 0x{:02x} failed: SCSI status 0x{:02x}, host 0x{:x}, driver 0x{:x}, sense {}",
                cmd.command,
                hdr.status,
                hdr.host_status,
                hdr.driver_status,
                hex(&sense[..n])
            )));
        }
        Ok(data)
    }
}

/// The sense key of fixed (0x70/0x71) or descriptor (0x72/0x73) sense data.
fn sense_key(s: &[u8]) -> Option<u8> {
    match s.first()? & 0x7f {
        0x70 | 0x71 => s.get(2).map(|k| k & 0x0f),
        0x72 | 0x73 => s.get(1).map(|k| k & 0x0f),
        _ => None,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
