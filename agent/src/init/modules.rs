//! Kernel modules without udev or modprobe: parse the running kernel's
//! `modules.alias`, `modules.dep` and `modules.builtin`, match device
//! modaliases (coldplug) against the alias globs, and give the load order of
//! a module's dependency closure (dependencies first, like modprobe).
//!
//! Parsing and ordering are pure functions over text, tested on fixture
//! strings; [`load`] and [`device_modaliases`] touch the system.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A module name normalised the kernel's way (`-` → `_`).
pub fn normalise(name: &str) -> String {
    name.replace('-', "_")
}

/// Module name of a `modules.dep` path (`kernel/drivers/nvme/host/nvme-core.ko.xz` → `nvme_core`).
pub fn name_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    normalise(stem)
}

/// What the module index knows: aliases, dependencies, built-ins.
#[derive(Debug, Default, Clone)]
pub struct ModuleIndex {
    /// `(glob, module)` from `modules.alias`, in file order.
    pub aliases: Vec<(String, String)>,
    /// Module → (its file relative to the modules directory, its direct and
    /// indirect dependencies in `modules.dep` order).
    pub deps: HashMap<String, (String, Vec<String>)>,
    /// Modules compiled into the kernel.
    pub builtin: HashSet<String>,
}

impl ModuleIndex {
    /// Parses the three index files' contents.
    pub fn parse(alias: &str, dep: &str, builtin: &str) -> Self {
        let aliases = alias
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "alias").then_some(())?;
                Some((w.next()?.to_string(), normalise(w.next()?)))
            })
            .collect();
        let deps = dep
            .lines()
            .filter_map(|l| {
                let (path, rest) = l.split_once(':')?;
                let list = rest.split_whitespace().map(String::from).collect();
                Some((name_of(path), (path.to_string(), list)))
            })
            .collect();
        let builtin = builtin.lines().map(name_of).collect();
        Self {
            aliases,
            deps,
            builtin,
        }
    }

    /// Reads the index of `dir` (`/lib/modules/$(uname -r)`); a missing file reads as empty.
    pub fn read(dir: &Path) -> Self {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        Self::parse(
            &read("modules.alias"),
            &read("modules.dep"),
            &read("modules.builtin"),
        )
    }

    /// Modules whose alias glob matches `modalias`, deduplicated, in file order.
    pub fn matching(&self, modalias: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (glob, module) in &self.aliases {
            // The glob's literal head must match first: with every driver
            // of the full image (~20k aliases) this skips nearly all of
            // them cheaply, which counts under TCG.
            let head = glob.find(['*', '?', '[']).unwrap_or(glob.len());
            if !modalias.starts_with(&glob[..head]) {
                continue;
            }
            if !out.contains(module) && glob_match(glob.as_bytes(), modalias.as_bytes()) {
                out.push(module.clone());
            }
        }
        out
    }

    /// Files to load for `module`, dependencies first (each dependency list in
    /// reverse `modules.dep` order, then the module, as modprobe does).
    /// Built-in and unknown modules give nothing.
    pub fn load_order(&self, module: &str) -> Vec<String> {
        let module = normalise(module);
        if self.builtin.contains(&module) {
            return Vec::new();
        }
        let Some((path, deps)) = self.deps.get(&module) else {
            return Vec::new();
        };
        let mut out: Vec<String> = deps.iter().rev().cloned().collect();
        out.push(path.clone());
        out
    }
}

/// `fnmatch(3)` without flags: `*`, `?` and `[...]` (with ranges and `!`/`^`).
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    backtrack = Some((p, i));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class_match(&pat[p..], s[i]) {
                        if matched {
                            p += next;
                            i += 1;
                            continue;
                        }
                    } else if s[i] == b'[' {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        match backtrack {
            Some((bp, bi)) => {
                p = bp + 1;
                i = bi + 1;
                backtrack = Some((bp, bi + 1));
            }
            None => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches one byte against the class at the start of `pat` (`[...]`);
/// returns whether it matched and the class's length, or `None` if unclosed.
fn class_match(pat: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut j = 1;
    let negate = matches!(pat.get(j), Some(b'!' | b'^'));
    if negate {
        j += 1;
    }
    let mut matched = false;
    let mut first = true;
    while j < pat.len() && (first || pat[j] != b']') {
        first = false;
        if j + 2 < pat.len() && pat[j + 1] == b'-' && pat[j + 2] != b']' {
            matched |= pat[j] <= c && c <= pat[j + 2];
            j += 3;
        } else {
            matched |= pat[j] == c;
            j += 1;
        }
    }
    (j < pat.len()).then_some((matched != negate, j + 1))
}

/// Every device modalias under `sys/bus/*/devices/*/modalias`, sorted.
pub fn device_modaliases(sys: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(buses) = std::fs::read_dir(sys.join("bus")) else {
        return out;
    };
    for bus in buses.flatten() {
        let Ok(devices) = std::fs::read_dir(bus.path().join("devices")) else {
            continue;
        };
        for dev in devices.flatten() {
            if let Ok(a) = std::fs::read_to_string(dev.path().join("modalias")) {
                let a = a.trim();
                if !a.is_empty() {
                    out.insert(a.to_string());
                }
            }
        }
    }
    out
}

/// Loads modules by file, remembering what is loaded.
#[derive(Debug)]
pub struct Loader {
    dir: PathBuf,
    index: ModuleIndex,
    loaded: HashSet<String>,
}

impl Loader {
    /// A loader for the modules under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        let index = ModuleIndex::read(&dir);
        Self {
            dir,
            index,
            loaded: HashSet::new(),
        }
    }

    /// The index in use.
    pub fn index(&self) -> &ModuleIndex {
        &self.index
    }

    /// Loads `module` and its dependencies; returns how many files were
    /// newly loaded. Failures are logged, not fatal (one missing driver must
    /// not keep the machine from reaching the conductor).
    pub fn load(&mut self, module: &str) -> usize {
        self.load_with(module, "")
    }

    /// [`Loader::load`] with `options` (`max_bonds=0`) for `module` itself.
    pub fn load_with(&mut self, module: &str, options: &str) -> usize {
        let mut n = 0;
        let want = normalise(module);
        for file in self.index.load_order(module) {
            let name = name_of(&file);
            if !self.loaded.insert(name.clone()) {
                continue;
            }
            let opts = if normalise(&name) == want {
                options
            } else {
                ""
            };
            match finit(&self.dir.join(&file), opts) {
                Ok(()) => n += 1,
                Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => match agent_devices::lockdown::explain(Path::new("/sys"), e as i32) {
                    Some(why) => eprintln!("init: module {name}: {e}: {why}"),
                    None => eprintln!("init: module {name}: {e}"),
                },
            }
        }
        n
    }
}

/// Loads one module file. `.ko.xz` is decompressed here and handed to
/// `init_module(2)` (what kmod does): Debian's 6.1 kernel cannot
/// decompress modules itself, and the image stores them compressed. The
/// kernel checks the signature on the decompressed bytes either way.
/// Plain `.ko` goes through `finit_module(2)`.
fn finit(path: &Path, options: &str) -> nix::Result<()> {
    use nix::kmod::{finit_module, init_module, ModuleInitFlags};
    let io = |e: std::io::Error| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let options = std::ffi::CString::new(options).map_err(|_| nix::errno::Errno::EINVAL)?;
    if path.extension().is_some_and(|e| e == "xz") {
        let file = std::fs::File::open(path).map_err(io)?;
        let image = decompress_xz(file).map_err(io)?;
        return init_module(&image, &options);
    }
    let file = std::fs::File::open(path).map_err(io)?;
    finit_module(&file, &options, ModuleInitFlags::empty())
}

/// The whole of an .xz stream.
fn decompress_xz(r: impl std::io::Read) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    liblzma::read::XzDecoder::new(r).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALIAS: &str = "\
# Aliases extracted from modules themselves.
alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias virtio:d00000002v* virtio_blk
alias pci:v*d*sv*sd*bc01sc08i02* nvme
alias pci:v*d*sv*sd*bc01sc06i01* ahci
alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e
alias fs-ext4 ext4
";
    const DEP: &str = "\
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/drivers/ata/ahci.ko: kernel/drivers/ata/libahci.ko kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko
";
    const BUILTIN: &str = "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n";

    fn index() -> ModuleIndex {
        ModuleIndex::parse(ALIAS, DEP, BUILTIN)
    }

    #[test]
    fn globs_like_fnmatch() {
        assert!(glob_match(b"a*c", b"abbbc"));
        assert!(glob_match(b"a*", b"a"));
        assert!(!glob_match(b"a*d", b"abc"));
        assert!(glob_match(b"x?z", b"xyz"));
        assert!(glob_match(b"v[0-9]x", b"v7x"));
        assert!(!glob_match(b"v[!0-9]x", b"v7x"));
        assert!(glob_match(b"*bc01sc08i02*", b"pci:v00008086bc01sc08i02"));
    }

    #[test]
    fn modalias_matches_the_right_drivers() {
        let ix = index();
        let nvme = "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02";
        assert_eq!(ix.matching(nvme), vec!["nvme"]);
        let vpci = "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00";
        assert_eq!(ix.matching(vpci), vec!["virtio_pci"], "deduplicated");
        assert_eq!(ix.matching("virtio:d00000001v00001AF4"), vec!["virtio_net"]);
        assert!(ix
            .matching("pci:v00001234d00001111sv*bc03sc00i00")
            .is_empty());
        assert_eq!(
            ix.matching("pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00"),
            vec!["e1000e"]
        );
    }

    #[test]
    fn dependencies_load_first_in_modprobe_order() {
        let ix = index();
        assert_eq!(
            ix.load_order("virtio_net"),
            vec![
                "kernel/net/core/failover.ko",
                "kernel/drivers/net/net_failover.ko",
                "kernel/drivers/net/virtio_net.ko"
            ]
        );
        assert_eq!(
            ix.load_order("nvme"),
            vec![
                "kernel/drivers/nvme/host/nvme-core.ko",
                "kernel/drivers/nvme/host/nvme.ko"
            ]
        );
        assert_eq!(
            ix.load_order("nvme-core"),
            vec!["kernel/drivers/nvme/host/nvme-core.ko"]
        );
        assert!(ix.load_order("virtio").is_empty(), "built in");
        assert!(ix.load_order("no_such").is_empty());
    }

    #[test]
    fn xz_modules_decompress_and_bad_ones_fail() {
        use std::io::Write;
        let mut enc = liblzma::write::XzEncoder::new(Vec::new(), 6);
        enc.write_all(b"\x7fELF module").unwrap();
        let xz = enc.finish().unwrap();
        assert_eq!(decompress_xz(&xz[..]).unwrap(), b"\x7fELF module");
        assert!(decompress_xz(&b"not xz"[..]).is_err());
    }

    #[test]
    fn names_are_normalised() {
        assert_eq!(name_of("kernel/a/nvme-core.ko.xz"), "nvme_core");
        assert_eq!(name_of("kernel/a/crc-t10dif.ko"), "crc_t10dif");
    }

    #[test]
    fn modaliases_from_a_sys_tree() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("bus/pci/devices/0000:00:03.0");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("modalias"), "pci:v00001AF4d00001000\n").unwrap();
        std::fs::create_dir_all(t.path().join("bus/cpu/devices/cpu0")).unwrap();
        let found = device_modaliases(t.path());
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            vec!["pci:v00001AF4d00001000"]
        );
    }
}
