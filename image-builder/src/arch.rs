//! The CPU architecture an image is built for (issue 33): what differs
//! between the x86_64 and the aarch64 deploy ramdisk. The inputs must be
//! of that architecture (the agent and busybox by their ELF machine, the
//! kernel by its boot header: a wrong one gives an image that never boots,
//! so the build refuses it); the serial console the boot scripts name; the
//! file names of the Secure Boot chain; the Metal3 names; and the kernel
//! file itself: Debian's arm64 `vmlinuz` is the uncompressed `Image`
//! (33 MB for 6.1), which alone would take two thirds of the 48 MiB budget,
//! so it is shipped gzipped, as the arm64 kernels IPA's images carry are
//! (GRUB, iPXE and QEMU's `-kernel` unpack gzip; a firmware's own EFI
//! loader would not, and Ironic boots arm64 ramdisks through GRUB or iPXE).

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The architectures image-builder can build for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arch {
    /// x86-64 (Debian amd64).
    #[default]
    X86_64,
    /// 64-bit Arm (Debian arm64).
    Aarch64,
}

impl std::str::FromStr for Arch {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "x86_64" | "amd64" => Ok(Self::X86_64),
            "aarch64" | "arm64" => Ok(Self::Aarch64),
            _ => bail!("unknown architecture {s:?}: x86_64 or aarch64"),
        }
    }
}

/// ELF `e_machine` values (`EM_X86_64`, `EM_AARCH64`).
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

impl Arch {
    /// The name Ironic uses (`cpu_arch`, `deploy_kernel_by_arch` keys).
    pub fn name(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// The serial console of the machines the boot scripts target: the
    /// 16550 UART on x86, the PL011 of Arm servers (SBSA) and QEMU's `virt`.
    pub fn serial_console(self) -> &'static str {
        match self {
            Self::X86_64 => "ttyS0",
            Self::Aarch64 => "ttyAMA0",
        }
    }

    /// The UEFI architecture suffix of loader names (`shimx64.efi`, `grubaa64.efi`).
    pub fn efi_suffix(self) -> &'static str {
        match self {
            Self::X86_64 => "x64",
            Self::Aarch64 => "aa64",
        }
    }

    /// The base name of the Metal3 files: ironic-image's start-up script
    /// serves `ironic-python-agent.kernel` as the default deploy kernel and
    /// each `ironic-python-agent_<arch>.kernel` (with its `.initramfs`)
    /// under `deploy_kernel_by_arch`/`deploy_ramdisk_by_arch`.
    pub fn metal3_name(self) -> &'static str {
        match self {
            Self::X86_64 => "ironic-python-agent",
            Self::Aarch64 => "ironic-python-agent_aarch64",
        }
    }

    fn elf_machine(self) -> u16 {
        match self {
            Self::X86_64 => EM_X86_64,
            Self::Aarch64 => EM_AARCH64,
        }
    }

    /// Fails unless `path` is an ELF executable for this architecture.
    pub fn check_elf(self, path: &Path) -> Result<()> {
        let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if b.len() < 20 || &b[..4] != b"\x7fELF" {
            bail!("{} is not an ELF file", path.display());
        }
        let machine = u16::from_le_bytes([b[18], b[19]]);
        if machine != self.elf_machine() {
            bail!(
                "{} is built for ELF machine {machine}, not {} ({}): build it for this architecture",
                path.display(),
                self.name(),
                self.elf_machine()
            );
        }
        Ok(())
    }

    /// The deploy kernel's bytes from the package's kernel file at `path`,
    /// after checking it is this architecture's: an x86 bzImage (`HdrS`
    /// at 0x202) as it is; an arm64 `Image` (`ARM\x64` at 0x38) gzipped
    /// reproducibly (no name, time 0); an already gzipped arm64 kernel as it is.
    /// The kernel for Secure Boot when [`Arch::deploy_kernel`] is not it:
    /// on aarch64 the signed Image as packaged (Debian signs the
    /// uncompressed arm64 Image, and gzip hides that signature from shim),
    /// `None` when the image carries no signature or is gzipped already;
    /// x86_64's bzImage is signed in place (`None`: deploy.kernel is it).
    pub fn signed_kernel(self, path: &Path) -> Result<Option<Vec<u8>>> {
        if self == Self::X86_64 {
            return Ok(None);
        }
        let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Ok((b.get(0x38..0x3c) == Some(b"ARM\x64") && pe_signed(&b)).then_some(b))
    }

    pub fn deploy_kernel(self, path: &Path) -> Result<Vec<u8>> {
        let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let at = |o: usize, magic: &[u8]| b.get(o..o + magic.len()) == Some(magic);
        let gzip = at(0, b"\x1f\x8b");
        match self {
            Self::X86_64 if at(0x202, b"HdrS") => Ok(b),
            Self::Aarch64 if gzip => Ok(b),
            Self::Aarch64 if at(0x38, b"ARM\x64") => {
                let mut gz = flate2::GzBuilder::new()
                    .mtime(0)
                    .write(Vec::with_capacity(b.len() / 3), flate2::Compression::best());
                gz.write_all(&b)?;
                Ok(gz.finish()?)
            }
            _ => bail!(
                "{} is not a {} kernel (no {} header): give this architecture's kernel package",
                path.display(),
                self.name(),
                match self {
                    Self::X86_64 => "bzImage",
                    Self::Aarch64 => "arm64 Image or gzip",
                }
            ),
        }
    }
}

/// Whether the PE image `b` has an Authenticode certificate table (the
/// security entry of its data directories), as a signed kernel has.
fn pe_signed(b: &[u8]) -> bool {
    let u16_at = |o: usize| b.get(o..o + 2).map(|x| u16::from_le_bytes([x[0], x[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
    };
    let Some(pe) = u32_at(0x3c).map(|o| o as usize) else {
        return false;
    };
    if b.get(pe..pe + 4) != Some(b"PE\0\0") {
        return false;
    }
    let optional = pe + 24;
    // PE32+ (0x20b) has 112 bytes before the data directories, PE32 96.
    let dirs = match u16_at(optional) {
        Some(0x20b) => optional + 112,
        Some(0x10b) => optional + 96,
        _ => return false,
    };
    // Entry 4: the certificate table (offset, size).
    u32_at(dirs + 4 * 8 + 4).is_some_and(|size| size > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn names_per_architecture() {
        let a: Arch = "arm64".parse().unwrap();
        assert_eq!(a, Arch::Aarch64);
        assert_eq!(
            (
                a.name(),
                a.serial_console(),
                a.efi_suffix(),
                a.metal3_name()
            ),
            ("aarch64", "ttyAMA0", "aa64", "ironic-python-agent_aarch64")
        );
        assert_eq!(Arch::default().metal3_name(), "ironic-python-agent");
        let e = "ppc64le".parse::<Arch>().unwrap_err();
        assert!(format!("{e}").contains("ppc64le"));
    }

    #[test]
    fn elf_machine_is_checked() {
        // This test binary is an ELF of the architecture it runs on.
        let me = std::env::current_exe().unwrap();
        let (mine, other) = if cfg!(target_arch = "aarch64") {
            (Arch::Aarch64, Arch::X86_64)
        } else {
            (Arch::X86_64, Arch::Aarch64)
        };
        mine.check_elf(&me).unwrap();
        let e = other.check_elf(&me).unwrap_err();
        assert!(format!("{e}").contains("not"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("text");
        std::fs::write(&text, "#!/bin/sh\n").unwrap();
        assert!(mine.check_elf(&text).is_err());
    }

    #[test]
    fn arm64_image_is_gzipped_reproducibly_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("vmlinuz");
        let mut bytes = vec![0u8; 4096];
        bytes[0x38..0x3c].copy_from_slice(b"ARM\x64");
        std::fs::write(&image, &bytes).unwrap();
        let gz = Arch::Aarch64.deploy_kernel(&image).unwrap();
        assert_eq!(gz, Arch::Aarch64.deploy_kernel(&image).unwrap());
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, bytes);
        // gzip's header: no file name, time 0.
        assert_eq!(gz[3] & 0x08, 0);
        assert_eq!(&gz[4..8], &[0, 0, 0, 0]);
        // Already gzipped: kept.
        let again = dir.path().join("vmlinuz.gz");
        std::fs::write(&again, &gz).unwrap();
        assert_eq!(Arch::Aarch64.deploy_kernel(&again).unwrap(), gz);
        // The wrong architecture's kernel is refused by name.
        let e = Arch::X86_64.deploy_kernel(&image).unwrap_err();
        assert!(format!("{e}").contains("not a x86_64 kernel"), "{e}");
        let mut bz = vec![0u8; 4096];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        std::fs::write(&image, &bz).unwrap();
        assert_eq!(Arch::X86_64.deploy_kernel(&image).unwrap(), bz);
        assert!(Arch::Aarch64.deploy_kernel(&image).is_err());
    }

    #[test]
    fn only_a_signed_arm64_image_is_kept_for_secure_boot() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("vmlinuz");
        // An arm64 Image that is a PE32+ file, as Debian's is.
        let mut bytes = vec![0u8; 4096];
        bytes[0x38..0x3c].copy_from_slice(b"ARM\x64");
        bytes[0x3c..0x40].copy_from_slice(&0x40u32.to_le_bytes());
        bytes[0x40..0x44].copy_from_slice(b"PE\0\0");
        bytes[0x58..0x5a].copy_from_slice(&0x20bu16.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        assert_eq!(Arch::Aarch64.signed_kernel(&image).unwrap(), None);
        // The certificate table's size (data directory 4).
        let entry = 0x58 + 112 + 4 * 8;
        bytes[entry + 4..entry + 8].copy_from_slice(&1472u32.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        assert_eq!(
            Arch::Aarch64.signed_kernel(&image).unwrap().as_deref(),
            Some(&bytes[..])
        );
        assert_eq!(Arch::X86_64.signed_kernel(&image).unwrap(), None);
        // gzipped: the signature is gone.
        let gz = dir.path().join("vmlinuz.gz");
        std::fs::write(&gz, Arch::Aarch64.deploy_kernel(&image).unwrap()).unwrap();
        assert_eq!(Arch::Aarch64.signed_kernel(&gz).unwrap(), None);
        // Cut short: not signed, no panic.
        std::fs::write(&image, &bytes[..0x50]).unwrap();
        assert_eq!(Arch::Aarch64.signed_kernel(&image).unwrap(), None);
    }
}
