//! The few block-device ioctls the agent needs, with safe wrappers.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

nix::ioctl_read!(blkgetsize64, 0x12, 114, u64);
nix::ioctl_none!(blkrrpart, 0x12, 95);
nix::ioctl_read_bad!(blksszget, 0x1268, libc::c_int);
nix::ioctl_none!(blkflsbuf, 0x12, 97);

/// Size of a block device in bytes (BLKGETSIZE64).
pub fn size_bytes(f: &File) -> io::Result<u64> {
    let mut size = 0u64;
    // SAFETY: the fd is valid for the lifetime of `f`, and the kernel writes
    // exactly one u64 into `size`, which outlives the call.
    unsafe { blkgetsize64(f.as_raw_fd(), &mut size) }.map_err(io::Error::from)?;
    Ok(size)
}

/// Logical sector size (BLKSSZGET).
pub fn logical_sector_size(f: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: valid fd; the kernel writes one int into `size`.
    unsafe { blksszget(f.as_raw_fd(), &mut size) }.map_err(io::Error::from)?;
    u32::try_from(size).map_err(|_| io::Error::other("negative sector size"))
}

/// Asks the kernel to re-read the partition table (BLKRRPART).
pub fn reread_partitions(f: &File) -> io::Result<()> {
    // SAFETY: valid fd; BLKRRPART takes no argument.
    unsafe { blkrrpart(f.as_raw_fd()) }.map_err(io::Error::from)?;
    Ok(())
}

/// Flushes the device's buffer cache (BLKFLSBUF).
pub fn flush_buffers(f: &File) -> io::Result<()> {
    // SAFETY: valid fd; BLKFLSBUF takes no argument.
    unsafe { blkflsbuf(f.as_raw_fd()) }.map_err(io::Error::from)?;
    Ok(())
}

nix::ioctl_write_ptr_bad!(blkzeroout, nix::request_code_none!(0x12, 127), [u64; 2]);

/// Has the device zero `len` bytes at `offset` (BLKZEROOUT; both 512-aligned).
/// The kernel uses the device's write-zeroes command when it has one.
pub fn zero_out(f: &File, offset: u64, len: u64) -> io::Result<()> {
    let range = [offset, len];
    // SAFETY: valid fd; the kernel reads two u64 from `range`, which outlives the call.
    unsafe { blkzeroout(f.as_raw_fd(), &range) }.map_err(io::Error::from)?;
    Ok(())
}

nix::ioctl_write_ptr_bad!(blkdiscard, nix::request_code_none!(0x12, 119), [u64; 2]);
nix::ioctl_write_ptr_bad!(blksecdiscard, nix::request_code_none!(0x12, 125), [u64; 2]);

/// Discards `len` bytes at `offset` (BLKSECDISCARD when `secure`, else
/// BLKDISCARD; both 512-aligned). Whether discarded blocks read as zeros is
/// up to the device: callers verify.
pub fn discard(f: &File, offset: u64, len: u64, secure: bool) -> io::Result<()> {
    let range = [offset, len];
    // SAFETY: valid fd; the kernel reads two u64 from `range`, which outlives the call.
    let r = unsafe {
        if secure {
            blksecdiscard(f.as_raw_fd(), &range)
        } else {
            blkdiscard(f.as_raw_fd(), &range)
        }
    };
    r.map_err(io::Error::from)?;
    Ok(())
}

/// `struct blkpg_partition` (linux/blkpg.h).
#[repr(C)]
struct BlkpgPartition {
    start: i64,
    length: i64,
    pno: libc::c_int,
    devname: [u8; 64],
    volname: [u8; 64],
}

/// `struct blkpg_ioctl_arg`.
#[repr(C)]
struct BlkpgIoctlArg {
    op: libc::c_int,
    flags: libc::c_int,
    datalen: libc::c_int,
    data: *mut libc::c_void,
}

nix::ioctl_write_ptr_bad!(blkpg, nix::request_code_none!(0x12, 105), BlkpgIoctlArg);

const BLKPG_ADD_PARTITION: libc::c_int = 1;
const BLKPG_DEL_PARTITION: libc::c_int = 2;

fn blkpg_op(f: &File, op: libc::c_int, number: u32, start: u64, len: u64) -> io::Result<()> {
    let mut part = BlkpgPartition {
        start: i64::try_from(start).map_err(|_| io::Error::other("partition start too large"))?,
        length: i64::try_from(len).map_err(|_| io::Error::other("partition length too large"))?,
        pno: libc::c_int::try_from(number)
            .map_err(|_| io::Error::other("partition number too large"))?,
        devname: [0; 64],
        volname: [0; 64],
    };
    let arg = BlkpgIoctlArg {
        op,
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as libc::c_int,
        data: std::ptr::addr_of_mut!(part).cast(),
    };
    // SAFETY: valid fd; the kernel reads `arg` and the `part` it points to,
    // both of which outlive the call.
    unsafe { blkpg(f.as_raw_fd(), &arg) }.map_err(io::Error::from)?;
    Ok(())
}

/// Tells the kernel about partition `number` at `start`, `len` bytes
/// (BLKPG_ADD_PARTITION, what `partx --add` does), for kernels that do not
/// parse the table themselves.
pub fn add_partition(f: &File, number: u32, start: u64, len: u64) -> io::Result<()> {
    blkpg_op(f, BLKPG_ADD_PARTITION, number, start, len)
}

/// Removes the kernel's partition `number` (BLKPG_DEL_PARTITION).
pub fn delete_partition(f: &File, number: u32) -> io::Result<()> {
    blkpg_op(f, BLKPG_DEL_PARTITION, number, 0, 0)
}
