//! The corpus's source disk: a sparse GPT disk with a vfat ESP and a
//! populated, trimmed ext4 root (loop devices and mounts released by
//! guards), and where its data lies.

use super::*;

pub(crate) struct Loop(PathBuf);

impl Loop {
    fn attach(file: &Path, offset: u64, size: u64) -> Loop {
        let dev = run(Command::new("losetup")
            .args(["--find", "--show", "--offset"])
            .arg(offset.to_string())
            .arg("--sizelimit")
            .arg(size.to_string())
            .arg(file))
        .expect("losetup");
        Loop(PathBuf::from(dev))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Err(e) = run(Command::new("losetup").arg("--detach").arg(&self.0)) {
            eprintln!("warning: detaching {}: {e:#}", self.0.display());
        }
    }
}

/// A mounted filesystem; unmounted on drop (lazily if it is busy).
pub(crate) struct Mount(PathBuf);

impl Mount {
    pub(crate) fn new(dev: &Path, dir: &Path) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        run(Command::new("mount").arg(dev).arg(dir)).expect("mount");
        Mount(dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if run(Command::new("umount").arg(&self.0)).is_err() {
            let _ = run(Command::new("umount").arg("-l").arg(&self.0));
        }
    }
}

pub(crate) fn sha256_file(path: &Path) -> String {
    sha256_prefix(path, u64::MAX).unwrap()
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// An empty sparse file of `size` bytes standing in for the disk.
pub(crate) fn fresh_target(path: &Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

pub(crate) fn qemu_img(args: &[&str]) {
    run(Command::new("qemu-img").args(args)).expect("qemu-img (qemu-utils) is needed");
}

pub(crate) fn virtual_size(qcow2: &Path) -> u64 {
    let out = run(Command::new("qemu-img")
        .args(["info", "--output=json", "-f", "qcow2"])
        .arg(qcow2))
    .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    v["virtual-size"].as_u64().expect("virtual-size")
}

// ---------------------------------------------------------------------------
// The disks

/// What goes on a generated disk.
pub(crate) struct DiskSpec {
    pub(crate) size: u64,
    pub(crate) esp: u64,
    /// Bytes of this machine's files copied to the ESP.
    pub(crate) esp_files: u64,
    /// Bytes of this machine's files copied to the root filesystem.
    pub(crate) real_files: u64,
    /// Largest single file copied.
    pub(crate) max_file: u64,
    /// A random file written after the copies, kept.
    pub(crate) random_kept: u64,
    /// Place the random file across this guest offset (an L2 table
    /// boundary), starting after the last ext4 backup superblock before it,
    /// so that nothing compressible lies between them.
    pub(crate) random_across: Option<u64>,
    /// A random file written after that one, deleted again.
    pub(crate) random_deleted: u64,
}

/// Regular files under `root` in name order, depth first, up to `budget`
/// bytes (files larger than `max_file` skipped).
pub(crate) fn pick_files(
    root: &Path,
    budget: u64,
    max_file: u64,
    out: &mut Vec<(PathBuf, u64)>,
) -> u64 {
    fn walk(dir: &Path, budget: u64, max_file: u64, used: &mut u64, out: &mut Vec<(PathBuf, u64)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if *used >= budget {
                return;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                walk(&p, budget, max_file, used, out);
            } else if meta.is_file() && meta.len() > 0 && meta.len() <= max_file {
                *used += meta.len();
                out.push((p, meta.len()));
            }
        }
    }
    let mut used = 0;
    walk(root, budget, max_file, &mut used, out);
    used
}

/// Writes `len` bytes of seeded random data to `path`.
pub(crate) fn random_file(path: &Path, len: u64, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut f = std::fs::File::create(path).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for chunk in buf[..n].chunks_mut(8) {
            let r = rng.u64(..).to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_all().unwrap();
}

/// Copies `src` into `disk` at byte `offset`, leaving holes for its
/// all-zero blocks (the disk stays sparse).
fn copy_into(src: &Path, disk: &Path, offset: u64) {
    use std::io::{Read, Seek, SeekFrom};
    let mut from = std::fs::File::open(src).unwrap();
    let mut to = std::fs::OpenOptions::new().write(true).open(disk).unwrap();
    let mut buf = vec![0u8; MIB as usize];
    let mut at = offset;
    loop {
        let n = from.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            to.seek(SeekFrom::Start(at)).unwrap();
            to.write_all(&buf[..n]).unwrap();
        }
        at += n as u64;
    }
    to.sync_all().unwrap();
}

/// Start and size in bytes of partition `n` (1-based) of a disk image.
pub(crate) fn partition(disk: &Path, n: usize) -> (u64, u64) {
    let out = run(Command::new("sfdisk").arg("-J").arg(disk)).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    let p = &v["partitiontable"]["partitions"][n - 1];
    let sector = v["partitiontable"]["sectorsize"].as_u64().unwrap_or(512);
    (
        p["start"].as_u64().unwrap() * sector,
        p["size"].as_u64().unwrap() * sector,
    )
}

/// Builds the sparse GPT disk `path` as `spec` says; returns a line
/// describing what went in.
pub(crate) fn build_disk(path: &Path, spec: &DiskSpec, work: &Path) -> String {
    fresh_target(path, spec.size);
    let mut sf = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sfdisk (fdisk) is needed");
    write!(
        sf.stdin.take().unwrap(),
        "label: gpt\nstart=2048, size={}, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp\nname=root\n",
        spec.esp / 512
    )
    .unwrap();
    assert!(sf.wait().unwrap().success(), "sfdisk");

    // The ESP: vfat with a few files, made in a file of its own (mtools,
    // no loop device: mkfs.vfat refuses a loop device that still shows
    // another user's partitions) and copied to its place in the disk.
    let (start, size) = partition(path, 1);
    {
        std::fs::create_dir_all(work).unwrap();
        let esp = work.join("esp.img");
        let _ = std::fs::remove_file(&esp);
        std::fs::File::create(&esp).unwrap().set_len(size).unwrap();
        run(Command::new("mkfs.vfat").args(["-n", "ESP"]).arg(&esp)).expect("mkfs.vfat");
        let mut files = Vec::new();
        pick_files(Path::new("/usr/bin"), spec.esp_files, 8 * MIB, &mut files);
        let img = esp.to_str().unwrap().to_string();
        run(hardware_tests::mtools("mmd", &img).args(["::/EFI", "::/EFI/BOOT"]))
            .expect("mmd (mtools)");
        for (i, (f, _)) in files.iter().enumerate() {
            let name = if i == 0 {
                "::/EFI/BOOT/BOOTX64.EFI".to_string()
            } else {
                format!("::/EFI/BOOT/FILE{i:04}.BIN")
            };
            run(hardware_tests::mtools("mcopy", &img).arg(f).arg(&name)).expect("mcopy");
        }
        copy_into(&esp, path, start);
        std::fs::remove_file(&esp).unwrap();
    }

    // The root: ext4, populated through a loop mount.
    let (start, size) = partition(path, 2);
    let root = Loop::attach(path, start, size);
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-E", "nodiscard"])
        .arg(&root.0))
    .expect("mkfs.ext4");
    let mnt = work.join("mnt");
    let mount = Mount::new(&root.0, &mnt);
    let mut files = Vec::new();
    let mut copied = 0;
    // Libraries, documentation (much of it already compressed) and
    // programs, as on a real root filesystem.
    for (src, share) in [("/usr/lib", 50), ("/usr/share", 35), ("/usr/bin", 15)] {
        copied += pick_files(
            Path::new(src),
            spec.real_files * share / 100,
            spec.max_file,
            &mut files,
        );
    }
    let mut dirs = BTreeSet::new();
    let mut kept = Vec::new();
    for (i, (f, _)) in files.iter().enumerate() {
        let dst = mnt.join(f.strip_prefix("/").unwrap());
        let parent = dst.parent().unwrap().to_path_buf();
        if dirs.insert(parent.clone()) {
            std::fs::create_dir_all(&parent).unwrap();
        }
        if std::fs::copy(f, &dst).is_ok() {
            kept.push((i, dst));
        }
    }
    run(&mut Command::new("sync")).unwrap();
    // Written last, so they lie behind everything copied; where asked,
    // further on, behind a reserved (never written) filler.
    let mut placed = String::new();
    let mut fillers = Vec::new();
    if let Some(across) = spec.random_across {
        let boundary = across - start;
        let (bs, metadata) = backup_superblocks(&root.0);
        let after = metadata
            .iter()
            .filter(|(sb, _)| sb * bs < boundary)
            .map(|(_, end)| (end + 1) * bs)
            .max()
            .unwrap_or(0);
        // Reserve blocks (fallocate: nothing is written) until the
        // allocator's next block lies past `after`, in steps of at most
        // 16 MiB: allocations skip the journal and metadata.
        let mut len = MIB;
        for n in 0..100 {
            let filler = mnt.join(format!("filler-{n}"));
            run(Command::new("fallocate")
                .args(["-l", &len.to_string()])
                .arg(&filler))
            .expect("fallocate");
            fillers.push(filler.clone());
            let next = extents(&filler)
                .iter()
                .map(|(p, l)| (p + l) * bs)
                .max()
                .unwrap();
            if next >= after {
                break;
            }
            len = (after - next).min(16 * MIB);
        }
    }
    random_file(&mnt.join("random-kept"), spec.random_kept, 1);
    if spec.random_across.is_some() {
        let (bs, _) = backup_superblocks(&root.0);
        let ext = extents(&mnt.join("random-kept"));
        placed = format!(
            "; the random file at guest {}",
            ext.iter()
                .map(|(p, l)| format!(
                    "{:.0}..{:.0} MiB",
                    mib(start + p * bs),
                    mib(start + (p + l) * bs)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for f in fillers {
            std::fs::remove_file(f).unwrap();
        }
    }
    random_file(&mnt.join("random-deleted"), spec.random_deleted, 2);
    // Delete some, and trim: deleted blocks become holes in the file.
    let mut deleted = spec.random_deleted;
    for (i, dst) in &kept {
        if i % 3 == 1 {
            deleted += std::fs::metadata(dst).map(|m| m.len()).unwrap_or(0);
            std::fs::remove_file(dst).unwrap();
        }
    }
    std::fs::remove_file(mnt.join("random-deleted")).unwrap();
    run(&mut Command::new("sync")).unwrap();
    run(Command::new("fstrim").arg(&mnt)).expect("fstrim");
    drop(mount);
    drop(root);
    let allocated = std::fs::metadata(path)
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .unwrap_or(0);
    format!(
        "{} MiB disk: {} files ({:.0} MiB) copied from /usr, {:.0} MiB random, {:.0} MiB deleted and trimmed; {:.0} MiB allocated ({:.0}%){placed}",
        spec.size / MIB,
        files.len(),
        mib(copied),
        mib(spec.random_kept + spec.random_deleted),
        mib(deleted),
        mib(allocated),
        allocated as f64 * 100.0 / spec.size as f64
    )
}

/// The block size of the ext4 filesystem on `dev`, and for each backup
/// superblock its block and the last block of the metadata after it
/// (group descriptors, reserved GDT blocks), from dumpe2fs.
pub(crate) fn backup_superblocks(dev: &Path) -> (u64, Vec<(u64, u64)>) {
    let out = run(Command::new("dumpe2fs").arg(dev)).expect("dumpe2fs");
    let mut bs = 0;
    let mut found: Vec<(u64, u64)> = Vec::new();
    let range_end = |l: &str, key: &str| -> Option<u64> {
        let rest = l.split(key).nth(1)?;
        let r = rest.split([',', ' ']).next()?;
        r.split('-').next_back()?.parse().ok()
    };
    let mut in_backup_group = false;
    for l in out.lines() {
        let t = l.trim();
        if let Some(v) = t.strip_prefix("Block size:") {
            bs = v.trim().parse().unwrap();
        } else if t.starts_with("Group ") {
            in_backup_group = false;
        }
        if let Some(sb) = range_end(t, "Backup superblock at ") {
            in_backup_group = true;
            found.push((sb, sb));
        }
        if in_backup_group {
            for key in ["Group descriptors at ", "Reserved GDT blocks at "] {
                if let (Some(end), Some(last)) = (range_end(t, key), found.last_mut()) {
                    last.1 = last.1.max(end);
                }
            }
        }
    }
    assert!(bs > 0, "no block size in dumpe2fs output");
    (bs, found)
}

/// (first physical block, length in blocks) of each extent of `file`.
pub(crate) fn extents(file: &Path) -> Vec<(u64, u64)> {
    let out = run(Command::new("filefrag").arg("-v").arg(file)).expect("filefrag");
    let ext: Vec<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            f[0].trim().parse::<u64>().ok()?;
            let physical = f.get(2)?.split("..").next()?.trim().parse().ok()?;
            let len = f.get(3)?.trim().parse().ok()?;
            Some((physical, len))
        })
        .collect();
    assert!(!ext.is_empty(), "no extents for {}: {out}", file.display());
    ext
}

// ---------------------------------------------------------------------------
// qcow2 layout: how far behind its table data lies (for the report)

/// The largest distance by which a table entry points backwards (an L2
/// table behind the L1 table, data behind the L2 table mapping it), and how
/// many entries do so by more than the converter's lookahead.
pub(crate) fn furthest_back(path: &Path) -> (u64, usize) {
    let f = std::fs::File::open(path).unwrap();
    let mut h = [0u8; 104];
    f.read_exact_at(&mut h, 0).unwrap();
    let be32 = |o: usize| u32::from_be_bytes(h[o..o + 4].try_into().unwrap());
    let be64 = |o: usize| u64::from_be_bytes(h[o..o + 8].try_into().unwrap());
    let version = be32(4);
    let cluster_bits = be32(20);
    let l1_size = be32(36) as usize;
    let l1_offset = be64(40);
    let extended = version >= 3 && be64(72) & (1 << 4) != 0;
    let cluster = 1u64 << cluster_bits;
    let entry = if extended { 16 } else { 8 };
    let mut l1 = vec![0u8; l1_size * 8];
    f.read_exact_at(&mut l1, l1_offset).unwrap();
    let (mut worst, mut beyond) = (0u64, 0usize);
    let mut note = |table: u64, target: u64| {
        if target != 0 && target < table {
            worst = worst.max(table - target);
            if table - target > LOOKAHEAD {
                beyond += 1;
            }
        }
    };
    let mut l2 = vec![0u8; cluster as usize];
    for e in l1.chunks(8) {
        let l2_offset = u64::from_be_bytes(e.try_into().unwrap()) & 0x00ff_ffff_ffff_fe00;
        if l2_offset == 0 {
            continue;
        }
        note(l1_offset, l2_offset);
        f.read_exact_at(&mut l2, l2_offset).unwrap();
        for e in l2.chunks(entry) {
            let v = u64::from_be_bytes(e[..8].try_into().unwrap());
            let host = if v & (1 << 62) != 0 {
                v & ((1u64 << (62 - (cluster_bits - 8))) - 1)
            } else {
                v & 0x00ff_ffff_ffff_fe00
            };
            note(l2_offset, host);
        }
    }
    (worst, beyond)
}
