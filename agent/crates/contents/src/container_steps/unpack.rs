//! Unpacking one OCI image layer (a tar, gzip- or zstd-compressed or not)
//! into a root directory on tmpfs, with the agent's path-safety rules: no
//! entry lands outside the root. Absolute names and `..` are refused; every
//! directory on an entry's way is checked to be a real directory (never a
//! symbolic link the layer or an earlier one put there) before anything is
//! created under it; files are created with `O_EXCL`, so a link in the
//! final place is never written through; hard links must name a regular
//! file already inside the root; device nodes and FIFOs are skipped.
//! Whiteouts (`.wh.NAME`, `.wh..wh..opq`) remove what earlier layers made.
//!
//! Ownership, timestamps and extended attributes are not applied: the
//! container runs as root on a throw-away tree.
//!
//! Every byte of the decompressed tar stream and every entry count against
//! the image's [`Budget`] (the unpacked-size and entry limits), checked as
//! they are read, so a small compressed layer cannot unpack without bound;
//! the budget's stop flag ends an unpacking at its next read.

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::limits::{Budget, Counted};

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// What one layer's unpacking did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unpacked {
    /// Entries created (files, directories, links).
    pub created: usize,
    /// Device nodes and FIFOs skipped.
    pub skipped: usize,
    /// Paths removed by whiteouts.
    pub whiteouts: usize,
}

/// Unpacks the layer read from `input` into `root`, sniffing gzip and
/// zstd by their magic numbers, within `budget`.
pub fn unpack_layer(input: impl Read, root: &Path, budget: &Budget) -> Result<Unpacked> {
    let mut input = BufReader::new(input);
    let head = input.fill_buf().context("reading the layer")?;
    let reader: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(input))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(zstd::stream::read::Decoder::with_buffer(input).context("starting zstd")?)
    } else {
        Box::new(input)
    };
    unpack_tar(reader, root, budget)
}

/// Unpacks an uncompressed tar stream into `root`, within `budget`. A
/// bound hit is the error, whatever the tar reader made of it.
pub(crate) fn unpack_tar(input: impl Read, root: &Path, budget: &Budget) -> Result<Unpacked> {
    let counted = Counted {
        inner: input,
        budget,
    };
    let result = unpack_counted(counted, root, budget);
    match (result, budget.breach()) {
        (Err(_), Some(breach)) => Err(anyhow::anyhow!(breach)),
        (r, _) => r,
    }
}

fn unpack_counted(input: impl Read, root: &Path, budget: &Budget) -> Result<Unpacked> {
    let meta = fs::symlink_metadata(root).with_context(|| format!("{}", root.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", root.display());
    }
    let mut out = Unpacked::default();
    // What this layer made: an opaque whiteout hides only lower layers.
    let mut added: HashSet<PathBuf> = HashSet::new();
    let mut archive = tar::Archive::new(input);
    for entry in archive.entries().context("reading the layer's tar")? {
        let mut entry = entry.context("reading a tar entry")?;
        budget.take_entry()?;
        let raw = entry.path().context("a tar entry's name")?.into_owned();
        let rel = relative(&raw)?;
        let Some(name) = rel.file_name().and_then(|n| n.to_str()).map(String::from) else {
            // The root itself ("." or "./"): nothing to create.
            continue;
        };
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let parent = real_dirs(root, parent_rel, true)?;
        if name == OPAQUE {
            out.whiteouts += clear_dir(&parent, parent_rel, &added)?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                bail!("layer entry {}: not a valid whiteout", raw.display());
            }
            out.whiteouts += remove_any(&parent.join(hidden))?;
            continue;
        }
        let target = parent.join(&name);
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        if kind.is_dir() {
            match fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    remove_any(&target)?;
                    mkdir(&target)?;
                }
                Err(_) => mkdir(&target)?,
            }
            fs::set_permissions(&target, fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting the mode of {}", target.display()))?;
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            remove_any(&target)?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            std::io::copy(&mut entry, &mut f)
                .with_context(|| format!("writing {}", target.display()))?;
            // The umask may have taken bits away.
            f.set_permissions(fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting the mode of {}", target.display()))?;
        } else if kind.is_symlink() {
            let link = entry
                .link_name()
                .context("a symbolic link's target")?
                .with_context(|| {
                    format!("layer entry {}: a link without a target", raw.display())
                })?;
            remove_any(&target)?;
            // Stored as written and never followed while unpacking.
            std::os::unix::fs::symlink(&link, &target)
                .with_context(|| format!("creating the link {}", target.display()))?;
        } else if kind.is_hard_link() {
            let link = entry
                .link_name()
                .context("a hard link's target")?
                .with_context(|| {
                    format!("layer entry {}: a link without a target", raw.display())
                })?;
            let source_rel = relative(&link)
                .with_context(|| format!("layer entry {}: hard link target", raw.display()))?;
            let source_parent =
                real_dirs(root, source_rel.parent().unwrap_or(Path::new("")), false)?;
            let source = match source_rel.file_name() {
                Some(n) => source_parent.join(n),
                None => bail!("layer entry {}: hard link to the root", raw.display()),
            };
            let m = fs::symlink_metadata(&source).with_context(|| {
                format!(
                    "layer entry {}: hard link target {}",
                    raw.display(),
                    link.display()
                )
            })?;
            if !m.is_file() {
                bail!(
                    "layer entry {}: hard link target {} is not a regular file",
                    raw.display(),
                    link.display()
                );
            }
            if source != target {
                remove_any(&target)?;
                fs::hard_link(&source, &target)
                    .with_context(|| format!("linking {}", target.display()))?;
            }
        } else if matches!(
            kind,
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo
        ) {
            tracing::warn!("layer entry {}: device node or FIFO skipped", raw.display());
            out.skipped += 1;
            continue;
        } else if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader | tar::EntryType::GNULongName
        ) {
            continue;
        } else {
            bail!(
                "layer entry {}: unsupported entry type {kind:?}",
                raw.display()
            );
        }
        added.insert(rel);
        out.created += 1;
    }
    Ok(out)
}

/// The entry's name as a path relative to the root: `./` and `.` dropped,
/// an absolute name or `..` refused.
fn relative(raw: &Path) -> Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                bail!("layer entry {}: an absolute name", raw.display())
            }
            Component::ParentDir => bail!("layer entry {}: \"..\" in the name", raw.display()),
        }
    }
    Ok(out)
}

/// `root/rel`, each directory on the way checked to be a real directory;
/// missing ones are created (mode 0755) when `create`.
fn real_dirs(root: &Path, rel: &Path, create: bool) -> Result<PathBuf> {
    let mut here = root.to_path_buf();
    for c in rel.components() {
        here.push(c);
        match fs::symlink_metadata(&here) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => {
                bail!(
                    "{}: a symbolic link on the way to a layer entry",
                    here.display()
                )
            }
            Ok(_) => bail!(
                "{}: not a directory, on the way to a layer entry",
                here.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => mkdir(&here)?,
            Err(e) => return Err(e).with_context(|| format!("{}", here.display())),
        }
    }
    Ok(here)
}

fn mkdir(path: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .mode(0o755)
        .create(path)
        .with_context(|| format!("creating the directory {}", path.display()))
}

/// Removes whatever is at `path` (a directory with its contents; a link
/// itself, never its target). Returns 1 if something was there.
fn remove_any(path: &Path) -> Result<usize> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => Err(e),
    }
    .with_context(|| format!("removing {}", path.display()))?;
    Ok(1)
}

/// An opaque whiteout: empties `dir` of what earlier layers put there.
fn clear_dir(dir: &Path, dir_rel: &Path, added: &HashSet<PathBuf>) -> Result<usize> {
    let mut n = 0;
    for e in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e.with_context(|| format!("listing {}", dir.display()))?;
        if !added.contains(&dir_rel.join(e.file_name())) {
            n += remove_any(&e.path())?;
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "unpack_tests.rs"]
mod tests;
