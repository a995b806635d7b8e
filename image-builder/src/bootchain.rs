//! The Secure Boot network boot chain written next to the kernel and
//! initramfs: Debian's signed shim (`shimx64.efi`, which UEFI firmware with
//! Microsoft's keys runs) and Debian's signed network GRUB (as
//! `grubx64.efi`, the name shim loads from the directory it came from),
//! and `grub/grub.cfg`, which that GRUB reads from its built-in prefix
//! `/grub` on the TFTP or HTTP server it booted from. GRUB has shim verify
//! the kernel (signed by Debian, trusted through shim's built-in key);
//! the kernel then enforces lockdown and loads only signed modules, which
//! Debian's are.

use std::path::Path;

use anyhow::{Context, Result};

/// Where the signed binaries sit in the unpacked packages.
const SHIM: &str = "usr/lib/shim/shimx64.efi.signed";
const GRUB: &str = "usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed";

/// GRUB's configuration: boot the ramdisk at once, `append` added to the
/// kernel arguments (the serial console last: it becomes `/dev/console`,
/// where init and the agent write). Paths are relative to the server root GRUB booted from.
pub fn grub_cfg(append: &str) -> String {
    format!(
        "# Deploy ramdisk, Secure Boot network boot: shimx64.efi -> grubx64.efi -> this file.\n\
         set timeout=0\n\
         menuentry \"deploy ramdisk\" {{\n\
         \x20   echo \"loading deploy.kernel\"\n\
         \x20   linux /deploy.kernel console=tty0 console=ttyS0 panic=-1 {append}\n\
         \x20   echo \"loading deploy.initramfs\"\n\
         \x20   initrd /deploy.initramfs\n\
         }}\n"
    )
}

/// Writes `out/shimx64.efi`, `out/grubx64.efi` and `out/grub/grub.cfg`
/// from the unpacked `shim-signed` and `grub-efi-amd64-signed` in `root`.
pub fn write(out: &Path, root: &Path, append: &str) -> Result<()> {
    for (src, dst) in [(SHIM, "shimx64.efi"), (GRUB, "grubx64.efi")] {
        let from = root.join(src);
        std::fs::copy(&from, out.join(dst)).with_context(|| {
            format!(
                "copying {} (image-builder/fetch-bootchain.sh unpacks it)",
                from.display()
            )
        })?;
    }
    std::fs::create_dir_all(out.join("grub"))?;
    std::fs::write(out.join("grub/grub.cfg"), grub_cfg(append))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_chain_under_the_names_shim_and_grub_look_for() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        for p in [SHIM, GRUB] {
            std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
            std::fs::write(root.join(p), p).unwrap();
        }
        let out = t.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        write(&out, &root, "ipa-api-url=http://x").unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("shimx64.efi")).unwrap(),
            SHIM
        );
        assert_eq!(
            std::fs::read_to_string(out.join("grubx64.efi")).unwrap(),
            GRUB
        );
        let cfg = std::fs::read_to_string(out.join("grub/grub.cfg")).unwrap();
        assert!(cfg.contains("linux /deploy.kernel ") && cfg.contains(" ipa-api-url=http://x\n"));
        assert!(cfg.contains("initrd /deploy.initramfs"));
        assert!(write(&out, &t.path().join("none"), "").is_err());
    }
}
