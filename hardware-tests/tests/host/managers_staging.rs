//! `image-builder/stage-managers.sh`, which puts an operator's executable
//! hardware managers and the shared libraries they need into the deploy
//! ramdisk, for the aarch64 ramdisk (issue 49): a small C program
//! cross-compiled here (gcc-aarch64-linux-gnu, ci/install-aarch64) against
//! Debian's arm64 glibc is staged with `--arch aarch64`: its loader at the
//! path the executable asks for and exactly its libraries (libc, libm), all
//! arm64 ELFs, under `lib/aarch64-linux-gnu` where the aarch64 ramdisk's
//! loader looks; then qemu-aarch64 runs it with the stage as its root
//! (`-L`; qemu falls back to this machine's paths for a file the stage
//! lacks, so the file checks are what prove the closure complete). An
//! executable of the other machine is refused, naming it. (The x86_64 staging is exercised end to end by
//! ramdisk_qemu_exec_steps, in the booted ramdisk.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../image-builder/stage-managers.sh")
}

const PROGRAM: &str = r#"#include <math.h>
#include <stdio.h>
int main(int argc, char **argv) {
    volatile double x = argc + 26.0;
    printf("staged arm64 manager: %.3f\n", cbrt(x));
    return 0;
}
"#;

/// A manager directory with a manifest and `bin/probe`, an arm64 dynamic
/// executable needing libc and libm.
fn managers(dir: &Path) {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(
        dir.join("probe.yaml"),
        "name: probe\nversion: '1'\nsteps:\n  - {name: probe, executable: bin/probe, interface: deploy, clean_priority: 0}\n",
    )
    .unwrap();
    let src = dir.join("probe.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let out = Command::new("aarch64-linux-gnu-gcc")
        .arg("-O1")
        .arg("-o")
        .arg(dir.join("bin/probe"))
        .arg(&src)
        .args(["-Wl,--no-as-needed", "-lm"])
        .output()
        .expect("aarch64-linux-gnu-gcc (ci/install-aarch64 installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(src).unwrap();
}

fn stage(arch: &str, dir: &Path, stage: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(script())
        .args(["--arch", arch])
        .arg(dir)
        .arg(stage)
        .output()
        .unwrap()
}

#[test]
fn an_arm64_manager_is_staged_with_its_loader_and_libraries_and_runs_from_them() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("managers");
    let root = work.path().join("stage");
    managers(&dir);
    let out = stage("aarch64", &dir, &root);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "lib/ld-linux-aarch64.so.1",
        "lib/aarch64-linux-gnu/libc.so.6",
        "lib/aarch64-linux-gnu/libm.so.6",
        "etc/ironic-python-agent/managers/probe.yaml",
    ] {
        assert!(root.join(f).is_file(), "{f} is not staged");
    }
    let mut staged: Vec<String> = std::fs::read_dir(root.join("lib/aarch64-linux-gnu"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    staged.sort();
    // libc's own DT_NEEDED names the loader too.
    assert_eq!(
        staged,
        ["ld-linux-aarch64.so.1", "libc.so.6", "libm.so.6"],
        "not exactly the closure"
    );
    for f in [
        "lib/ld-linux-aarch64.so.1",
        "lib/aarch64-linux-gnu/libc.so.6",
    ] {
        let h = Command::new("readelf")
            .arg("-h")
            .arg(root.join(f))
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&h.stdout).contains("AArch64"),
            "{f} is not an arm64 ELF"
        );
    }
    assert!(
        !root.join("lib/x86_64-linux-gnu").exists(),
        "x86_64 libraries were staged"
    );
    let run = Command::new("qemu-aarch64")
        .arg("-L")
        .arg(&root)
        .arg(root.join("etc/ironic-python-agent/managers/bin/probe"))
        .output()
        .expect("qemu-aarch64 (ci/install-aarch64 installs qemu-user)");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "staged arm64 manager: 3.000\n"
    );
}

#[test]
fn an_executable_of_the_other_machine_is_refused_by_name() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("managers");
    managers(&dir);
    let out = stage("x86_64", &dir, &work.path().join("stage"));
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "stage-managers.sh: bin/probe is an ELF for 'AArch64', not x86_64\n"
    );
    assert!(
        !work.path().join("stage").exists(),
        "a partial stage was left"
    );
    std::fs::copy("/bin/true", dir.join("bin/probe")).unwrap();
    let out = stage("aarch64", &dir, &work.path().join("stage"));
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "stage-managers.sh: bin/probe is an ELF for 'Advanced Micro Devices X86-64', not aarch64\n"
    );
}
