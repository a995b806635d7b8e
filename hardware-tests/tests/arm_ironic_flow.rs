//! Unmodified Ironic 39 drives an emulated Arm server through the aarch64
//! deploy ramdisk (issue 33), and the aarch64 test image it deploys boots
//! under AAVMF. Run by `ci/test-aarch64` (not `ci/test`: the aarch64
//! ramdisk's cross build takes some 30 minutes here).
//!
//! * `aarch64_test_image_boots_under_aavmf`: the aarch64 test disk image
//!   (`testimage::build_for(.., Arch::Aarch64)`: Debian's arm64 kernel,
//!   busybox and signed GRUB) as the only disk of QEMU's `virt` board
//!   (Cortex-A57, TCG) under AAVMF: the firmware starts its
//!   `BOOTAA64.EFI`, the system prints the image's marker on the PL011
//!   console and says it found no config drive.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hardware_tests::bed::{Boot, Bus, Disk, Firmware, Net, NetOptions, Vm, VmSpec};
use hardware_tests::{require_root, testimage};
use image_builder::arch::Arch;

/// One emulated Arm machine at a time: TCG on two cores.
static ONE_MACHINE: Mutex<()> = Mutex::new(());

#[test]
fn aarch64_test_image_boots_under_aavmf() {
    require_root("the aarch64 test image boot (a namespace, QEMU)");
    let _one = ONE_MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("arm{:012x}", fastrand::u64(..) >> 16);
    let t = Instant::now();
    let img = testimage::build_for(tmp.path(), &marker, Arch::Aarch64).unwrap();
    println!(
        "aarch64 test image ({} MiB) built in {:.1} s",
        img.size >> 20,
        t.elapsed().as_secs_f64()
    );
    let net = Net::start(NetOptions::no_dhcp("armimage")).unwrap();
    let spec = VmSpec {
        arch: Arch::Aarch64,
        firmware: Firmware::Uefi {
            vars: tmp.path().join("AAVMF_VARS.fd"),
        },
        memory_mb: 512,
        boot: Boot::Disk,
        disks: vec![Disk {
            path: img.raw.clone(),
            size: img.size,
            bus: Bus::Virtio,
            serial: "armimage0".into(),
            model: None,
        }],
        ..VmSpec::new("armimage")
    };
    let mut vm = Vm::start(&net, &spec).unwrap();
    let line = testimage::marker_line(&marker);
    let booted = vm
        .wait_console(&line, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("{e:#}"));
    vm.wait_console(testimage::NO_CONFIG_DRIVE, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let console = vm.console();
    println!(
        "aarch64 test image: marker after {:.1} s under AAVMF",
        booted.as_secs_f64()
    );
    // arm64's first kernel line, and the PL011 as the console.
    for want in ["Booting Linux on physical CPU", "ttyAMA0"] {
        assert!(
            console.contains(want),
            "{want:?} not on the console: {}",
            vm.console_path().display()
        );
    }
}
