//! The Secure Boot network boot chain written next to the kernel and
//! initramfs: Debian's signed shim (`shimx64.efi`, which UEFI firmware with
//! Microsoft's keys runs) and Debian's signed network GRUB (as
//! `grubx64.efi`, the name shim loads from the directory it came from);
//! on aarch64 `shimaa64.efi` and `grubaa64.efi` from the arm64 packages,
//! and `grub/grub.cfg`, which that GRUB reads from its built-in prefix
//! `/grub` on the TFTP or HTTP server it booted from. GRUB has shim verify
//! the kernel (signed by Debian, trusted through shim's built-in key);
//! the kernel then enforces lockdown and loads only signed modules, which
//! Debian's are.

use std::path::Path;

use anyhow::{Context, Result};

use crate::arch::Arch;

/// Where the signed binaries sit in the unpacked packages, per architecture.
fn sources(arch: Arch) -> (&'static str, &'static str) {
    match arch {
        Arch::X86_64 => (
            "usr/lib/shim/shimx64.efi.signed",
            "usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed",
        ),
        Arch::Aarch64 => (
            "usr/lib/shim/shimaa64.efi.signed",
            "usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed",
        ),
    }
}

/// GRUB's configuration for x86_64 (the QEMU test bed's): see [`grub_cfg_for`].
pub fn grub_cfg(append: &str) -> String {
    grub_cfg_for(Arch::X86_64, append)
}

/// GRUB's configuration: boot the ramdisk at once, `append` added to the
/// kernel arguments (the serial console last: it becomes `/dev/console`,
/// where init and the agent write). Paths are relative to the server root GRUB booted from.
pub fn grub_cfg_for(arch: Arch, append: &str) -> String {
    let (x, console) = (arch.efi_suffix(), arch.serial_console());
    format!(
        "# Deploy ramdisk, Secure Boot network boot: shim{x}.efi -> grub{x}.efi -> this file.\n\
         set timeout=0\n\
         menuentry \"deploy ramdisk\" {{\n\
         \x20   echo \"loading deploy.kernel\"\n\
         \x20   linux /deploy.kernel console=tty0 console={console} panic=-1 {append}\n\
         \x20   echo \"loading deploy.initramfs\"\n\
         \x20   initrd /deploy.initramfs\n\
         }}\n"
    )
}

/// Writes `out/shimx64.efi`, `out/grubx64.efi` and `out/grub/grub.cfg`
/// from the unpacked `shim-signed` and `grub-efi-amd64-signed` in `root`
/// (aarch64: `shimaa64.efi`, `grubaa64.efi` from `grub-efi-arm64-signed`).
pub fn write(out: &Path, root: &Path, arch: Arch, append: &str) -> Result<()> {
    let (shim, grub) = sources(arch);
    let x = arch.efi_suffix();
    for (src, dst) in [
        (shim, format!("shim{x}.efi")),
        (grub, format!("grub{x}.efi")),
    ] {
        let from = root.join(src);
        std::fs::copy(&from, out.join(dst)).with_context(|| {
            format!(
                "copying {} (image-builder/fetch-bootchain.sh unpacks it)",
                from.display()
            )
        })?;
    }
    std::fs::create_dir_all(out.join("grub"))?;
    std::fs::write(out.join("grub/grub.cfg"), grub_cfg_for(arch, append))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_chain_under_the_names_shim_and_grub_look_for() {
        for (arch, shim_name, grub_name, console) in [
            (Arch::X86_64, "shimx64.efi", "grubx64.efi", "console=ttyS0 "),
            (
                Arch::Aarch64,
                "shimaa64.efi",
                "grubaa64.efi",
                "console=ttyAMA0 ",
            ),
        ] {
            let t = tempfile::tempdir().unwrap();
            let root = t.path().join("root");
            let (shim, grub) = sources(arch);
            for p in [shim, grub] {
                std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
                std::fs::write(root.join(p), p).unwrap();
            }
            let out = t.path().join("out");
            std::fs::create_dir_all(&out).unwrap();
            write(&out, &root, arch, "ipa-api-url=http://x").unwrap();
            assert_eq!(std::fs::read_to_string(out.join(shim_name)).unwrap(), shim);
            assert_eq!(std::fs::read_to_string(out.join(grub_name)).unwrap(), grub);
            let cfg = std::fs::read_to_string(out.join("grub/grub.cfg")).unwrap();
            assert!(
                cfg.contains("linux /deploy.kernel ") && cfg.contains(" ipa-api-url=http://x\n")
            );
            assert!(cfg.contains(console) && cfg.contains(shim_name), "{cfg}");
            assert!(cfg.contains("initrd /deploy.initramfs"));
            assert!(write(&out, &t.path().join("none"), arch, "").is_err());
        }
    }
}
