//! An operator's executable hardware manager with a real vendor tool in
//! the booted deploy ramdisk (`agent/docs/own-steps.md`): Debian's `nvme`
//! (nvme-cli, dynamically linked) with a manifest and two busybox `sh`
//! scripts, packed with its loader and libraries by
//! `image-builder/managers-initrd.sh` into an extra initrd appended to the
//! ramdisk's initramfs (as Metal3 appends its CA). QEMU boots it with an
//! NVMe disk and a virtio disk, both filled with a pattern, and the
//! stand-in conductor drives:
//!
//! * a manual clean running the manager's step, which reads the
//!   controller's serial with `nvme id-ctrl -o json` (returned as the
//!   step's result, compared with the disk's serial) and zeroes a block
//!   range with `nvme write-zeroes` (only that range is zero afterwards);
//! * an automated clean whose `erase_devices` offers each disk to the
//!   manager's erase hook: it claims the NVMe disk (`nvme format`, then a
//!   marker block with `nvme write`) and declines the virtio disk, which
//!   gets the agent's own erase. Both disks are read back after QEMU exits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hardware_tests::bed::direct;
use hardware_tests::bed::{self, Boot, Bus, Disk, Net, NetOptions, Vm};
use hardware_tests::{repo_root, require_root, run};
use serde_json::{json, Value};

const MAC: &str = "52:54:00:12:34:6e";
const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;
const PATTERN: u8 = 0xa5;
const NVME_SERIAL: &str = "NVMEEXEC01";
/// The range the manual step zeroes, in 512-byte blocks.
const FIRST_BLOCK: u64 = 2048;
const BLOCK_COUNT: u64 = 4096;
/// What the erase hook writes into the NVMe disk's first block.
const MARKER: &str = "ERASED-BY-NVME-CLI-HOOK";

fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The manager directory: `nvmekit.yaml`, its scripts and `bin/nvme`
/// copied from this machine's nvme-cli.
fn managers(dir: &Path) {
    let nvme = Path::new("/usr/sbin/nvme");
    assert!(
        nvme.exists(),
        "{} is missing: ci/install-deps installs nvme-cli",
        nvme.display()
    );
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::copy(nvme, dir.join("bin/nvme")).unwrap();
    script(
        dir,
        "zero.sh",
        r#"field() { printf '%s' "$input" | "$AGENT_EXE" json-get "$1"; }
input=$(cat)
dev=$(field args.device); first=$(field args.first_block); count=$(field args.block_count)
nvme=${0%/*}/bin/nvme
sn=$("$nvme" id-ctrl "$dev" -o json | "$AGENT_EXE" json-get sn | sed 's/ *$//')
[ -n "$sn" ] || { echo "nvme id-ctrl gave no serial" >&2; exit 1; }
echo "zeroing $count blocks from $first on $dev (serial $sn)"
"$nvme" write-zeroes "$dev" --start-block="$first" --block-count="$((count - 1))"
echo "{\"serial\": \"$sn\", \"device\": \"$dev\"}""#,
    );
    script(
        dir,
        "erase.sh",
        &format!(
            r#"input=$(cat)
dev=$(printf '%s' "$input" | "$AGENT_EXE" json-get block_device.name)
case "$dev" in
    /dev/nvme*) ;;
    *) echo '{{"claimed": false}}'; exit 0 ;;
esac
nvme=${{0%/*}}/bin/nvme
"$nvme" format "$dev" --ses=0 --force
{{ printf '%s' '{MARKER}'; head -c $((512 - {len})) /dev/zero; }} > /tmp/marker
"$nvme" write "$dev" --start-block=0 --block-count=0 --data-size=512 --data=/tmp/marker
echo '{{"method": "nvme format"}}'"#,
            len = MARKER.len()
        ),
    );
    std::fs::write(
        dir.join("nvmekit.yaml"),
        "name: nvmekit
version: '2.3'
steps:
  - name: nvme_zero_range
    executable: zero.sh
    interface: deploy
    clean_priority: 0
    timeout: 120
    argsinfo:
      device: {description: the NVMe namespace, required: true}
      first_block: {description: the first block to zero, required: true}
      block_count: {description: how many blocks, required: true}
erase_block_device: {executable: erase.sh, timeout: 300}
",
    )
    .unwrap();
}

/// The result the conductor logged for clean step `step`.
fn step_result(transcript: &[String], step: &str) -> Option<Value> {
    let prefix = format!("C: clean step deploy.{step} done, result ");
    transcript
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|r| serde_json::from_str(r).ok())
}

fn all(data: &[u8], byte: u8) -> bool {
    data.iter().all(|&b| b == byte)
}

#[test]
fn an_appended_initrd_brings_nvme_cli_steps_into_the_ramdisk() {
    require_root("the QEMU executable managers test");
    let ramdisk = bed::ramdisk_dir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mdir = tmp.path().join("managers");
    managers(&mdir);
    let extra = tmp.path().join("managers.cpio.gz");
    run(
        Command::new(repo_root().join("image-builder/managers-initrd.sh"))
            .arg(&mdir)
            .arg(&extra),
    )
    .unwrap();
    // The kernel unpacks concatenated archives in turn.
    let combined = tmp.path().join("combined.initramfs");
    let mut bytes = std::fs::read(ramdisk.join("deploy.initramfs")).unwrap();
    bytes.extend(std::fs::read(&extra).unwrap());
    std::fs::write(&combined, bytes).unwrap();

    let disks = vec![
        Disk {
            path: tmp.path().join("nvme.img"),
            size: SIZE,
            bus: Bus::Nvme,
            serial: NVME_SERIAL.into(),
            model: None,
        },
        Disk {
            path: tmp.path().join("virtio.img"),
            size: SIZE,
            bus: Bus::Virtio,
            serial: "VIRTEXEC01".into(),
            model: None,
        },
    ];
    for d in &disks {
        std::fs::write(&d.path, vec![PATTERN; SIZE as usize]).unwrap();
    }
    let mut opts = NetOptions::pxe("execsteps", &ramdisk, "");
    opts.ramdisk = None;
    let net = Net::start(opts).unwrap();
    let mut spec = direct::ramdisk_spec(&ramdisk, MAC, &disks, "");
    if let Boot::Direct { initrd, .. } = &mut spec.boot {
        *initrd = combined.clone();
    }
    let nvme_file = disks[0].path.clone();
    let (manual, automated, console, transcript) = net
        .block_on(async {
            let conductor = direct::conductor().await;
            let uuid = conductor.enroll(&[MAC]);
            conductor
                .start_clean(
                    &uuid,
                    Some(vec![
                        json!({"interface": "deploy", "step": "nvme_zero_range",
                        "args": {"device": "/dev/nvme0n1",
                                 "first_block": FIRST_BLOCK.to_string(),
                                 "block_count": BLOCK_COUNT.to_string()}}),
                    ]),
                )
                .unwrap();
            let mut vm = Vm::start(&net, &spec).unwrap();
            let manual = conductor
                .wait_for_state(&uuid, "manageable", Duration::from_secs(180))
                .await
                .map(|_| ());
            println!("manual clean done {:?} after starting QEMU", vm.elapsed());
            // QEMU writes a raw disk file straight through (cache=unsafe
            // only drops flushes): the host reads what the guest wrote.
            let after_manual = std::fs::read(&nvme_file).unwrap();
            let automated = if manual.is_ok() {
                conductor.start_clean(&uuid, None).unwrap();
                let r = conductor
                    .wait_for_state(&uuid, "available", Duration::from_secs(240))
                    .await
                    .map(|_| ());
                println!(
                    "automated clean done {:?} after starting QEMU",
                    vm.elapsed()
                );
                r
            } else {
                Err(anyhow::anyhow!("not run: the manual clean failed"))
            };
            let console = vm.console();
            vm.kill();
            (
                manual.map(|()| after_manual),
                automated,
                console,
                conductor.transcript(),
            )
        })
        .unwrap();
    let ctx = format!(
        "\n--- transcript ---\n{}\n--- console ---\n{console}",
        transcript.join("\n")
    );

    // The manual step: nvme-cli's serial, and exactly its range zeroed.
    let after_manual =
        manual.unwrap_or_else(|e| panic!("the manual clean did not finish: {e:#}{ctx}"));
    let result = step_result(&transcript, "nvme_zero_range")
        .unwrap_or_else(|| panic!("no result of nvme_zero_range{ctx}"));
    println!("nvme_zero_range returned {result}");
    assert_eq!(result["serial"], NVME_SERIAL, "{ctx}");
    let (lo, hi) = (
        (FIRST_BLOCK * 512) as usize,
        ((FIRST_BLOCK + BLOCK_COUNT) * 512) as usize,
    );
    assert!(
        all(&after_manual[lo..hi], 0),
        "nvme write-zeroes left data in its range"
    );
    assert!(
        all(&after_manual[..lo], PATTERN) && all(&after_manual[hi..], PATTERN),
        "the disk changed outside the zeroed range"
    );

    // The automated clean: the hook took the NVMe disk, the agent the other.
    automated.unwrap_or_else(|e| panic!("the automated clean did not finish: {e:#}{ctx}"));
    let erased = step_result(&transcript, "erase_devices")
        .unwrap_or_else(|| panic!("no result of erase_devices{ctx}"));
    println!("erase_devices returned {erased}");
    assert_eq!(
        erased["/dev/nvme0n1"], "erase_block_device of executable hardware manager nvmekit",
        "{ctx}"
    );
    let generic = erased["/dev/vda"].as_str().unwrap_or_default();
    assert!(
        !generic.is_empty() && !generic.contains("nvmekit"),
        "{erased}{ctx}"
    );
    let nvme = std::fs::read(&disks[0].path).unwrap();
    assert!(
        nvme.starts_with(MARKER.as_bytes()),
        "no marker block from the hook"
    );
    assert!(
        all(&nvme[MARKER.len()..], 0),
        "nvme format left data on the NVMe disk"
    );
    let virtio = std::fs::read(&disks[1].path).unwrap();
    assert!(
        all(&virtio, 0),
        "the agent's erase left data on the virtio disk"
    );
}
