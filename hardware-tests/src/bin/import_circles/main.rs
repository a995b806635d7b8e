//! `import_circles`: fails when a production module of any target of the
//! workspace (every library, binary and test target `cargo metadata`
//! lists, the fuzz crate's included) reaches itself through the modules
//! it uses, and names the files of each circle. Crates already make
//! imports between the agent's layers point one way (an upward import
//! fails for want of the dependency); this is the same rule inside each
//! crate. ci/test runs it.
//!   import_circles [REPO]   # REPO: the repository's root (default: .)

mod circles;
mod scan;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

fn main() -> ExitCode {
    let repo = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    match run(&repo) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("import_circles: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Checks every target of the workspace at `repo` and of the fuzz crate;
/// the number of circles found.
fn run(repo: &Path) -> Result<usize> {
    let repo = repo
        .canonicalize()
        .with_context(|| format!("{}", repo.display()))?;
    let prefix = format!("{}/", repo.display());
    let mut roots = targets(&repo.join("Cargo.toml"))?;
    roots.extend(targets(&repo.join("agent/fuzz/Cargo.toml"))?);
    roots.sort();
    roots.dedup();
    let mut found = 0;
    for root in &roots {
        for c in circles::file_cycles(&scan::Tree::read(root)) {
            println!("modules that import each other: {}", c.replace(&prefix, ""));
            found += 1;
        }
    }
    println!(
        "import_circles: {} target(s), {found} circle(s)",
        roots.len()
    );
    Ok(found)
}

/// The root files of every target of the workspace of `manifest`.
fn targets(manifest: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("cargo")
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata --manifest-path {}: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata's output")?;
    let mut roots = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(src) = t["src_path"].as_str() {
                roots.push(PathBuf::from(src));
            }
        }
    }
    if roots.is_empty() {
        bail!("cargo metadata lists no target in {}", manifest.display());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests;
