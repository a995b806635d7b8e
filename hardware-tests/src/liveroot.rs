//! A stand-in for the CoreOS live system's root as the agent's container
//! sees it at `/mnt/coreos`, for `install_coreos`'s container form with
//! the real `coreos-installer`: a directory holding this machine's `/usr`
//! and `/etc` (Debian's merged-`/usr` links beside them), its `/sys` and
//! `/proc`, a `/dev` holding only the test's devices ([`LiveRoot::add_device`]), an empty `/tmp`, a `/run` tmpfs that the test's
//! own systemd-udevd takes as its `/run` ([`crate::udevd::Udevd::start_with_run`]:
//! coreos-installer refuses to run without a udev socket, and finds
//! partition labels in its database), and `/opt/tools`
//! with `udevadm` and, if asked, the `coreos-installer` of
//! `ci/install-deps`.
//!
//! `udevadm` there is a shim in front of the unpacked udev package's: it
//! first has the kernel add the partitions of the scope's loop devices
//! (`partx --update`) and makes their nodes, then runs the real one. This machine's kernel does
//! not make a loop device's partitions on `BLKRRPART` (nor at `losetup
//! --partscan`; only `BLKPG` adds them, see `LoopDevice::wait_partition`),
//! which a real disk's does, and coreos-installer re-reads the table and
//! runs `udevadm settle` before it looks for the `boot` partition. The
//! shim stands in for that kernel rescan only; everything else the tool
//! does is its own.
//!
//! Everything is bind-mounted under the directory, which is first made a
//! private mount of its own, so no mount propagates anywhere else; drop
//! unmounts it all (`umount -R`, then lazily if something holds it) and
//! removes the directory only when nothing is mounted under it any more
//! (else it is left behind, with a message: removing it would recurse into
//! this machine's `/usr` and `/dev`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::run;

/// Inside the root, where the tools are (put first on `PATH`).
pub const TOOLS: &str = "/opt/tools";

/// The `udevadm` shim: the scope's loop devices get their partitions from
/// the kernel (`partx --update`) and their nodes in this root's `/dev`,
/// then the real `udevadm` runs.
const SHIM: &str = r#"#!/bin/sh
# hardware-tests/src/liveroot.rs: the kernel rescan this machine skips
for f in /sys/block/loop*/loop/backing_file; do
    case "$(cat "$f" 2>/dev/null)" in
    '@SCOPE@'/*)
        d=${f#/sys/block/}; d=${d%%/*}
        [ -e "/dev/$d" ] && partx --update "/dev/$d" 2>/dev/null
        for p in /sys/block/"$d"/"$d"p*; do
            [ -e "$p/dev" ] || continue
            n=${p##*/}; mm=$(cat "$p/dev")
            [ -e "/dev/$n" ] || mknod "/dev/$n" b "${mm%:*}" "${mm#*:}"
        done ;;
    esac
done
exec @TOOLS@/udevadm.real "$@"
"#;

/// A node at `dst` for the device node `src` (same type and numbers).
fn mknod_like(src: &Path, dst: &Path) -> Result<()> {
    use nix::sys::stat::{mknod, Mode, SFlag};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(src).with_context(|| format!("reading {}", src.display()))?;
    let kind = if m.file_type().is_block_device() {
        SFlag::S_IFBLK
    } else {
        anyhow::ensure!(
            m.file_type().is_char_device(),
            "{} is no device",
            src.display()
        );
        SFlag::S_IFCHR
    };
    mknod(dst, kind, Mode::from_bits_truncate(0o660), m.rdev())
        .with_context(|| format!("making {}", dst.display()))?;
    Ok(())
}

/// The assembled root; unmounted on drop.
#[derive(Debug)]
pub struct LiveRoot {
    dir: Option<tempfile::TempDir>,
    mounted: bool,
}

impl LiveRoot {
    /// Assembles it; `with_installer`: whether `coreos-installer` is
    /// there; `scope`: the directory of the loop devices' backing files
    /// whose partitions the `udevadm` shim adds. Start the udevd with
    /// [`LiveRoot::run_dir`] next.
    pub fn new(with_installer: bool, scope: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("liveroot-").tempdir()?;
        let root = dir.path().to_path_buf();
        let mut me = LiveRoot {
            dir: Some(dir),
            mounted: false,
        };
        let bind = |src: &Path, dst: &Path| -> Result<()> {
            run(Command::new("mount").arg("--bind").arg(src).arg(dst))
                .with_context(|| format!("binding {} at {}", src.display(), dst.display()))
                .map(|_| ())
        };
        bind(&root, &root)?;
        me.mounted = true;
        run(Command::new("mount").arg("--make-private").arg(&root))?;
        for d in ["usr", "etc", "sys", "proc"] {
            let dst = root.join(d);
            std::fs::create_dir(&dst)?;
            bind(&Path::new("/").join(d), &dst)?;
        }
        // Only the test's devices: coreos-installer re-reads the table of
        // every disk it can open (looking for other `boot` filesystems).
        std::fs::create_dir(root.join("dev"))?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0755", "liveroot-dev"])
            .arg(root.join("dev")))?;
        for name in ["null", "zero", "full", "random", "urandom"] {
            mknod_like(&Path::new("/dev").join(name), &root.join("dev").join(name))?;
        }
        for (link, to) in [
            ("bin", "usr/bin"),
            ("sbin", "usr/sbin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ] {
            std::os::unix::fs::symlink(to, root.join(link))?;
        }
        std::fs::create_dir(root.join("tmp"))?;
        std::fs::create_dir(root.join("run"))?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0755", "liveroot-run"])
            .arg(root.join("run")))?;
        let tools = root.join(TOOLS.trim_start_matches('/'));
        std::fs::create_dir_all(&tools)?;
        let udevadm =
            crate::udevd::binary().context("no systemd-udevd (udevadm): run ci/udev/install.sh")?;
        let scope = scope.canonicalize()?;
        let scope = scope.to_str().context("scope path is not UTF-8")?;
        anyhow::ensure!(
            !scope.contains(['\'', '\n']),
            "scope path {scope:?} cannot be quoted"
        );
        std::fs::write(
            tools.join("udevadm"),
            SHIM.replace("@SCOPE@", scope).replace("@TOOLS@", TOOLS),
        )?;
        std::fs::set_permissions(
            tools.join("udevadm"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let mut files = vec![(udevadm, "udevadm.real")];
        if with_installer {
            files.push((
                crate::coreosimage::coreos_installer_dir()?.join("coreos-installer"),
                "coreos-installer",
            ));
        }
        for (src, name) in files {
            std::fs::File::create(tools.join(name))?;
            bind(&src, &tools.join(name))?;
        }
        Ok(me)
    }

    /// Makes `dev` (a block device of this machine) visible in the root's
    /// `/dev` under its name; its partitions follow through the shim.
    pub fn add_device(&self, dev: &Path) -> Result<()> {
        let name = dev.file_name().context("a device path")?;
        mknod_like(dev, &self.path().join("dev").join(name))
    }

    /// Its `/run`, for [`crate::udevd::Udevd::start_with_run`].
    pub fn run_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    /// The root's path (the agent's `host_root`).
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("kept until drop").path()
    }
}

/// Whether anything is mounted at or under `root` (this process's view).
fn mounted_under(root: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let root = root.to_string_lossy();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|mp| mp == root || mp.starts_with(&format!("{root}/")))
    }) || info.is_empty()
}

impl Drop for LiveRoot {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        let root = dir.path().to_path_buf();
        if self.mounted && run(Command::new("umount").arg("-R").arg(&root)).is_err() {
            let _ = run(Command::new("umount").args(["-R", "-l"]).arg(&root));
        }
        if mounted_under(&root) {
            eprintln!(
                "liveroot: {} still has mounts; left in place (not removed)",
                root.display()
            );
            let _ = dir.keep();
        }
    }
}
