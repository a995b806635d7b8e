//! The qcow2 corpus (issue 19): real filesystem disks, converted by
//! `qemu-img` with the options people use, written by the agent over HTTP
//! and compared with `qemu-img convert -O raw`.
//!
//! Everything is generated here, nothing is committed: a 2 GiB sparse GPT
//! disk (a 64 MiB vfat ESP with a few files and an ext4 root) is built with
//! sfdisk, mkfs and a loop mount, populated with a few hundred MB of this
//! machine's own files from /usr and some random (incompressible) files,
//! then some files are deleted and `fstrim` turns them back into holes.
//! Synthetic images do not reproduce the layouts that used to fail. What
//! does it here: qemu-img keeps packing compressed clusters into the last
//! partly filled host cluster even after incompressible clusters were
//! stored uncompressed past it, so the first compressible cluster of a new
//! 512 MiB L2 region after the random file (an ext4 backup superblock, the
//! backup GPT) lands tens of MiB behind the L2 table allocated for it, more
//! than the image pipeline's window (8 MiB of lookahead): it must be read again. The random
//! file is placed (behind fallocated, never written fillers) right after
//! the last backup superblock before the 1 GiB boundary and across it, so
//! that no compressible metadata (journal, superblocks) comes in between.
//!
//! Each variant (`-c` with default options, `-m 1`, `-m 16 -W`,
//! `compression_type=zstd`, `compat=0.10`, `extended_l2=on`, 2 MiB
//! clusters, internal snapshots with data written after them, the L1 table
//! moved to the end by `qemu-img resize`, and 512-byte clusters on a small
//! disk) is written through the real `agent write-image` binary (its peak
//! RSS recorded and bounded) and through the `write_image` deploy step of
//! the command API, both over an HTTP server that honours Range. The
//! default `-c` image is also written over a server that ignores Range and
//! as a `.zst` (re-download and re-decompression), and over a server whose
//! bytes change after the first download, which must fail closed.
//!
//! Scratch files go under /var/tmp (not tmpfs) and are removed at the end;
//! loop devices and mounts are released by guards, also on failure.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use agent_base::config::{Config, RunMode};
use agent_contents::image::checksum::ChecksumSpec;
use agent_contents::image::fetch::HttpOptions;
use agent_contents::image::progress::Progress;
use agent_contents::image::{write_image, WriteRequest};
use agent_devices::disk::WritePolicy;
use agent_testkit::image_server::{Fault, ImageServer, Seen};
use hardware_tests::agentapi::AgentApi;
use hardware_tests::{run, sha256_prefix};
use serde_json::{json, Value};

mod fixture;
mod variants;
mod writing;

use fixture::*;
use variants::*;
use writing::*;

pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const GIB: u64 = 1 << 30;
/// Peak resident memory allowed to `agent write-image` (debug build).
pub(crate) const RSS_BOUND_MIB: f64 = 200.0;
/// Safely past the image pipeline's window (`QCOW2_LOOKAHEAD`, 8 MiB in
/// agent/crates/contents/src/image/decode.rs, plus up to a 1 MiB block and two clusters):
/// data further behind its table than this must be read again.
pub(crate) const LOOKAHEAD: u64 = 16 * MIB;

// ---------------------------------------------------------------------------
// Guards and small helpers

/// A loop device over a byte range of a file; detached on drop.
/// Builds the disk, makes the variants in a thread of their own (qemu-img
/// runs while the agent writes the previous one) and writes each.
fn corpus(spec: &DiskSpec, variants: &[Variant]) -> Vec<Outcome> {
    hardware_tests::require_root("the qcow2 corpus (loop mounts)");
    let agent = agent_binary();
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("qcow2-corpus-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let work = dir.path();
    let disk = work.join("disk.raw");
    let what = build_disk(&disk, spec, work);
    eprintln!("{what}; built in {:.1} s", started.elapsed().as_secs_f64());
    let mut writer = Writer::new(work, agent);
    let (tx, rx) = sync_channel::<Result<Ready, String>>(1);
    let outcomes = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let default_c = work.join("c-base.qcow2");
            for variant in variants {
                if matches!(variant.make, Make::Snapshot | Make::L1AtEnd) && !default_c.exists() {
                    qemu_img(&[
                        "convert",
                        "-c",
                        "-f",
                        "raw",
                        "-O",
                        "qcow2",
                        disk.to_str().unwrap(),
                        default_c.to_str().unwrap(),
                    ]);
                }
                let ready = make_variant(*variant, &disk, &default_c, work);
                if let Ok(r) = &ready {
                    eprintln!(
                        "made {} ({:.1} MiB; furthest back {:.1} MiB, {} entries beyond the lookahead) in {:.1} s",
                        r.variant.name,
                        mib(r.size),
                        mib(r.furthest_back.0),
                        r.furthest_back.1,
                        r.make_secs
                    );
                    // The derived variants start from this one.
                    if r.variant.name == "c" {
                        std::fs::copy(&r.qcow2, &default_c).unwrap();
                    }
                }
                if tx.send(ready).is_err() {
                    break;
                }
            }
            drop(tx);
        });
        for ready in rx {
            match ready {
                Ok(r) => {
                    writer.write(&r);
                    std::fs::remove_file(&r.qcow2).ok();
                }
                Err(e) => writer.record(Outcome {
                    variant: "?".into(),
                    how: "making it".into(),
                    ok: Err(e),
                    ..Outcome::default()
                }),
            }
        }
        producer.join().expect("the variant maker panicked");
        std::mem::take(&mut writer.outcomes)
    });
    eprintln!("\n{what}\n{HEADER}");
    for o in &outcomes {
        eprintln!("{}", o.line());
    }
    eprintln!("total {:.1} s", started.elapsed().as_secs_f64());
    drop(writer);
    outcomes
}

fn assert_all_ok(outcomes: &[Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.ok.is_err())
        .map(Outcome::line)
        .collect();
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}

#[test]
fn a_2gib_real_filesystem_disk_in_every_qemu_img_layout_deploys_byte_identical() {
    let spec = DiskSpec {
        size: 2 * GIB,
        esp: 64 * MIB,
        esp_files: 6 * MIB,
        real_files: 520 * MIB,
        max_file: 32 * MIB,
        random_kept: 120 * MIB,
        random_across: Some(GIB),
        random_deleted: 48 * MIB,
    };
    let variants = [
        Variant {
            ignore_range: true,
            ..v("c", Make::Convert(&["-c"]))
        },
        v("c-m1", Make::Convert(&["-c", "-m", "1"])),
        v("c-m16-W", Make::Convert(&["-c", "-m", "16", "-W"])),
        v(
            "c-zstd",
            Make::Convert(&["-c", "-o", "compression_type=zstd"]),
        ),
        v("c-compat0.10", Make::Convert(&["-c", "-o", "compat=0.10"])),
        v("extended_l2", Make::Convert(&["-o", "extended_l2=on"])),
        v("c-2M", Make::Convert(&["-c", "-o", "cluster_size=2M"])),
        v("c-snapshots", Make::Snapshot),
        Variant {
            ignore_range: true,
            ..v("c-l1-at-end", Make::L1AtEnd)
        },
    ];
    assert_all_ok(&corpus(&spec, &variants));
}

#[test]
fn a_small_disk_with_512_byte_clusters_deploys_byte_identical() {
    // The random file is larger than the lookahead, so the data after it
    // (compressed into a cluster from before it) must be read again.
    let spec = DiskSpec {
        size: 96 * MIB,
        esp: 8 * MIB,
        esp_files: 2 * MIB,
        real_files: 24 * MIB,
        max_file: 4 * MIB,
        random_kept: 28 * MIB,
        random_across: None,
        random_deleted: 4 * MIB,
    };
    let variants = [
        Variant {
            ignore_range: true,
            ..v("c-512", Make::Convert(&["-c", "-o", "cluster_size=512"]))
        },
        v("512", Make::Convert(&["-o", "cluster_size=512"])),
    ];
    assert_all_ok(&corpus(&spec, &variants));
}
