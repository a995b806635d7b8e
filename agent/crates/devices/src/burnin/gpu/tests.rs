//! `gpu-burn` is NVIDIA/CUDA software: no GPU and no CUDA run here, so a
//! shell script stands in for `./gpu_burn`, printing what the real tool
//! prints (`ID n: …` lines for `-l`) and recording its arguments.

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicBool;

use super::*;

fn stand_in(dir: &Path, body: &str) {
    let p = dir.join("gpu_burn");
    std::fs::write(&p, format!("#!/bin/sh\necho \"$@\" >> args.log\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn cfg(dir: &Path, count: u64) -> GpuBurn {
    GpuBurn {
        install_dir: dir.to_path_buf(),
        memory: "95%".into(),
        timeout_secs: 2,
        count,
    }
}

const LIST: &str = r#"if [ "$1" = -l ]; then
  echo "ID 0: NVIDIA A100-SXM4-40GB, 40326MB"
  echo "ID 1: NVIDIA A100-SXM4-40GB, 40326MB"
  exit 0
fi
echo "Burning for $3 seconds."
echo "100.0%  proc'd: 1000 (12000 Gflop/s) - 1000 (12001 Gflop/s)"
echo "Tested 2 GPUs:"
echo "	GPU 0: OK"
echo "	GPU 1: OK""#;

#[test]
fn it_counts_then_burns_from_the_install_directory_as_ipa() {
    let d = tempfile::tempdir().unwrap();
    stand_in(d.path(), LIST);
    let r = run(&cfg(d.path(), 2), &AtomicBool::new(false)).unwrap();
    assert_eq!(r.gpus, Some(2));
    assert_eq!(
        r.last_output.last().map(String::as_str),
        Some("\tGPU 1: OK")
    );
    let args = std::fs::read_to_string(d.path().join("args.log")).unwrap();
    assert_eq!(args, "-l\n-m 95% 2\n");
}

#[test]
fn no_count_check_when_none_is_expected() {
    let d = tempfile::tempdir().unwrap();
    stand_in(d.path(), LIST);
    let r = run(&cfg(d.path(), 0), &AtomicBool::new(false)).unwrap();
    assert_eq!(r.gpus, None);
    let args = std::fs::read_to_string(d.path().join("args.log")).unwrap();
    assert_eq!(args, "-m 95% 2\n");
}

#[test]
fn a_wrong_count_a_failing_burn_and_a_missing_tool_are_named() {
    let d = tempfile::tempdir().unwrap();
    stand_in(d.path(), LIST);
    let e = run(&cfg(d.path(), 4), &AtomicBool::new(false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "GPUs: gpu-burn found 2 GPUs, 4 expected (agent_burnin_gpu_count)"
    );
    stand_in(d.path(), "echo 'GPU 1: FAULTY' >&2; exit 1");
    let e = run(&cfg(d.path(), 0), &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "gpu-burn: {}/gpu_burn -m 95% 2: exit status: 1",
            d.path().display()
        )),
        "{e}"
    );
    assert!(e.contains("GPU 1: FAULTY"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    let e = run(&cfg(empty.path(), 0), &AtomicBool::new(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot start it") && e.contains("agent_burnin_gpu_install_dir"),
        "{e}"
    );
}

#[test]
fn an_abort_kills_the_burn() {
    let d = tempfile::tempdir().unwrap();
    stand_in(d.path(), "exec sleep 30");
    let cancel = std::sync::Arc::new(AtomicBool::new(false));
    let c = cancel.clone();
    let t = std::thread::spawn(move || run(&cfg(d.path(), 0), &c));
    std::thread::sleep(Duration::from_millis(300));
    cancel.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let e = t.join().unwrap().unwrap_err();
    assert!(matches!(e, BurninError::Aborted(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
}
