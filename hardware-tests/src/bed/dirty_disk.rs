//! Disk files that cleaning must empty: a GPT with one ext4 partition at
//! 1 MiB, and what libblkid (and the ext4 magic) still finds on them
//! afterwards (`bed_inspect_clean.rs`, `bed_clean_bench.rs`).

use std::io::{Read, Seek, Write};
use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::run;

const MIB: u64 = 1 << 20;

/// Makes `path` a `size`-byte file with a GPT and one Linux partition at
/// 1 MiB filling it (sfdisk on the file).
pub fn gpt(path: &Path, size: u64) -> Result<()> {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(size))
        .with_context(|| format!("creating {}", path.display()))?;
    let mut table = tempfile::tempfile()?;
    table.write_all(b"label: gpt\n,,L\n")?;
    table.rewind()?;
    run(Command::new("sfdisk").arg("-q").arg(path).stdin(table))?;
    Ok(())
}

/// Makes `path` a `size`-byte file with a GPT and one ext4 partition at
/// 1 MiB filling it (sfdisk and mkfs.ext4 on the file).
pub fn gpt_ext4(path: &Path, size: u64) -> Result<()> {
    gpt(path, size)?;
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-E", &format!("offset={MIB}")])
        .arg(path)
        .arg(format!("{}M", size / MIB - 2)))?;
    ensure!(
        signatures(path)?.contains("gpt"),
        "{} has no GPT after sfdisk",
        path.display()
    );
    Ok(())
}

/// Signatures libblkid finds on the whole file and at the partition's
/// offset, and the ext4 magic at 1 MiB; empty when there are none.
pub fn signatures(path: &Path) -> Result<String> {
    let whole = run(Command::new("wipefs").arg("--no-act").arg(path)).unwrap_or_default();
    // blkid exits 2 when it finds nothing.
    let part = run(Command::new("blkid")
        .args(["-p", "-o", "export", "-O", &MIB.to_string()])
        .arg(path))
    .unwrap_or_default();
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut sb = [0u8; 2];
    f.seek(std::io::SeekFrom::Start(MIB + 1080))?;
    f.read_exact(&mut sb)?;
    let ext4 = if sb == [0x53, 0xef] {
        "ext4 magic at 1 MiB"
    } else {
        ""
    };
    Ok(format!("{whole}{part}{ext4}").trim().to_string())
}
