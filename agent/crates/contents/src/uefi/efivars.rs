//! Boot entries in efivarfs, written natively (no efibootmgr): each
//! variable is a file `<Name>-<vendor GUID>` holding 4 bytes of attributes
//! and the data, written in one `write(2)`; efivarfs marks files immutable,
//! so the flag is cleared before a file is replaced or removed. The root
//! directory is a parameter, so tests run on a plain directory.
#![allow(unsafe_code)]

use std::fs;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::loadopt::{self, Partition, VAR_ATTRS};

/// `EFI_GLOBAL_VARIABLE`.
pub const GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";
/// Where the kernel mounts efivarfs.
pub const EFIVARS: &str = "/sys/firmware/efi/efivars";
const FS_IMMUTABLE_FL: libc::c_long = 0x10;

nix::ioctl_read!(fs_ioc_getflags, b'f', 1, libc::c_long);
nix::ioctl_write_ptr!(fs_ioc_setflags, b'f', 2, libc::c_long);

/// The UEFI variables under a root directory.
#[derive(Debug, Clone)]
pub struct EfiVars {
    root: PathBuf,
}

impl EfiVars {
    /// Variables under `root` (normally [`EFIVARS`]).
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(format!("{name}-{GLOBAL}"))
    }

    /// A global variable's data (attributes stripped).
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        let raw = fs::read(self.path(name)).ok()?;
        raw.get(4..).map(<[u8]>::to_vec)
    }

    /// Writes a global variable (non-volatile, boot and runtime access).
    pub fn write(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let path = self.path(name);
        clear_immutable(&path);
        let mut buf = VAR_ATTRS.to_le_bytes().to_vec();
        buf.extend_from_slice(data);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(agent_devices::lockdown::annotate)?;
        f.write_all(&buf).map_err(agent_devices::lockdown::annotate)
    }

    /// Deletes a global variable.
    pub fn remove(&self, name: &str) -> io::Result<()> {
        let path = self.path(name);
        clear_immutable(&path);
        fs::remove_file(path).map_err(agent_devices::lockdown::annotate)
    }

    /// Numbers of the existing `Boot####` variables.
    pub fn boot_numbers(&self) -> Vec<u16> {
        let suffix = format!("-{GLOBAL}");
        let mut out: Vec<u16> = fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let hex = name.strip_prefix("Boot")?.strip_suffix(&suffix)?;
                        (hex.len() == 4).then(|| u16::from_str_radix(hex, 16).ok())?
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    /// `BootOrder` as numbers.
    pub fn boot_order(&self) -> Vec<u16> {
        self.read("BootOrder")
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    }
}

/// A boot entry's number, description and device path (as `efibootmgr -v`
/// prints it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootRecord {
    /// `Boot####` number.
    pub number: u16,
    /// Its description.
    pub description: String,
    /// Its device path as text.
    pub path: String,
}

/// The boot entries as `efibootmgr -v` lists them (`BootCurrent`,
/// `BootOrder`, then `Boot####[*] description\tpath`), for the log bundle.
pub fn listing(vars: &EfiVars) -> String {
    let hex = |n: &u16| format!("{n:04X}");
    let mut out = String::new();
    if let Some(c) = vars.read("BootCurrent").filter(|c| c.len() >= 2) {
        out.push_str(&format!(
            "BootCurrent: {:04X}\n",
            u16::from_le_bytes([c[0], c[1]])
        ));
    }
    let order: Vec<String> = vars.boot_order().iter().map(hex).collect();
    out.push_str(&format!("BootOrder: {}\n", order.join(",")));
    for n in vars.boot_numbers() {
        let Some(opt) = vars.read(&format!("Boot{n:04X}")) else {
            continue;
        };
        let active = opt.first().is_some_and(|a| a & 1 == 1);
        let desc = super::loadopt::description(&opt).unwrap_or_default();
        let path = super::devpath::load_option_path(&opt).unwrap_or_else(|| "(malformed)".into());
        out.push_str(&format!(
            "Boot{n:04X}{} {desc}\t{path}\n",
            if active { "*" } else { " " }
        ));
    }
    out
}

/// The log bundle's `efibootmgr` part (IPA runs `efibootmgr -v`): the boot
/// entries when the machine booted by UEFI, else nothing.
pub fn log_part() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(EFIVARS);
    if !root.is_dir() {
        return Vec::new();
    }
    vec![(
        "efibootmgr".into(),
        listing(&EfiVars::new(root)).into_bytes(),
    )]
}

/// Removes every boot entry whose device path `matches`, and its place in
/// `BootOrder` (IPA's `clean_boot_records`); returns the removed ones.
pub fn clean_boot_records(
    vars: &EfiVars,
    matches: impl Fn(&str) -> bool,
) -> io::Result<Vec<BootRecord>> {
    let mut removed = Vec::new();
    for number in vars.boot_numbers() {
        let name = format!("Boot{number:04X}");
        let Some(option) = vars.read(&name) else {
            continue;
        };
        let Some(path) = super::devpath::load_option_path(&option) else {
            tracing::warn!("{name}: the device path does not parse; entry kept");
            continue;
        };
        if matches(&path) {
            vars.remove(&name)?;
            removed.push(BootRecord {
                number,
                description: loadopt::description(&option).unwrap_or_default(),
                path,
            });
        }
    }
    if !removed.is_empty() {
        let order: Vec<u8> = vars
            .boot_order()
            .into_iter()
            .filter(|n| !removed.iter().any(|r| r.number == *n))
            .flat_map(u16::to_le_bytes)
            .collect();
        vars.write("BootOrder", &order)?;
    }
    Ok(removed)
}

/// Clears efivarfs' immutable flag (a no-op elsewhere).
fn clear_immutable(path: &Path) {
    let Ok(f) = fs::File::open(path) else {
        return;
    };
    let mut flags: libc::c_long = 0;
    // SAFETY: valid fd; the kernel writes at most a long into `flags`.
    if unsafe { fs_ioc_getflags(f.as_raw_fd(), &mut flags) }.is_err() {
        return;
    }
    if flags & FS_IMMUTABLE_FL != 0 {
        let cleared = flags & !FS_IMMUTABLE_FL;
        // SAFETY: valid fd; the kernel reads the flags from `cleared`, which outlives the call.
        let _ = unsafe { fs_ioc_setflags(f.as_raw_fd(), &cleared) };
    }
}

/// Creates the boot entry `label` → `loader` on `part`, first in
/// `BootOrder`; entries with the same label are removed first (IPA's rule).
/// Returns the new entry's number.
pub fn install(vars: &EfiVars, part: &Partition, loader: &str, label: &str) -> io::Result<u16> {
    let mut removed = Vec::new();
    for n in vars.boot_numbers() {
        let name = format!("Boot{n:04X}");
        let same = vars
            .read(&name)
            .and_then(|o| loadopt::description(&o))
            .is_some_and(|d| d == label);
        if same {
            vars.remove(&name)?;
            removed.push(n);
        }
    }
    let used = vars.boot_numbers();
    let number = (0..=u16::MAX)
        .find(|n| !used.contains(n))
        .ok_or_else(|| io::Error::other("no free Boot#### number"))?;
    vars.write(
        &format!("Boot{number:04X}"),
        &loadopt::load_option(label, part, loader),
    )?;
    let mut order = vec![number];
    order.extend(
        vars.boot_order()
            .into_iter()
            .filter(|n| *n != number && !removed.contains(n)),
    );
    let bytes: Vec<u8> = order.iter().flat_map(|n| n.to_le_bytes()).collect();
    vars.write("BootOrder", &bytes)?;
    tracing::info!(
        number,
        label,
        loader,
        "UEFI boot entry written, first in BootOrder"
    );
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part() -> Partition {
        Partition {
            number: 1,
            start_lba: 2048,
            size_lba: 1000,
            guid: [1; 16],
        }
    }

    #[test]
    fn the_listing_reads_like_efibootmgr_v() {
        let dir = tempfile::tempdir().unwrap();
        let vars = EfiVars::new(dir.path());
        vars.write(
            "Boot0003",
            &loadopt::load_option("debian", &part(), r"\EFI\debian\shimx64.efi"),
        )
        .unwrap();
        vars.write("Boot0004", b"\x01\x00").unwrap();
        vars.write("BootOrder", &[3, 0, 4, 0]).unwrap();
        vars.write("BootCurrent", &[3, 0]).unwrap();
        let text = listing(&vars);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "BootCurrent: 0003");
        assert_eq!(lines[1], "BootOrder: 0003,0004");
        assert!(
            lines[2].starts_with("Boot0003* debian\tHD(1,GPT,")
                && lines[2].ends_with(r"File(\EFI\debian\shimx64.efi)"),
            "{text}"
        );
        assert_eq!(lines[3], "Boot0004* \t(malformed)");
    }

    #[test]
    fn clean_boot_records_removes_matching_entries_and_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let vars = EfiVars::new(dir.path());
        let shim = loadopt::load_option("debian", &part(), r"\EFI\debian\shimx64.efi");
        let other = loadopt::load_option("Other", &part(), r"\EFI\other\x.efi");
        vars.write("Boot0000", &shim).unwrap();
        vars.write("Boot0001", &other).unwrap();
        vars.write("Boot0002", b"\x01\x00").unwrap(); // malformed: kept
        vars.write("BootOrder", &[1, 0, 0, 0, 2, 0]).unwrap();
        let removed = clean_boot_records(&vars, |p| p.to_lowercase().contains("shim")).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(
            (removed[0].number, removed[0].description.as_str()),
            (0, "debian")
        );
        assert!(
            removed[0].path.starts_with("HD(1,GPT,"),
            "{}",
            removed[0].path
        );
        assert_eq!(vars.boot_numbers(), [1, 2]);
        assert_eq!(vars.boot_order(), [1, 2]);
        // Nothing matches: BootOrder untouched.
        assert!(clean_boot_records(&vars, |_| false).unwrap().is_empty());
        assert_eq!(vars.boot_order(), [1, 2]);
    }

    #[test]
    fn entry_goes_first_and_stale_ones_with_the_label_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let vars = EfiVars::new(dir.path());
        let other = loadopt::load_option("Other OS", &part(), r"\EFI\other\x.efi");
        vars.write("Boot0000", &other).unwrap();
        vars.write("BootOrder", &[0, 0]).unwrap();
        let raw = fs::read(dir.path().join(format!("Boot0000-{GLOBAL}"))).unwrap();
        assert_eq!(&raw[..4], &[7, 0, 0, 0], "attributes first");

        let n = install(&vars, &part(), r"\EFI\fedora\shimx64.efi", "Fedora").unwrap();
        assert_eq!(n, 1);
        assert_eq!(vars.boot_order(), [1, 0]);
        // Again: the old Fedora entry is replaced, not duplicated.
        let n = install(&vars, &part(), r"\EFI\fedora\shimx64.efi", "Fedora").unwrap();
        assert_eq!(n, 1);
        assert_eq!(vars.boot_numbers(), [0, 1]);
        assert_eq!(vars.boot_order(), [1, 0]);
        let opt = vars.read("Boot0001").unwrap();
        assert_eq!(loadopt::description(&opt).as_deref(), Some("Fedora"));
    }
}
