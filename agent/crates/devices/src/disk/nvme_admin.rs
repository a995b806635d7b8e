//! The NVMe admin passthrough (`NVME_IOCTL_ADMIN_CMD`, as `nvme-cli` uses
//! it) and the pages read through it: Identify (controller, namespace) and
//! the SMART / Health Information log page. Page parsing lives with its
//! users (the secure format in `fullerase::nvme`, the health check of the
//! burn-in); the ioctls need real (or QEMU-emulated) NVMe hardware.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

use anyhow::{bail, Context, Result};

/// `struct nvme_passthru_cmd` (linux/nvme_ioctl.h).
#[repr(C)]
#[derive(Debug, Default)]
struct PassthruCmd {
    /// The command.
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    /// The namespace.
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    /// The data buffer's address.
    addr: u64,
    metadata_len: u32,
    /// The data buffer's length.
    data_len: u32,
    /// Command dword 10.
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    /// Timeout in milliseconds (0: the driver's default).
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

nix::ioctl_readwrite!(nvme_admin_cmd, b'N', 0x41, PassthruCmd);
nix::ioctl_none!(nvme_ioctl_id, b'N', 0x40);

const IDENTIFY: u8 = 0x06;
const FORMAT_NVM: u8 = 0x80;
const GET_LOG_PAGE: u8 = 0x02;
/// The SMART / Health Information log page.
const LID_SMART: u32 = 0x02;

/// Runs an admin command; a non-zero NVMe status is an error naming it.
/// Private: each caller here gives a buffer it owns for the call.
fn admin(f: &File, cmd: &mut PassthruCmd) -> Result<()> {
    // SAFETY: valid fd; `cmd` is a correctly laid out nvme_passthru_cmd
    // whose `addr`/`data_len` (if set) describe a live buffer of the caller
    // that outlives the call.
    let status = unsafe { nvme_admin_cmd(f.as_raw_fd(), cmd) }
        .map_err(crate::lockdown::annotate_errno)
        .context("NVMe admin command")?;
    if status != 0 {
        bail!("NVMe status 0x{status:x} for opcode 0x{:02x}", cmd.opcode);
    }
    Ok(())
}

/// An Identify page (`cns` 1: the controller, 0: namespace `nsid`).
pub(crate) fn identify(f: &File, nsid: u32, cns: u32) -> Result<Vec<u8>> {
    let mut page = vec![0u8; 4096];
    let mut cmd = PassthruCmd {
        opcode: IDENTIFY,
        nsid,
        addr: page.as_mut_ptr() as u64,
        data_len: page.len() as u32,
        cdw10: cns,
        ..PassthruCmd::default()
    };
    admin(f, &mut cmd)?;
    Ok(page)
}

/// The controller's SMART / Health Information log page (512 bytes, for
/// all namespaces), as `nvme smart-log` reads it.
pub(crate) fn smart_log(f: &File) -> Result<[u8; 512]> {
    let mut page = [0u8; 512];
    // NUMDL: the number of dwords minus one.
    let numd = (page.len() / 4 - 1) as u32;
    let mut cmd = PassthruCmd {
        opcode: GET_LOG_PAGE,
        nsid: 0xffff_ffff,
        addr: page.as_mut_ptr() as u64,
        data_len: page.len() as u32,
        cdw10: LID_SMART | (numd << 16),
        ..PassthruCmd::default()
    };
    admin(f, &mut cmd).context("reading the SMART / Health log page")?;
    Ok(page)
}

/// The namespace id of the block device `f` (`NVME_IOCTL_ID`).
pub(crate) fn namespace_id(f: &File) -> Result<u32> {
    // SAFETY: valid fd; NVME_IOCTL_ID takes no argument and returns the nsid.
    let nsid = unsafe { nvme_ioctl_id(f.as_raw_fd()) }
        .map_err(crate::lockdown::annotate_errno)
        .context("reading the namespace id")?;
    u32::try_from(nsid).context("negative namespace id")
}

/// Format NVM of namespace `nsid` with `cdw10` (LBA format, protection,
/// secure erase setting), waiting up to `timeout_ms`.
pub(crate) fn format_nvm(f: &File, nsid: u32, cdw10: u32, timeout_ms: u32) -> Result<()> {
    let mut cmd = PassthruCmd {
        opcode: FORMAT_NVM,
        nsid,
        cdw10,
        timeout_ms,
        ..PassthruCmd::default()
    };
    admin(f, &mut cmd)
}
