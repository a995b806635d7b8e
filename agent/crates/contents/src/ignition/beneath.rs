//! File operations confined beneath a directory of a tenant's filesystem:
//! no symlink is followed anywhere in a path (`RESOLVE_NO_SYMLINKS`), no
//! path leaves the directory (`RESOLVE_BENEATH`), and only regular files
//! are read or written. A tenant image whose boot filesystem has
//! `ignition → /somewhere`, `ignition.firstboot → …` or a BLS entry that is
//! a link therefore makes the injection fail, instead of making the agent
//! (root) create or rewrite files outside the image.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

/// A directory, held open, under which paths are resolved.
#[derive(Debug)]
pub(crate) struct Beneath {
    /// The open directory.
    fd: OwnedFd,
    /// Its path, for messages.
    path: PathBuf,
}

/// How every open here resolves: beneath the directory, no links at all.
fn how(flags: OFlag, mode: u32) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
}

/// What an errno means here.
fn explain(e: Errno) -> String {
    match e {
        Errno::ELOOP => "it is (or passes through) a symbolic link, which is not followed".into(),
        Errno::EXDEV => "it leads outside the filesystem's directory".into(),
        Errno::ENOTDIR => {
            "it is not a directory (a symbolic link to one is not followed either)".into()
        }
        other => other.desc().to_string(),
    }
}

impl Beneath {
    /// Opens `path` (which must be a directory and not a link).
    pub(crate) fn open(path: &Path) -> Result<Beneath> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| anyhow::anyhow!("opening {}: {}", path.display(), explain(e)))?;
        Ok(Beneath {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory `rel` beneath this one.
    pub(crate) fn dir(&self, rel: &str) -> Result<Beneath> {
        let path = self.path.join(rel);
        let fd = openat2(&self.fd, rel, how(OFlag::O_DIRECTORY, 0))
            .map_err(|e| anyhow::anyhow!("opening {}: {}", path.display(), explain(e)))?;
        Ok(Beneath { fd, path })
    }

    /// Creates the directory `name` here (mode `mode`) unless something by
    /// that name exists; [`Beneath::dir`] then refuses anything but a
    /// directory.
    pub(crate) fn ensure_dir(&self, name: &str, mode: u32) -> Result<()> {
        self.make_dir(name, mode).map(drop)
    }

    /// Creates the empty regular file `name` unless anything by that name
    /// (a file, a link, anything) exists. Returns whether it was created.
    pub(crate) fn create_if_missing(&self, name: &str, mode: u32) -> Result<bool> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        match openat2(&self.fd, name, how(flags, mode)) {
            Ok(_) => Ok(true),
            Err(Errno::EEXIST) => Ok(false),
            Err(e) => bail!(
                "creating {}: {}",
                self.path.join(name).display(),
                explain(e)
            ),
        }
    }

    /// Opens the regular file `name` for reading and writing (creating it
    /// with `mode` when `create`); anything but a regular file is refused.
    fn open_regular(&self, name: &str, create: bool, mode: u32) -> Result<File> {
        let path = self.path.join(name);
        // O_NONBLOCK: a FIFO planted there must not hang the agent.
        let mut flags = OFlag::O_RDWR | OFlag::O_NONBLOCK;
        if create {
            flags |= OFlag::O_CREAT;
        }
        let fd = openat2(&self.fd, name, how(flags, mode))
            .map_err(|e| anyhow::anyhow!("opening {}: {}", path.display(), explain(e)))?;
        let st = fstat(fd.as_fd()).with_context(|| format!("examining {}", path.display()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            bail!("{} is not a regular file", path.display());
        }
        Ok(File::from(fd))
    }

    /// Replaces the contents of the regular file `name` (created with
    /// `mode` if missing) with `data`, and flushes it.
    pub(crate) fn write_file(&self, name: &str, data: &[u8], mode: u32) -> Result<()> {
        let mut f = self.open_regular(name, true, mode)?;
        f.set_len(0)
            .and_then(|()| f.write_all(data))
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", self.path.join(name).display()))
    }

    /// Rewrites the existing regular file `name` with `edit(contents)`.
    pub(crate) fn edit_file(&self, name: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
        let path = self.path.join(name);
        let mut f = self.open_regular(name, false, 0)?;
        let mut text = String::new();
        f.read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        let new = edit(&text);
        f.seek(SeekFrom::Start(0))
            .and_then(|_| f.set_len(0))
            .and_then(|()| f.write_all(new.as_bytes()))
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Creates the directory `name` here unless it exists; returns whether
    /// it was created (anything else by that name is refused later by
    /// [`Beneath::dir`]).
    pub(crate) fn make_dir(&self, name: &str, mode: u32) -> Result<bool> {
        match mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => Ok(false),
            Err(e) => bail!(
                "creating {}: {}",
                self.path.join(name).display(),
                explain(e)
            ),
        }
    }

    /// Sets this directory's mode.
    pub(crate) fn chmod_self(&self, mode: u32) -> Result<()> {
        nix::sys::stat::fchmod(&self.fd, Mode::from_bits_truncate(mode))
            .map_err(|e| anyhow::anyhow!("chmod {}: {}", self.path.display(), explain(e)))
    }

    /// Sets the mode, owner and group of the regular file `name` (each only
    /// when given).
    pub(crate) fn set_attrs(
        &self,
        name: &str,
        mode: Option<u32>,
        owner: Option<u32>,
        group: Option<u32>,
    ) -> Result<()> {
        let f = self.open_regular(name, false, 0)?;
        let path = self.path.join(name);
        if let Some(m) = mode {
            nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(m))
                .map_err(|e| anyhow::anyhow!("chmod {}: {}", path.display(), explain(e)))?;
        }
        if owner.is_some() || group.is_some() {
            nix::unistd::fchown(
                &f,
                owner.map(nix::unistd::Uid::from_raw),
                group.map(nix::unistd::Gid::from_raw),
            )
            .map_err(|e| anyhow::anyhow!("chown {}: {}", path.display(), explain(e)))?;
        }
        Ok(())
    }

    /// Removes the file (or link) `name` here; a missing one is fine (IPA's
    /// `unlink_without_raise`), a directory is refused.
    pub(crate) fn remove_file(&self, name: &str) -> Result<()> {
        match nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => bail!(
                "removing {}: {}",
                self.path.join(name).display(),
                explain(e)
            ),
        }
    }

    /// The contents of the regular file `name`, opened read-only (no link
    /// followed); refused when larger than `limit` bytes.
    pub(crate) fn read_regular(&self, name: &str, limit: u64) -> Result<Vec<u8>> {
        let path = self.path.join(name);
        let fd = openat2(&self.fd, name, how(OFlag::O_RDONLY | OFlag::O_NONBLOCK, 0))
            .map_err(|e| anyhow::anyhow!("opening {}: {}", path.display(), explain(e)))?;
        let st = fstat(fd.as_fd()).with_context(|| format!("examining {}", path.display()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            bail!("{} is not a regular file", path.display());
        }
        if st.st_size as u64 > limit {
            bail!("{} is larger than {limit} bytes", path.display());
        }
        let mut data = Vec::new();
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut data)
            .with_context(|| format!("reading {}", path.display()))?;
        if data.len() as u64 > limit {
            bail!("{} is larger than {limit} bytes", path.display());
        }
        Ok(data)
    }

    /// The names in this directory, sorted.
    pub(crate) fn names(&self) -> Result<Vec<String>> {
        let dup = self
            .fd
            .try_clone()
            .context("duplicating a directory handle")?;
        let mut dir = nix::dir::Dir::from_fd(dup)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let mut names: Vec<String> = dir
            .iter()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
            .filter(|n| n != "." && n != "..")
            .collect();
        names.sort();
        Ok(names)
    }

    /// The path of `name` here, for messages.
    pub(crate) fn display(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }
}
