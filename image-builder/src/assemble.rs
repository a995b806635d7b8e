//! Assembles the initramfs: a fixed, sorted tree (the static agent as
//! `/init`, busybox, the module closure with trimmed indexes, the ramdisk
//! marker, CA bundle) written as newc cpio with mtime 0 and owner 0:0, then
//! zstd -19 single-threaded, so the same inputs give the same bytes.
//!
//! Compression, measured on the full-coverage image (Debian 6.1.0-48, 521
//! modules, 108 firmware files; QEMU TCG `-cpu qemu64,+rdrand -smp 1`,
//! direct kernel boot, guest seconds until `/init` runs):
//!
//! | layout | initramfs | /init at |
//! | --- | --- | --- |
//! | plain files in the cpio, zstd -19 over all (170 MB unpacked) | 29.6 MiB | 20.7 s |
//! | modules `.ko.xz`, firmware `.xz`, zstd -19 over all (44 MiB unpacked) | 32.1 MiB | 2.9 s |
//! | same, zstd -9 | 32.9 MiB | — |
//! | same, zstd -3 | 33.7 MiB | 4.1 / 5.7 s |
//! | same, gzip -9 | 33.7 MiB | 4.1 / 4.4 s |
//! | same, zstd -19 (second run, busy host) | 32.1 MiB | 5.5 / 4.1 s |
//!
//! The time goes into decompressing and copying what the cpio unpacks to,
//! so the modules and blobs stay compressed in it: the agent decompresses
//! the few modules it loads and the kernel the firmware it asks for
//! (Debian's 6.1 kernel cannot decompress modules, but can firmware). Over
//! already-compressed members the outer compressor hardly matters for time
//! (the spread above is the shared host's noise); zstd -19 is the smallest
//! and costs ~80 s per build. Uncompressed, the cpio alone is 43.9 MiB,
//! over the 48 MiB budget with the kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cpio::{xz, Entry, Writer};
use crate::kernel::{self, Kernel};

/// Inputs of one image.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The kernel and its modules.
    pub kernel: Kernel,
    /// The static agent binary.
    pub agent: PathBuf,
    /// busybox (static) for the debug shell, if available.
    pub busybox: Option<PathBuf>,
    /// CA bundle to ship as `/etc/ssl/certs/ca-certificates.crt`.
    pub ca_bundle: Option<PathBuf>,
    /// Directory trees merged in as they are (e.g. the SSH server and its
    /// libraries); files keep their permission bits, symlinks their targets.
    pub extra_roots: Vec<PathBuf>,
    /// Unpacked firmware packages (`lib/firmware/…`): the blobs the
    /// included modules name are copied from there.
    pub firmware_root: Option<PathBuf>,
    /// Which drivers to carry.
    pub profile: kernel::Profile,
    /// An operator's executable hardware managers (manifests and their
    /// executables), put at [`MANAGERS_DIR`].
    pub managers: Option<PathBuf>,
}

/// Where the agent in the ramdisk looks for executable hardware managers
/// (`agent_contents::exec_steps::RAMDISK_DIR`, without the leading `/`).
pub const MANAGERS_DIR: &str = "etc/ironic-python-agent/managers";

/// What the tree holds besides its files.
#[derive(Debug, Default)]
pub struct Report {
    /// Wanted modules that are built in or absent.
    pub missing_modules: Vec<String>,
    /// Module files in the image.
    pub modules: usize,
    /// Per driver class: the kernel's modules against the image's.
    pub classes: Vec<kernel::ClassCoverage>,
    /// The firmware the image's modules name (None without a firmware root).
    pub firmware: Option<crate::firmware::Coverage>,
}

/// Applets linked to busybox in `/bin` (`chroot`: the agent runs the
/// deployed image's own `grub-install` in it, `agent/crates/contents/src/grub.rs`).
const APPLETS: &[&str] = &[
    "sh", "ls", "cat", "cp", "mv", "rm", "mkdir", "mount", "umount", "ip", "ping", "ps", "dmesg",
    "free", "df", "less", "vi", "grep", "sed", "awk", "head", "tail", "lsmod", "wget", "sync",
    "poweroff", "reboot", "hexdump", "dd", "find", "ln", "sleep", "top", "uname", "env", "kill",
    "chmod", "touch", "echo", "tr", "wc", "login", "getty", "chroot",
];

/// The tree as path → entry (sorted by path, parents before children).
pub fn tree(inputs: &Inputs) -> Result<(BTreeMap<String, Entry>, Report)> {
    let mut t = BTreeMap::new();
    let dir = |m| Entry::Dir { mode: m };
    for d in [
        "bin",
        "dev",
        "etc",
        "etc/ssl",
        "etc/ssl/certs",
        "lib",
        "lib/modules",
        "proc",
        "root",
        "run",
        "sbin",
        "sys",
        "tmp",
        "usr",
        "var",
    ] {
        t.insert(d.to_string(), dir(if d == "tmp" { 0o1777 } else { 0o755 }));
    }
    t.insert(
        "dev/console".into(),
        Entry::CharDev {
            mode: 0o600,
            major: 5,
            minor: 1,
        },
    );
    t.insert("init".into(), file(&inputs.agent, 0o755)?);
    t.insert(
        "bin/agent".into(),
        Entry::Symlink {
            target: "/init".into(),
        },
    );
    if let Some(bb) = &inputs.busybox {
        t.insert("bin/busybox".into(), file(bb, 0o755)?);
        for a in APPLETS {
            t.insert(
                format!("bin/{a}"),
                Entry::Symlink {
                    target: "busybox".into(),
                },
            );
        }
    }
    if let Some(ca) = &inputs.ca_bundle {
        t.insert("etc/ssl/certs/ca-certificates.crt".into(), file(ca, 0o644)?);
    }
    let text = |s: String| Entry::File {
        mode: 0o644,
        data: s.into_bytes(),
    };
    t.insert(
        "etc/deploy-ramdisk-release".into(),
        text(format!(
            "deploy-ramdisk agent {} kernel {}\n",
            env!("CARGO_PKG_VERSION"),
            inputs.kernel.version
        )),
    );
    t.insert(
        "etc/hosts".into(),
        text("127.0.0.1 localhost\n::1 localhost\n".into()),
    );
    t.insert(
        "etc/passwd".into(),
        text("root:x:0:0:root:/root:/bin/sh\n".into()),
    );
    t.insert(
        "etc/agent-modules".into(),
        text(kernel::ALWAYS.iter().map(|m| format!("{m}\n")).collect()),
    );

    for root in &inputs.extra_roots {
        merge_tree(&mut t, root, root).with_context(|| format!("adding {}", root.display()))?;
    }
    if let Some(dir) = &inputs.managers {
        add_managers(&mut t, dir)
            .with_context(|| format!("adding managers from {}", dir.display()))?;
    }

    let k = &inputs.kernel;
    let read = |f: &str| std::fs::read_to_string(k.modules.join(f)).unwrap_or_default();
    let dep = read("modules.dep");
    let (files, missing) = kernel::closure(&dep, &kernel::wanted(&dep, inputs.profile));
    let (dep_t, alias_t) = kernel::trim_index(&dep, &read("modules.alias"), &files);
    let base = format!("lib/modules/{}", k.version);
    t.insert(base.clone(), dir(0o755));
    // Modules are stored xz-compressed (`.ko.xz`, the index says so): the
    // agent decompresses the ones it loads (Debian's 6.1 kernel has no
    // in-kernel module decompression), so the unpacked initramfs, which
    // lives in RAM, stays small.
    t.insert(
        format!("{base}/modules.dep"),
        text(kernel::xz_paths(&dep_t)),
    );
    t.insert(format!("{base}/modules.alias"), text(alias_t));
    t.insert(
        format!("{base}/modules.builtin"),
        text(read("modules.builtin")),
    );
    let mut modules = BTreeMap::new();
    for f in &files {
        let mut parent = String::new();
        for comp in Path::new(f).parent().into_iter().flat_map(|p| p.iter()) {
            parent = if parent.is_empty() {
                comp.to_string_lossy().into()
            } else {
                format!("{parent}/{}", comp.to_string_lossy())
            };
            t.insert(format!("{base}/{parent}"), dir(0o755));
        }
        let data =
            std::fs::read(k.modules.join(f)).with_context(|| format!("reading module {f}"))?;
        modules.insert(f.clone(), data);
    }
    let mut report = Report {
        missing_modules: missing,
        modules: files.len(),
        classes: kernel::coverage(&dep, &files),
        firmware: None,
    };
    if let Some(fw) = &inputs.firmware_root {
        let mut wanted = std::collections::BTreeSet::new();
        for data in modules.values() {
            wanted.extend(crate::firmware::names(data));
        }
        let (missing, bytes) = crate::firmware::add(&mut t, fw, &wanted)?;
        let index = crate::firmware::Index::read(fw);
        report.firmware = Some(crate::firmware::classify(
            wanted.len(),
            missing,
            bytes,
            index.as_ref(),
        ));
    }
    for (f, data) in modules {
        t.insert(
            format!("{base}/{f}.xz"),
            Entry::File {
                mode: 0o644,
                data: xz(&data)?,
            },
        );
    }
    Ok((t, report))
}

/// Adds everything under `dir` (relative to `root`) to the tree.
fn merge_tree(t: &mut BTreeMap<String, Entry>, root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = path
            .strip_prefix(root)?
            .to_str()
            .with_context(|| format!("{} is not UTF-8", path.display()))?
            .to_string();
        let meta = std::fs::symlink_metadata(&path)?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?.to_string_lossy().into_owned();
            t.insert(rel, Entry::Symlink { target });
        } else if meta.is_dir() {
            t.insert(rel, Entry::Dir { mode });
            merge_tree(t, root, &path)?;
        } else if meta.is_file() {
            t.insert(rel, file(&path, mode)?);
        }
    }
    Ok(())
}

/// `dir`'s tree at [`MANAGERS_DIR`]; it must hold a manifest (`*.yaml`).
fn add_managers(t: &mut BTreeMap<String, Entry>, dir: &Path) -> Result<()> {
    let mut sub = BTreeMap::new();
    merge_tree(&mut sub, dir, dir)?;
    if !sub.keys().any(|k| !k.contains('/') && k.ends_with(".yaml")) {
        anyhow::bail!("no manifest (*.yaml) in it: see agent/docs/own-steps.md");
    }
    let mut parent = String::new();
    for part in MANAGERS_DIR.split('/') {
        parent = if parent.is_empty() {
            part.to_string()
        } else {
            format!("{parent}/{part}")
        };
        t.entry(parent.clone())
            .or_insert(Entry::Dir { mode: 0o755 });
    }
    for (k, v) in sub {
        t.insert(format!("{MANAGERS_DIR}/{k}"), v);
    }
    Ok(())
}

fn file(p: &Path, mode: u32) -> Result<Entry> {
    let data = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    Ok(Entry::File { mode, data })
}

/// The zstd-compressed newc archive of `tree`.
pub fn initramfs(tree: &BTreeMap<String, Entry>) -> Result<Vec<u8>> {
    let mut w = Writer::new(Vec::new(), 0);
    for (path, entry) in tree {
        w.add(path, entry)?;
    }
    let raw = w.finish()?;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 19)?;
    enc.include_checksum(true)?;
    std::io::copy(&mut raw.as_slice(), &mut enc)?;
    Ok(enc.finish()?)
}

/// The iPXE script; `append` is added to the kernel arguments, after the
/// architecture's serial console ([`crate::arch::Arch::serial_console`]).
pub fn ipxe_script(arch: crate::arch::Arch, append: &str) -> String {
    let console = arch.serial_console();
    format!(
        "#!ipxe\n\
         kernel deploy.kernel console={console} console=tty0 quiet panic=-1 BOOTIF=01-${{net0/mac:hexhyp}} {append}\n\
         initrd deploy.initramfs\n\
         boot\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(root: &Path) -> Inputs {
        let m = root.join("lib/modules/6.1.0-test");
        std::fs::create_dir_all(m.join("kernel/drivers/nvme/host")).unwrap();
        std::fs::write(
            m.join("modules.dep"),
            "kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko\n\
             kernel/drivers/nvme/host/nvme-core.ko:\n",
        )
        .unwrap();
        std::fs::write(
            m.join("modules.alias"),
            "alias pci:v*d*sv*sd*bc01sc08i02* nvme\n",
        )
        .unwrap();
        std::fs::write(m.join("kernel/drivers/nvme/host/nvme.ko"), b"nvme").unwrap();
        std::fs::write(m.join("kernel/drivers/nvme/host/nvme-core.ko"), b"core").unwrap();
        std::fs::create_dir_all(root.join("boot")).unwrap();
        std::fs::write(root.join("boot/vmlinuz-6.1.0-test"), b"kernel").unwrap();
        std::fs::write(root.join("agent"), b"\x7fELF agent").unwrap();
        Inputs {
            kernel: Kernel::find(root).unwrap(),
            agent: root.join("agent"),
            busybox: None,
            ca_bundle: None,
            extra_roots: Vec::new(),
            firmware_root: None,
            profile: kernel::Profile::Vm,
            managers: None,
        }
    }

    #[test]
    fn extra_roots_are_merged_with_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let mut i = inputs(t.path());
        let x = t.path().join("extra");
        std::fs::create_dir_all(x.join("usr/sbin")).unwrap();
        std::fs::create_dir_all(x.join("lib64")).unwrap();
        std::fs::write(x.join("usr/sbin/dropbear"), b"\x7fELF d").unwrap();
        std::fs::set_permissions(
            x.join("usr/sbin/dropbear"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("../lib/ld.so", x.join("lib64/ld.so")).unwrap();
        i.extra_roots.push(x);
        let (m, _) = tree(&i).unwrap();
        assert!(
            matches!(&m["usr/sbin/dropbear"], Entry::File { mode: 0o755, data } if data == b"\x7fELF d")
        );
        assert!(matches!(&m["lib64/ld.so"], Entry::Symlink { target } if target == "../lib/ld.so"));
        assert!(matches!(&m["usr/sbin"], Entry::Dir { .. }));
        assert!(m.contains_key("init"), "the rest is still there");
    }

    #[test]
    fn managers_go_where_the_agent_looks_for_them() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let mut i = inputs(t.path());
        let m = t.path().join("managers");
        std::fs::create_dir_all(m.join("bin")).unwrap();
        std::fs::write(m.join("bin/tool"), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(m.join("bin/tool"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        i.managers = Some(m.clone());
        let e = tree(&i).unwrap_err();
        assert!(format!("{e:#}").contains("no manifest (*.yaml)"), "{e:#}");
        std::fs::write(m.join("acme.yaml"), b"name: acme\n").unwrap();
        let (tree, _) = tree(&i).unwrap();
        for d in [
            "etc",
            "etc/ironic-python-agent",
            "etc/ironic-python-agent/managers",
        ] {
            assert!(matches!(&tree[d], Entry::Dir { .. }), "{d}");
        }
        assert!(matches!(
            &tree["etc/ironic-python-agent/managers/acme.yaml"],
            Entry::File { data, .. } if data == b"name: acme\n"
        ));
        assert!(matches!(
            &tree["etc/ironic-python-agent/managers/bin/tool"],
            Entry::File { mode: 0o750, .. }
        ));
    }

    #[test]
    fn same_inputs_same_bytes_and_expected_members() {
        let t = tempfile::tempdir().unwrap();
        let i = inputs(t.path());
        let (members, report) = tree(&i).unwrap();
        assert!(
            report.missing_modules.contains(&"ahci".to_string()),
            "absent modules are reported"
        );
        for p in [
            "init",
            "dev/console",
            "etc/deploy-ramdisk-release",
            "lib/modules/6.1.0-test/kernel/drivers/nvme/host/nvme-core.ko.xz",
            "lib/modules/6.1.0-test/modules.alias",
        ] {
            assert!(members.contains_key(p), "{p} missing");
        }
        let a = initramfs(&members).unwrap();
        // Touch the inputs: mtimes must not matter.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(t.path().join("agent"), b"\x7fELF agent").unwrap();
        let b = initramfs(&tree(&i).unwrap().0).unwrap();
        assert_eq!(a, b);
        assert_eq!(&a[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd frame");
    }
}
