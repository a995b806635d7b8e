//! Erase methods on regular files standing in for disks (hole punching
//! plays discard); loop devices are covered in `hardware-tests`.

use super::*;
use agent_base::config::Config;
use std::os::unix::fs::FileExt;

fn filled(dir: &Path, name: &str, mib: usize) -> PathBuf {
    let p = dir.join(name);
    let mut data = vec![0u8; mib << 20];
    fastrand::Rng::with_seed(1).fill(&mut data);
    std::fs::write(&p, data).unwrap();
    p
}

fn policy(allowed: &[PathBuf]) -> WritePolicy {
    WritePolicy::from_config(&Config {
        allowed_devices: allowed.to_vec(),
        ..Config::default()
    })
}

fn all_zero(p: &Path) -> bool {
    std::fs::read(p).unwrap().iter().all(|b| *b == 0)
}

#[test]
fn disks_without_a_secure_erase_are_overwritten_in_parallel_discard_enabled_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let disks: Vec<PathBuf> = (0..3)
        .map(|i| filled(dir.path(), &format!("d{i}"), 3))
        .collect();
    let knobs = Knobs {
        concurrency: 2,
        enable_discard: true,
        ..Knobs::default()
    };
    let out = erase_disks(&disks, &policy(&disks), &knobs, &AtomicBool::new(false)).unwrap();
    assert_eq!(out.len(), 3);
    for (d, o) in &out {
        assert!(
            matches!(o.erased, Erased::Overwrite { .. }),
            "{}: {:?}",
            d.display(),
            o.erased
        );
        assert_eq!(o.bytes, 3 << 20, "{}", d.display());
        assert!(o.seconds > 0.0 && o.mb_per_s() > 0.0, "{o:?}");
        assert!(o.describe().starts_with("overwrite: "), "{}", o.describe());
        assert!(all_zero(d));
    }
}

#[test]
fn discard_asked_for_by_name_reads_back_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let d = filled(dir.path(), "d", 3);
    let done = std::sync::atomic::AtomicU64::new(0);
    let e = erase_with(
        &d,
        &policy(std::slice::from_ref(&d)),
        &Knobs::default(),
        Method::Discard,
        &AtomicBool::new(false),
        &done,
    )
    .unwrap();
    assert_eq!(e, Erased::Discard);
    assert!(Outcome {
        erased: e,
        bytes: 3 << 20,
        seconds: 0.1
    }
    .describe()
    .starts_with("discard, verified zeros; 0.0 GiB in "));
    assert!(all_zero(&d));
}

#[test]
fn overwrite_runs_the_passes_zeroes_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let p = filled(dir.path(), "d", 5);
    let before = std::fs::read(&p).unwrap();
    let file = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let (cancel, done) = (AtomicBool::new(false), AtomicU64::new(0));
    let t = methods::Target {
        file: &file,
        size: 5 << 20,
        is_block: false,
        cancel: &cancel,
        done: &done,
    };
    t.overwrite(1, false).unwrap();
    let after = std::fs::read(&p).unwrap();
    assert_ne!(after, before, "one random pass changes the data");
    assert!(!all_zero(&p));
    assert_eq!(done.load(Ordering::Relaxed), 5 << 20);
    t.overwrite(2, true).unwrap();
    assert!(all_zero(&p));
    assert_eq!(done.load(Ordering::Relaxed), 4 * (5 << 20));

    file.write_all_at(b"x", 4096).unwrap();
    cancel.store(true, Ordering::Relaxed);
    let e = t.overwrite(1, true).unwrap_err();
    assert!(format!("{e:#}").contains("aborted"), "{e:#}");
    let e = t.discard_and_verify().unwrap_err();
    assert!(format!("{e:#}").contains("aborted"), "{e:#}");
}

#[test]
fn sampled_read_back_finds_data_left_at_either_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d");
    std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
    let file = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let (cancel, done) = (AtomicBool::new(false), AtomicU64::new(0));
    let t = methods::Target {
        file: &file,
        size: 8 << 20,
        is_block: false,
        cancel: &cancel,
        done: &done,
    };
    assert!(t.reads_zero().unwrap());
    file.write_all_at(b"x", (8 << 20) - 1).unwrap();
    assert!(!t.reads_zero().unwrap());
}

#[test]
fn devices_not_allowed_fail_and_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = filled(dir.path(), "d", 1);
    let e = erase_disks(
        std::slice::from_ref(&d),
        &policy(&[]),
        &Knobs::default(),
        &AtomicBool::new(false),
    )
    .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(&d.display().to_string()) && msg.contains("--allow-device"),
        "{msg}"
    );
    assert!(!all_zero(&d), "nothing was erased");
}

#[test]
fn a_vmfs_disk_is_protected_unless_wiping_special_filesystems_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let d = agent_testkit::sparse_disk(
        dir.path(),
        32,
        "label: gpt\ntype=AA31E02A-400F-11DB-9590-000C2911D1B8\n",
    );
    let allowed = policy(std::slice::from_ref(&d));
    let e = erase_disks(
        std::slice::from_ref(&d),
        &allowed,
        &Knobs::default(),
        &AtomicBool::new(false),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("protected device"), "{e:#}");
    let knobs = Knobs {
        wipe_special: true,
        enable_discard: true,
        ..Knobs::default()
    };
    let out = erase_disks(
        std::slice::from_ref(&d),
        &allowed,
        &knobs,
        &AtomicBool::new(false),
    )
    .unwrap();
    assert!(matches!(out[0].1.erased, Erased::Overwrite { .. }));
}
