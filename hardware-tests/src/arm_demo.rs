//! `demo --arch aarch64` (issue 33): the Arm server flow of
//! `tests/qemu/arm_ironic_flow.rs` ([`crate::bed::arm_server`]) told as the
//! x86_64 demo tells its own. Unmodified Ironic 39.0.0 drives an emulated
//! Arm server (an aarch64 libvirt domain: QEMU's `virt` board, Cortex-A57,
//! TCG, AAVMF) behind the bed's Redfish BMC by virtual media: it picks the
//! aarch64 deploy kernel, ramdisk and ESP by the node's `cpu_arch`
//! (`[conductor] *_by_arch`), inspects the machine, cleans it and deploys
//! the aarch64 test image with a config drive; the deployed system boots
//! under AAVMF. This file holds the preparation (the aarch64 ramdisk,
//! built when missing; the test image and Ironic's files), the printing
//! around the shared flow and the closing summary.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use image_builder::arch::Arch;

use crate::bed::arm_server::{self, ArmBed, ArmFiles};
use crate::bed::deploy::{self, Printer};
use crate::bed::{self, BRIDGE_IP};

/// The demo's `--arch ARCH` (or `--arch=ARCH`) taken out of `args`:
/// `None` without one. The Arm flow is UEFI (AAVMF), real Ironic and the
/// bed's BMC, so `--arch aarch64` with `--bios`, `--test-conductor` or
/// `--bmc…` is refused, naming them; `--arch x86_64` is the default and
/// goes with every flag.
pub fn take_arch(args: &[String]) -> Result<(Option<Arch>, Vec<String>)> {
    let mut arch = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = if arg == "--arch" {
            it.next()
                .context("--arch needs a value: x86_64 or aarch64")?
                .as_str()
        } else if let Some(v) = arg.strip_prefix("--arch=") {
            v
        } else {
            rest.push(arg.clone());
            continue;
        };
        arch = Some(match value {
            "x86_64" => Arch::X86_64,
            "aarch64" => Arch::Aarch64,
            other => bail!("unknown --arch value {other:?}: x86_64 or aarch64"),
        });
    }
    if arch == Some(Arch::Aarch64) {
        let refused: Vec<&str> = rest
            .iter()
            .map(|a| a.split('=').next().unwrap_or(a))
            .filter(|a| a.starts_with("--bmc") || matches!(*a, "--bios" | "--test-conductor"))
            .collect();
        if !refused.is_empty() {
            bail!(
                "--arch aarch64 does not go with {}: the Arm demo runs UEFI (AAVMF) under real \
                 Ironic behind the bed's own BMC",
                refused.join(", ")
            );
        }
        if let Some(other) = rest.iter().find(|a| *a != "--uefi") {
            bail!("unknown flag {other:?} with --arch aarch64 (ci/demo --help lists every flag)");
        }
    }
    Ok((arch, rest))
}

/// Runs the Arm demo, printing through `out` (as root).
pub fn main(mut out: Printer) -> Result<()> {
    let mut prep = Vec::new();
    let ramdisk = bed::aarch64_ramdisk_location();
    if bed::ramdisk_built(&ramdisk) {
        out.line(format!(
            "aarch64 deploy ramdisk: {} (built before)",
            ramdisk.display()
        ));
    } else {
        let log = bed::logs_dir("demo")?.join("ramdisk-aarch64-build.log");
        out.line(format!(
            "building the aarch64 deploy ramdisk into {} (image-builder/build.sh --arch aarch64: \
             the agent cross-built for aarch64 musl, Debian's arm64 kernel); the cross build \
             takes about 30 minutes on this machine; log {}",
            ramdisk.display(),
            log.display()
        ));
        let t = Instant::now();
        out.meanwhile("building the aarch64 deploy ramdisk", Some(&log), || {
            bed::build_aarch64_ramdisk(&ramdisk, Some(&log))
        })?;
        out.line(format!(
            "aarch64 deploy ramdisk built in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        prep.push(("aarch64 ramdisk", t.elapsed()));
    }

    let marker = format!("armdemo-{:08x}", fastrand::u32(..));
    out.line(format!(
        "building the aarch64 test image (Debian's arm64 kernel, busybox, signed GRUB; its \
         system prints {marker}), the ESPs and Ironic's http_root"
    ));
    let t = Instant::now();
    let files = out
        .meanwhile("building the aarch64 test image", None, || {
            ArmFiles::prepare(&ramdisk, &marker)
        })
        .context("preparing the Arm flow's files")?;
    prep.push(("test image", t.elapsed()));
    out.line(format!(
        "aarch64 test image and ESPs built in {:.1} s ({} MiB qcow2, sha256 {}…)",
        t.elapsed().as_secs_f64(),
        files.qcow2_size >> 20,
        files.qcow2_sha256.get(..16).unwrap_or_default()
    ));

    out.line(format!(
        "starting the bed's network (a namespace, bridge {BRIDGE_IP}, dnsmasq with a fixed lease \
         for the Arm domain's MAC {})",
        arm_server::MAC
    ));
    let net = arm_server::start_net("armdemo")?;
    out.line(
        "starting the machine's BMC (sushy-tools' Redfish emulator, a private libvirtd; the \
         machine is an aarch64 libvirt domain: virt, Cortex-A57, TCG, AAVMF, 2 vCPUs, 1 GiB)",
    );
    let t = Instant::now();
    let bed = ArmBed::start(&net, &files, &mut out)?;
    prep.push(("bed, Ironic", t.elapsed()));

    let instance = deploy::random_uuid();
    let flow_start = Instant::now();
    let report = out.clone();
    let done = net.block_on(async {
        let node = bed.enroll().await?;
        let uuid = node["uuid"].as_str().context("node without uuid")?;
        let mut flow = bed.flow(uuid).reporting(report);
        flow.say("");
        flow.say(format!(
            "enrolled node armvm ({uuid}): redfish {}{}, redfish-virtual-media boot, port {}, \
             UEFI, cpu_arch aarch64; no deploy kernel, ramdisk or bootloader in its driver_info \
             (Ironic picks them by arch)",
            bed.bmc.url(),
            bed.system.path(),
            arm_server::MAC
        ));
        let result = arm_server::run(&mut flow, &bed, &files, &instance).await;
        if let Err(e) = &result {
            flow.say(format!("failed: {e:#}"));
            flow.say(format!(
                "Ironic's log: {}; console: {}",
                bed.ironic.log_path().display(),
                bed.system.console.display()
            ));
        }
        result
    })??;

    out.line("");
    out.line("== summary");
    for (phase, took) in prep.iter().chain(&done.times) {
        out.line(format!("{phase:>15}: {:6.1} s", took.as_secs_f64()));
    }
    out.line(format!(
        "enroll → deployed system up: {:.1} s, {} boot(s) of the aarch64 deploy ramdisk by \
         virtual media; {:.1} s since the demo started",
        flow_start.elapsed().as_secs_f64(),
        done.ramdisk_boots,
        out.elapsed().as_secs_f64()
    ));
    if done.meta_data["uuid"] != instance.as_str() {
        anyhow::bail!(
            "the config drive does not carry instance uuid {instance}: {}",
            done.meta_data
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::take_arch;
    use image_builder::arch::Arch;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arch_is_taken_out_of_the_flags() {
        let (arch, rest) = take_arch(&args(&["--bios"])).unwrap();
        assert_eq!((arch, rest), (None, args(&["--bios"])));
        let (arch, rest) = take_arch(&args(&["--arch", "aarch64"])).unwrap();
        assert_eq!((arch, rest), (Some(Arch::Aarch64), vec![]));
        let (arch, rest) = take_arch(&args(&["--arch=x86_64", "--bios"])).unwrap();
        assert_eq!((arch, rest), (Some(Arch::X86_64), args(&["--bios"])));
    }

    #[test]
    fn arch_refuses_unknown_values_and_arm_refuses_the_x86_only_flags() {
        let err = format!(
            "{:#}",
            take_arch(&args(&["--arch", "riscv64"])).unwrap_err()
        );
        assert!(
            err.contains("\"riscv64\"") && err.contains("x86_64 or aarch64"),
            "{err}"
        );
        assert!(take_arch(&args(&["--arch"])).is_err());
        let err = format!(
            "{:#}",
            take_arch(&args(&[
                "--arch",
                "aarch64",
                "--bios",
                "--bmc=https://x",
                "--test-conductor"
            ]))
            .unwrap_err()
        );
        assert!(err.contains("--bios, --bmc, --test-conductor"), "{err}");
        let err = format!(
            "{:#}",
            take_arch(&args(&["--arch=aarch64", "--frobnicate"])).unwrap_err()
        );
        assert!(err.contains("--frobnicate"), "{err}");
        assert!(take_arch(&args(&["--uefi", "--arch", "aarch64"])).is_ok());
    }
}
