//! Which boot loaders an EFI system partition offers (PROTOCOL.md §5.8), looked up
//! case-insensitively as FAT does: a `BOOT<ARCH>.CSV` (UTF-16: loader file,
//! label) in a vendor directory wins; else a vendor's shim, else its grub;
//! else the removable-media path `\EFI\BOOT\BOOT<ARCH>.EFI` as `ironic1`.

use std::fs;
use std::path::{Path, PathBuf};

#[cfg(target_arch = "aarch64")]
const ARCH: &str = "aa64";
#[cfg(not(target_arch = "aarch64"))]
const ARCH: &str = "x64";

/// A loader to register: (label, `\EFI\...` path).
pub type Loader = (String, String);

fn child_ci(dir: &Path, name: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().eq_ignore_ascii_case(name))
        .map(|e| e.path())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Loaders on the ESP mounted at `root`, best first.
pub fn find(root: &Path) -> Vec<Loader> {
    let Some(efi) = child_ci(root, "EFI") else {
        return Vec::new();
    };
    let mut vendors: Vec<PathBuf> = fs::read_dir(&efi)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    vendors.sort();
    vendors.retain(|v| !file_name(v).eq_ignore_ascii_case("BOOT"));
    let efi_name = file_name(&efi);
    let csv_name = format!("BOOT{}.CSV", ARCH.to_uppercase());
    let mut out = Vec::new();
    for v in &vendors {
        let Some(csv) = child_ci(v, &csv_name) else {
            continue;
        };
        if let Some((file, label)) = fs::read(&csv).ok().and_then(|b| parse_csv(&b)) {
            out.push((label, format!(r"\{efi_name}\{}\{file}", file_name(v))));
        }
    }
    if !out.is_empty() {
        return out;
    }
    for stem in ["shim", "grub"] {
        for v in &vendors {
            if let Some(f) = child_ci(v, &format!("{stem}{ARCH}.efi")) {
                return vec![(
                    file_name(v),
                    format!(r"\{efi_name}\{}\{}", file_name(v), file_name(&f)),
                )];
            }
        }
    }
    if let Some(f) = child_ci(&efi, "BOOT")
        .and_then(|b| child_ci(&b, &format!("BOOT{}.EFI", ARCH.to_uppercase())))
    {
        let boot = child_ci(&efi, "BOOT")
            .map(|b| file_name(&b))
            .unwrap_or_default();
        return vec![(
            "ironic1".into(),
            format!(r"\{efi_name}\{boot}\{}", file_name(&f)),
        )];
    }
    Vec::new()
}

/// First line of a UTF-16LE `BOOT*.CSV`: (loader file, label).
fn parse_csv(bytes: &[u8]) -> Option<(String, String)> {
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let text = String::from_utf16_lossy(&units);
    let line = text
        .trim_start_matches('\u{feff}')
        .lines()
        .next()?
        .to_string();
    let mut fields = line.split(',');
    let file = fields.next()?.trim().to_string();
    let label = fields.next()?.trim().to_string();
    (!file.is_empty() && !label.is_empty()).then_some((file, label))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(s: &str) -> Vec<u8> {
        std::iter::once(0xfeff)
            .chain(s.encode_utf16())
            .flat_map(u16::to_le_bytes)
            .collect()
    }

    #[test]
    fn csv_wins_then_shim_then_grub_then_the_removable_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let up = ARCH.to_uppercase();
        fs::create_dir_all(root.join("EFI/BOOT")).unwrap();
        fs::write(root.join(format!("EFI/BOOT/BOOT{up}.EFI")), b"").unwrap();
        assert_eq!(
            find(root),
            [("ironic1".to_string(), format!(r"\EFI\BOOT\BOOT{up}.EFI"))]
        );

        fs::create_dir_all(root.join("EFI/fedora")).unwrap();
        fs::write(root.join(format!("EFI/fedora/grub{ARCH}.efi")), b"").unwrap();
        assert_eq!(find(root)[0].1, format!(r"\EFI\fedora\grub{ARCH}.efi"));
        fs::write(root.join(format!("EFI/fedora/shim{ARCH}.efi")), b"").unwrap();
        assert_eq!(
            find(root),
            [("fedora".to_string(), format!(r"\EFI\fedora\shim{ARCH}.efi"))]
        );

        let csv = utf16(&format!(
            "shim{ARCH}.efi,Fedora,,This is the boot entry for Fedora\r\n"
        ));
        fs::write(root.join(format!("EFI/fedora/BOOT{up}.CSV")), csv).unwrap();
        assert_eq!(
            find(root),
            [("Fedora".to_string(), format!(r"\EFI\fedora\shim{ARCH}.efi"))]
        );
        assert!(find(&root.join("nothing")).is_empty());
    }
}
