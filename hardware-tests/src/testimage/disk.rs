//! Puts the test image together from files: the loaders' configuration,
//! the UEFI loader (grub-mkimage), the FAT ESP (mkfs.vfat, mtools,
//! `syslinux --install`), and the GPT disk around it (sfdisk, gptmbr.bin).
//! See the module header of `testimage` for the layout; the aarch64
//! image takes Debian's signed grub as its loader with `grub.cfg` beside
//! it, and no syslinux.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};

use image_builder::arch::Arch;

use super::{Inputs, IMAGE_SIZE};
use crate::run;

const MIB: u64 = 1 << 20;
/// The ESP starts at 1 MiB (LBA 2048) and ends 1 MiB before the disk's end.
const ESP_START: u64 = MIB;
const ESP_SIZE: u64 = IMAGE_SIZE - 2 * MIB;
/// FAT label the UEFI loader searches for (and the init, to know the disk is there).
pub(super) const ESP_LABEL: &str = "TESTIMAGE";
/// Fixed GUIDs, so the same inputs give the same partition table.
const DISK_GUID: &str = "7E57D15C-0000-4000-8000-000000000001";
const ESP_GUID: &str = "7E57D15C-0000-4000-8000-000000000002";
const ESP_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
const GPTMBR: &str = "/usr/lib/syslinux/mbr/gptmbr.bin";
/// Kernel arguments of the loaders on `arch`. On x86_64, `no_timer_check`:
/// under TCG on a loaded two-core machine the kernel's IO-APIC timer check
/// can miss its ticks and panic ("IO-APIC + timer doesn't work!"), which
/// failed `ironic_raid_ramdisk` once in CI (issue #48).
fn cmdline(arch: Arch) -> String {
    match arch {
        Arch::X86_64 => format!("console={} panic=-1 no_timer_check", arch.serial_console()),
        Arch::Aarch64 => format!("console={} panic=-1", arch.serial_console()),
    }
}
/// mtime given to every file put on the FAT (FAT cannot store 1970).
const FILE_TIME: u64 = 1_577_836_800; // 2020-01-01

fn syslinux_cfg() -> String {
    format!(
        "DEFAULT testimage\nPROMPT 0\nTIMEOUT 0\nLABEL testimage\n  KERNEL /vmlinuz\n  INITRD /initrd.img\n  APPEND {}\n",
        cmdline(Arch::X86_64)
    )
}

fn grub_cfg(arch: Arch) -> String {
    format!(
        "search --no-floppy --label {ESP_LABEL} --set=root\nlinux /vmlinuz {}\ninitrd /initrd.img\nboot\n",
        cmdline(arch)
    )
}

/// Writes `data` to `path` with the fixed mtime.
fn put(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    stamp(path)
}

fn stamp(path: &Path) -> Result<()> {
    File::open(path)?.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(FILE_TIME))?;
    Ok(())
}

/// [`crate::mtools`] with every file time fixed.
fn mtools(tool: &str, esp: &Path) -> Command {
    let mut c = crate::mtools(tool, esp);
    c.env("SOURCE_DATE_EPOCH", FILE_TIME.to_string());
    c
}

/// The UEFI loader: a grub core image (grub-mkimage, whose output has a
/// fixed timestamp) with the few modules it needs and the loader
/// configuration embedded.
fn grub_efi(work: &Path, out: &Path) -> Result<()> {
    let cfg = work.join("grub.cfg");
    put(&cfg, grub_cfg(Arch::X86_64).as_bytes())?;
    run(Command::new("grub-mkimage")
        .args(["-O", "x86_64-efi", "-p", "/EFI/BOOT", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(out)
        .args(["part_gpt", "fat", "search", "search_label", "linux"]))
    .context("grub-mkimage (ci/install-deps installs grub-efi-amd64-bin)")?;
    stamp(out)
}

/// The FAT32 ESP as a file of [`ESP_SIZE`] bytes.
fn esp(work: &Path, inputs: &Inputs, initrd: &[u8]) -> Result<std::path::PathBuf> {
    // The tree to copy, every file and directory with the same mtime.
    let files = work.join("files");
    let boot = files.join("EFI/BOOT");
    std::fs::create_dir_all(&boot)?;
    let kernel = &inputs.kernel.image;
    let vmlinuz = files.join("vmlinuz");
    let bios = inputs.arch == Arch::X86_64;
    let mut top = vec!["EFI", "initrd.img", "vmlinuz"];
    match (&inputs.loader, inputs.arch) {
        (None, Arch::X86_64) => {
            grub_efi(work, &boot.join("BOOTX64.EFI"))?;
            std::fs::copy(kernel, &vmlinuz)
                .with_context(|| format!("copying {}", kernel.display()))?;
        }
        (Some(loader), arch) => {
            let name = format!("BOOT{}.EFI", arch.efi_suffix().to_uppercase());
            let grub_name = format!("grub{}.efi", arch.efi_suffix());
            // Under Secure Boot shim is what the firmware starts; it starts
            // the loader by the name it was built with.
            let placed = match &inputs.shim {
                Some(shim) => [(shim, name), (loader, grub_name)].to_vec(),
                None => [(loader, name)].to_vec(),
            };
            for (from, to) in placed {
                std::fs::copy(from, boot.join(&to))
                    .with_context(|| format!("copying {}", from.display()))?;
                stamp(&boot.join(to))?;
            }
            put(&boot.join("grub.cfg"), grub_cfg(arch).as_bytes())?;
            match &inputs.shim {
                // The signed Image as it is: shim checks its signature.
                Some(_) => put(
                    &vmlinuz,
                    &arch.signed_kernel(kernel)?.with_context(|| {
                        format!("{} is not a signed arm64 Image", kernel.display())
                    })?,
                )?,
                // The arm64 Image gzipped, as the aarch64 ramdisk ships it
                // (GRUB unpacks it).
                None => put(&vmlinuz, &arch.deploy_kernel(kernel)?)?,
            }
        }
        (None, Arch::Aarch64) => bail!("the aarch64 test image needs a ready UEFI loader"),
    }
    stamp(&vmlinuz)?;
    put(&files.join("initrd.img"), initrd)?;
    if bios {
        put(&files.join("syslinux.cfg"), syslinux_cfg().as_bytes())?;
        top.push("syslinux.cfg");
    }
    for d in [boot.as_path(), &files.join("EFI")] {
        stamp(d)?;
    }

    let esp = work.join("esp.img");
    File::create(&esp)?.set_len(ESP_SIZE)?;
    run(Command::new("mkfs.vfat")
        .args(["-F", "32", "-n", ESP_LABEL, "--invariant"])
        .args(["-h", &(ESP_START / 512).to_string()])
        .arg(&esp))
    .context("mkfs.vfat (ci/install-deps installs dosfstools)")?;
    let mut mcopy = mtools("mcopy", &esp);
    mcopy.args(["-s", "-m"]);
    top.sort_unstable();
    for name in top {
        mcopy.arg(files.join(name));
    }
    run(mcopy.arg("::")).context("mcopy (ci/install-deps installs mtools)")?;
    if bios {
        // The mtools installer: ldlinux.sys, ldlinux.c32 and the FAT boot sector.
        run(Command::new("syslinux")
            .env("MTOOLS_SKIP_CHECK", "1")
            .arg("--install")
            .arg(&esp))
        .context("syslinux (ci/install-deps installs it)")?;
    }
    super::fat_times::normalise_root(&esp)?;
    Ok(esp)
}

/// Copies `src` into `dst` at `offset`, skipping all-zero blocks so `dst`
/// stays sparse.
fn copy_sparse(src: &Path, dst: &File, offset: u64) -> Result<()> {
    let src = File::open(src)?;
    let len = src.metadata()?.len();
    let mut buf = vec![0u8; MIB as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(MIB) as usize;
        src.read_exact_at(&mut buf[..n], at)?;
        for (i, block) in buf[..n].chunks(64 << 10).enumerate() {
            if block.iter().any(|b| *b != 0) {
                dst.write_all_at(block, offset + at + (i as u64) * (64 << 10))?;
            }
        }
        at += n as u64;
    }
    Ok(())
}

/// Builds the raw image at `out`, using `work` for intermediate files.
pub(super) fn assemble(work: &Path, inputs: &Inputs, initrd: &[u8], out: &Path) -> Result<()> {
    let esp = esp(work, inputs, initrd)?;
    let _ = std::fs::remove_file(out);
    let disk = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    disk.set_len(IMAGE_SIZE)?;
    let script = format!(
        "label: gpt\nlabel-id: {DISK_GUID}\nfirst-lba: 2048\n\
         start={}, size={}, type={ESP_TYPE}, uuid={ESP_GUID}, name=\"ESP\", attrs=\"LegacyBIOSBootable\"\n",
        ESP_START / 512,
        ESP_SIZE / 512
    );
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(out)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running sfdisk")?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("sfdisk stdin")?
        .write_all(script.as_bytes())?;
    let res = child.wait_with_output()?;
    if !res.status.success() {
        bail!(
            "sfdisk {} failed: {}",
            out.display(),
            String::from_utf8_lossy(&res.stderr)
        );
    }
    let mbr = std::fs::read(GPTMBR)
        .with_context(|| format!("reading {GPTMBR} (ci/install-deps installs syslinux-common)"))?;
    if mbr.len() > 440 {
        bail!(
            "{GPTMBR} is {} bytes, more than the 440 of MBR boot code",
            mbr.len()
        );
    }
    disk.write_all_at(&mbr, 0)?;
    copy_sparse(&esp, &disk, ESP_START)?;
    disk.sync_all()?;
    Ok(())
}
