//! What the Arm server suites (`arm_ironic_flow.rs` over virtual media,
//! `arm_ironic_pxe.rs` over Ironic's `pxe` interface; issue 33) share: one
//! run of [`super::arm_server`]'s flow on a bed of its own, its wall times
//! kept in `target/bed-logs/<bed>/flow-times.txt`, and the Secure Boot
//! checks on the console it left.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use super::arm_pxe::ArmBoot;
use super::arm_server::{self, ArmBed, ArmFiles, ArmRun};
use super::deploy::Printer;

/// What one run of the flow left for a suite's checks.
#[derive(Debug)]
pub struct ArmSeen {
    /// What the flow saw, from enrolment to the deployed system's boot.
    pub done: ArmRun,
    /// The files Ironic served (and the test image's marker).
    pub files: ArmFiles,
    /// dnsmasq's log (DHCP offers and TFTP transfers).
    pub dnsmasq: String,
    /// Ironic's log.
    pub ironic_log: PathBuf,
    /// The machine's console log.
    pub console: PathBuf,
}

impl ArmSeen {
    /// Where to look when a check fails: Ironic's log and the console.
    pub fn logs(&self) -> String {
        format!(
            "Ironic's log: {}; console: {}",
            self.ironic_log.display(),
            self.console.display()
        )
    }
}

/// Prints a wall time and appends it to `times`.
fn timing(times: &Path, line: String) {
    println!("{line}");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(times)
    {
        let _ = writeln!(f, "{line}");
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Runs the Arm flow with `boot` on a bed named `name` (its logs in
/// `target/bed-logs/<name>`): the aarch64 ramdisk's files and a test image
/// printing `marker` (config drive for `instance`), Ironic and the BMC up,
/// the node enrolled with only `cpu_arch` and `boot`'s interface (its
/// `driver_info` names no deploy kernel, ramdisk or bootloader: Ironic's
/// `*_by_arch` settings must choose them), then inspection, cleaning,
/// deploy and the disk's boot. A failure names Ironic's log, the console
/// and dnsmasq's log.
pub fn run(name: &str, boot: ArmBoot, marker: &str, instance: &str) -> Result<ArmSeen> {
    let total = Instant::now();
    let times = super::logs_dir(name)?.join("flow-times.txt");
    std::fs::write(&times, "")?;
    let ramdisk = super::aarch64_ramdisk_dir()?;
    for f in ["shimaa64.efi", "grubaa64.efi", boot.kernel_file()] {
        ensure!(
            ramdisk.join(f).exists(),
            "{} lacks {f}: build it with image-builder/build.sh --arch aarch64",
            ramdisk.display()
        );
    }

    let t = Instant::now();
    let files = ArmFiles::prepare_for(&ramdisk, marker, boot)?;
    timing(
        &times,
        format!("aarch64 test image and ESPs built in {}", secs(t.elapsed())),
    );
    let net = arm_server::start_net_for(name, &files)?;
    let t = Instant::now();
    let mut out = Printer::new(total);
    let bed = ArmBed::start(&net, &files, &mut out)?;
    timing(
        &times,
        format!(
            "BMC, http server and Ironic up in {} ({} since start)",
            secs(t.elapsed()),
            secs(total.elapsed())
        ),
    );
    let t0 = Instant::now();
    let result = net.block_on(async {
        let node = bed.enroll().await?;
        ensure!(
            node["boot_interface"] == boot.interface(),
            "the node's boot interface is not {}: {node}",
            boot.interface()
        );
        for key in ["deploy_kernel", "deploy_ramdisk", "bootloader"] {
            ensure!(
                node["driver_info"].get(key).is_none(),
                "the node names its {key}: {node}"
            );
        }
        let uuid = node["uuid"].as_str().unwrap_or_default();
        let mut flow = bed.flow(uuid);
        arm_server::run(&mut flow, &bed, &files, instance).await
    })?;
    let done = result.with_context(|| {
        format!(
            "the Arm flow ({}); Ironic's log: {}; console: {}; dnsmasq: {}",
            boot.interface(),
            bed.ironic.log_path().display(),
            bed.system.console.display(),
            net.logs.join("dnsmasq.log").display()
        )
    })?;
    for (phase, took) in &done.times {
        timing(&times, format!("phase {phase}: {}", secs(*took)));
    }
    timing(
        &times,
        format!(
            "arm flow ({}{}): enroll → active + disk boot in {} with {} ramdisk boot; whole test {}",
            boot.interface(),
            if boot.secure_boot() { ", Secure Boot" } else { "" },
            secs(t0.elapsed()),
            done.ramdisk_boots,
            secs(total.elapsed())
        ),
    );
    Ok(ArmSeen {
        dnsmasq: net.dnsmasq_log(),
        ironic_log: bed.ironic.log_path().to_path_buf(),
        console: bed.system.console.clone(),
        done,
        files,
    })
}

/// What every Arm flow must have done, from Ironic's records and the
/// console: the inventory Ironic stored is the aarch64 machine's (booted
/// by UEFI), cleaning removed the disk's GPT, the node is `active` with
/// no error on `boot`'s interface, and the deployed system printed the
/// config drive of `instance`, all in one ramdisk boot.
pub fn check_flow(seen: &ArmSeen, boot: ArmBoot, instance: &str) -> Result<()> {
    let done = &seen.done;
    let inv = &done.inventory["inventory"];
    ensure!(
        inv["cpu"]["architecture"] == "aarch64",
        "the inventory Ironic stored is not an aarch64 machine's: {inv:#}"
    );
    ensure!(
        inv["boot"]["current_boot_mode"] == "uefi",
        "the inventory Ironic stored says no UEFI boot: {inv:#}"
    );
    ensure!(
        done.inspected["properties"]["cpu_arch"] == "aarch64",
        "inspection did not set cpu_arch aarch64: {}",
        done.inspected
    );
    ensure!(
        !done.blkid_after_clean.contains("PTTYPE"),
        "cleaning left the disk's partition table: {}",
        done.blkid_after_clean
    );
    ensure!(
        done.active["last_error"].is_null(),
        "the active node has an error: {}",
        done.active["last_error"]
    );
    ensure!(
        done.active["boot_interface"] == boot.interface(),
        "the active node's boot interface is not {}: {}",
        boot.interface(),
        done.active["boot_interface"]
    );
    ensure!(
        done.meta_data["uuid"] == instance,
        "the deployed system's config drive is not instance {instance}'s: {}",
        done.meta_data
    );
    ensure!(
        done.ramdisk_boots == 1,
        "{} ramdisk boots, not one; {}",
        done.ramdisk_boots,
        seen.logs()
    );
    Ok(())
}

/// The kernel's line when the firmware enforces Secure Boot.
const SB_KERNEL: &str = "Secure boot enabled";
/// The agent's boot-phase line under Secure Boot with lockdown.
const SB_AGENT: &str = "phase firmware: secure boot on, lockdown integrity";

/// Under Secure Boot: the ramdisk's kernel says it is on, the agent
/// reports lockdown, and the last kernel on the console (the deployed
/// system's, printing its marker) says it is on too.
pub fn check_secure_boot(seen: &ArmSeen) -> Result<()> {
    let text = &seen.done.console;
    ensure!(
        text.contains(SB_KERNEL),
        "the ramdisk's kernel does not say Secure Boot is on; {}",
        seen.logs()
    );
    ensure!(
        text.contains(SB_AGENT),
        "the agent does not report Secure Boot and lockdown; {}",
        seen.logs()
    );
    let after = text
        .rfind("Booting Linux on physical CPU")
        .and_then(|at| text.get(at..))
        .unwrap_or_default();
    ensure!(
        after.contains(&crate::testimage::marker_line(&seen.files.marker)),
        "the last kernel on the console is not the deployed system's; {}",
        seen.logs()
    );
    ensure!(
        after.contains(SB_KERNEL),
        "the deployed system's kernel does not say Secure Boot is on; {}",
        seen.logs()
    );
    Ok(())
}

/// Without the Microsoft-keyed NVRAM no kernel says Secure Boot is on.
pub fn check_no_secure_boot(seen: &ArmSeen) -> Result<()> {
    if seen.done.console.contains(SB_KERNEL) {
        bail!(
            "Secure Boot is on without the Microsoft-keyed NVRAM; {}",
            seen.logs()
        );
    }
    Ok(())
}
