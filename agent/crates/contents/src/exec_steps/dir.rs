//! The manifest directory: every `*.yaml` file one manager, loaded in
//! name order, read with a size bound, and checked together (no manager or
//! step declared twice across the directory).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::manifest::{parse_manifest, ExecManager, ManifestError};

/// A manifest larger than this is refused unread.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Reads one manifest file (bounded in size).
fn read_manifest(path: &Path) -> Result<String, ManifestError> {
    let read_err = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Syntax {
            path: path.to_path_buf(),
            message: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        });
    }
    Ok(text)
}

/// Loads every `*.yaml` manifest of `dir`, in name order; a missing `dir`
/// is no managers. Managers with support 0 are left out (disabled). Any bad
/// manifest, or two that declare the same manager or step name, refuses the
/// whole directory: an operator's manager never half-loads.
pub fn load_dir(dir: &Path) -> Result<Vec<ExecManager>, ManifestError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ManifestError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ManifestError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "yaml") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut managers: Vec<ExecManager> = Vec::new();
    let mut owners: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in paths {
        let m = parse_manifest(&read_manifest(&path)?, &path)?;
        if m.support == 0 {
            tracing::debug!(manifest = %path.display(), manager = %m.name, "executable manager disabled (support 0)");
            continue;
        }
        let keys = std::iter::once(format!("manager \"{}\"", m.name))
            .chain(m.steps.iter().map(|s| format!("step \"{}\"", s.name)));
        for key in keys {
            if let Some(other) = owners.get(&key) {
                return Err(ManifestError::Clash {
                    path,
                    what: key,
                    other: other.clone(),
                });
            }
            owners.insert(key, path.clone());
        }
        tracing::debug!(
            manifest = %path.display(),
            manager = %m.name,
            version = %m.version,
            support = m.support,
            steps = m.steps.len(),
            "executable manager loaded"
        );
        managers.push(m);
    }
    Ok(managers)
}
